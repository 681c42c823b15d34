"""Kernel oracle: run a FlashInfer wrapper eagerly on fake CUDA tensors, on CPU, with only the kernel launch stubbed.

FlashInfer's Python wrappers (and the "kernel entries" inside their ``get_*_module`` loaders, e.g.
``fp4_batched_quantize_sm100`` in ``get_fp4_quantization_module``, FlashInfer 0.6.0
``flashinfer/fp4_quantization.py``, 0.7.4 ``flashinfer/quantization/fp4_quantization.py``) allocate their
outputs in Python, then launch an opaque JIT-compiled kernel (``module.<kernel>(...)``, a tvm-ffi call). So
the shapes, strides and dtypes a wrapper returns on a GPU can be read on a CPU-only machine: run the wrapper
under :class:`torch._subclasses.fake_tensor.FakeTensorMode` on tensors whose device is ``cuda``, with the
device queries answered by stand-ins and the loaded JIT module replaced by a :class:`KernelRecorder`, whose
every attribute is a no-op kernel launch that records its arguments. Nothing else of the wrapper is changed,
so its own checks (asserts, ``ValueError``, tuple unpacking of shapes) still run; the kernel's C++ checks do
not (they are the kernel's, see :attr:`KernelRecorder.calls` for what it would have received).

That metadata is the oracle a custom op's fake is checked against (``tests/test_op_*.py``). The module is
generic: it knows nothing about a particular FlashInfer function. It is imported by a child interpreter whose
``sys.path`` holds a FlashInfer site-packages (FlashInfer and torch are imported lazily, never at import of
this module), and it needs only torch (a CPU build) and FlashInfer's import-time dependencies.

Typical use (in the child)::

    import kernel_oracle as ko
    with ko.device_stubs(), ko.jit_modules_replaced() as kernels, ko.fake_mode() as mode:
        x = ko.cuda_tensor((4, 8, 64), torch.bfloat16)
        out = flashinfer.nvfp4_batched_quantize(x, ko.cuda_tensor((1,), torch.float32))
        print(ko.metadata(out), kernels.calls)
"""

from __future__ import annotations

import collections
import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any

#: What the stubbed device reports (an SM100 Blackwell part, as ``fp4patch/trace_probe.py`` uses).
DEFAULT_CAPABILITY = (10, 0)
DEFAULT_SM_COUNT = 148

_Props = collections.namedtuple(
    "_OracleDeviceProperties", "major minor name multi_processor_count total_memory L2_cache_size"
)


_Stream = collections.namedtuple("_Stream", "cuda_stream")


class KernelRecorder:
    """Stands in for a loaded JIT module (the object ``JitSpec.build_and_load()`` returns).

    Every attribute is a kernel launch that does nothing and returns None; each call is appended to
    ``calls`` as ``(kernel name, positional arguments, keyword arguments)`` (the objects themselves,
    fake tensors included). ``returns`` maps a kernel name to a callable computing its return value from
    its arguments, for the few kernels that return something instead of writing into outputs.
    """

    def __init__(self, returns: dict[str, Callable[..., Any]] | None = None) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.returns = dict(returns or {})

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)

        def launch(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            make = self.returns.get(name)
            return make(*args, **kwargs) if make is not None else None

        launch.__name__ = name
        return launch

    def names(self) -> list[str]:
        """The kernel names launched so far, in order."""
        return [name for name, _, _ in self.calls]


@contextlib.contextmanager
def replaced(targets: dict[str, Any]) -> Iterator[None]:
    """Temporarily set attributes: ``{"package.module:Attr.sub": value}``; restored on exit (also on error).

    Use it for kernel launches that are plain Python functions rather than a JIT module's attribute (a
    CuTe-DSL or cuTile launcher imported inside the wrapper). Raises ``AttributeError`` when a target's
    parent does not exist: a stale target must fail loudly, never stub nothing.
    """
    saved = []
    try:
        for where, value in targets.items():
            module_name, _, attr_path = where.partition(":")
            owner: Any = importlib.import_module(module_name)
            *parents, attr = attr_path.split(".")
            for p in parents:
                owner = getattr(owner, p)
            had = attr in vars(owner) if isinstance(owner, type) else hasattr(owner, attr)
            saved.append((owner, attr, had, getattr(owner, attr, None)))
            setattr(owner, attr, value)
        yield
    finally:
        for owner, attr, had, old in reversed(saved):
            if had:
                setattr(owner, attr, old)
            else:
                delattr(owner, attr)


@contextlib.contextmanager
def device_stubs(
    capability: tuple[int, int] = DEFAULT_CAPABILITY, sm_count: int = DEFAULT_SM_COUNT, cuda_available: bool = True
) -> Iterator[None]:
    """Answer CUDA device queries on a machine without a GPU (restored on exit).

    Stubs ``torch.cuda.get_device_capability`` (→ ``capability``), ``get_device_properties``,
    ``current_device`` (→ 0), ``get_device_name``, ``current_stream`` (→ an object whose ``cuda_stream`` is 0), and
    ``Tensor.cuda()`` of a tensor already on ``cuda`` (→ itself, e.g. ``mxfp4_quantize``'s ``a.cuda()``), and
    with ``cuda_available`` also ``is_available`` (→ True) and ``device_count`` (→ 1): FlashInfer reads the
    architectures at import (``jit/core.py`` ``check_cuda_arch`` refuses an empty list), so import it and run
    wrappers eagerly with them; but leave them out (``cuda_available=False``) around ``torch.compile``, whose
    own set-up then tries to initialise CUDA ("Torch not compiled with CUDA enabled"). FlashInfer reads the capability through these (``utils.get_compute_capability``,
    ``device_support_pdl``), before choosing which JIT module to load.
    """
    import torch

    props = _Props(*capability, f"kernel-oracle-sm{capability[0]}{capability[1]}", sm_count, 1 << 37, 1 << 27)
    stubs = {
        "get_device_capability": lambda device=None: capability,
        "get_device_properties": lambda device=None: props,
        "current_device": lambda: 0,
        "get_device_name": lambda device=None: props.name,
        "current_stream": lambda device=None: _Stream(0),
    }
    if cuda_available:
        stubs.update(is_available=lambda: True, device_count=lambda: 1)
    saved = {name: getattr(torch.cuda, name) for name in stubs}
    tensor_cuda = torch.Tensor.cuda

    def cuda(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self if self.device.type == "cuda" and not args and not kwargs else tensor_cuda(self, *args, **kwargs)

    try:
        for name, fn in stubs.items():
            setattr(torch.cuda, name, fn)
        torch.Tensor.cuda = cuda
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.cuda, name, fn)
        torch.Tensor.cuda = tensor_cuda


@contextlib.contextmanager
def jit_modules_replaced(recorder: KernelRecorder | None = None) -> Iterator[KernelRecorder]:
    """Make every ``JitSpec.build_and_load()`` return ``recorder`` (one shared :class:`KernelRecorder`).

    Patches ``build_and_load`` on each class of ``flashinfer.jit.core`` that defines it (``JitSpec`` in
    0.6.0; ``JitSpec`` and its subclasses in 0.7.x), so no nvcc, no file system, no ``.so`` is touched and
    the wrapper's ``module.<kernel>(...)`` lands in the recorder. The ``get_*_module`` loaders are
    ``functools.cache``d: use a fresh interpreter per release (their first call must happen in here).
    """
    recorder = recorder if recorder is not None else KernelRecorder()
    core = importlib.import_module("flashinfer.jit.core")
    owners = [c for c in vars(core).values() if isinstance(c, type) and "build_and_load" in vars(c)]
    if not owners:
        raise AttributeError("flashinfer.jit.core: no class defines build_and_load; the oracle needs updating")
    saved = [(c, vars(c)["build_and_load"]) for c in owners]
    try:
        for c in owners:
            c.build_and_load = lambda self, *a, **k: recorder
        yield recorder
    finally:
        for c, fn in saved:
            c.build_and_load = fn


@contextlib.contextmanager
def fake_mode(shape_env: Any = None) -> Iterator[Any]:
    """A ``FakeTensorMode`` (optionally with a ``ShapeEnv`` for symbolic sizes) that allows CPU constants."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True, shape_env=shape_env) as mode:
        yield mode


def cuda_tensor(shape: tuple, dtype: Any, stride: tuple | None = None) -> Any:
    """A tensor on device ``cuda`` with ``shape`` (and ``stride``): call inside :func:`fake_mode`."""
    import torch

    if stride is None:
        return torch.empty(shape, dtype=dtype, device="cuda")
    return torch.empty_strided(shape, stride, dtype=dtype, device="cuda")


def metadata(out: Any) -> Any:
    """``[shape, stride, dtype]`` of each tensor in ``out`` (nested tuples/lists kept); other values as ``repr``.

    Symbolic sizes are written with ``str`` (e.g. ``"s0"``), so results are JSON-serialisable.
    """
    import torch

    def dim(d: Any) -> Any:
        return d if isinstance(d, int) else str(d)

    if isinstance(out, torch.Tensor):
        return [[dim(d) for d in out.shape], [dim(s) for s in out.stride()], str(out.dtype)]
    if isinstance(out, (tuple, list)):
        return [metadata(o) for o in out]
    return repr(out)


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict:
    """Call ``fn``: ``{"ok": metadata(result)}``, or ``{"error": [exception class name, first line of message]}``.

    Used to compare a fake with the wrapper on invalid input as well: both must raise the same class with
    the same message.
    """
    try:
        return {"ok": metadata(fn(*args, **kwargs))}
    except Exception as e:  # noqa: BLE001 - the point is to report any failure
        text = str(e).strip().splitlines()
        return {"error": [type(e).__name__, text[0] if text else ""]}


@contextlib.contextmanager
def modules_injected(modules: dict[str, dict[str, Any]]) -> Iterator[None]:
    """Temporarily put stand-in modules into ``sys.modules``: ``{"pkg.mod": {"attr": value}}`` (restored on exit).

    For kernel launchers that live in a module which cannot be imported on this machine (a cuTile or
    CuTe-DSL kernel module importing its GPU compiler), imported by the wrapper inside the call.
    """
    import sys
    import types

    saved = {name: sys.modules.get(name) for name in modules}
    try:
        for name, attrs in modules.items():
            stand_in = types.ModuleType(name)
            stand_in.__dict__.update(attrs)
            sys.modules[name] = stand_in
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


def load_op_source(path: str, module_globals: dict, release: dict | None = None, op: Any = None, wrapper: Any = None) -> Any:
    """Execute an fp4patch op source (``patches/<distribution>/ops/<function>.py``) as the renderer places it.

    The source runs in a copy of ``module_globals`` (the namespace of the module defining the wrapper, so
    names such as ``_UNSET`` or ``SfLayout`` resolve as they do after ``fp4patch apply``), with ``RELEASE``
    updated by ``release`` and the placeholders ``OP`` / ``WRAPPER`` bound to ``op`` / ``wrapper``. Returns
    the namespace as an object (``.entry``, ``.op``, ``.fake``, ``.RELEASE``, ``.MUTATES_ARGS``, and ``.globals``,
    the functions' global namespace: set ``.globals["OP"] = src.fake`` to run ``entry`` into the fake). A
    parameter that a release lacks is simply not passed: the source's default then stands for it, as the
    renderer binds it.
    """
    import types
    from pathlib import Path

    from fp4patch.custom_op import plain_source, read_helpers

    with open(path, encoding="utf-8") as f:
        text = f.read()
    # The placeholders OP_PARAMS / OMIT expanded and the shared helpers inlined, as the renderer does.
    code = compile(plain_source(text, read_helpers(text, Path(path).parent)), path, "exec")
    ns = dict(module_globals)
    exec(code, ns)  # noqa: S102 - an op source of this repository, as the renderer places it
    ns["RELEASE"] = {**ns.get("RELEASE", {}), **(release or {})}
    ns["OP"] = op
    ns["WRAPPER"] = wrapper
    return types.SimpleNamespace(globals=ns, **{k: ns[k] for k in ("entry", "op", "fake", "RELEASE", "MUTATES_ARGS")})


def _basic_index(t: Any, idx: Any) -> Any:
    """``t[idx]`` for basic indexing (ints, slices, ``None``, ``...``) through aten view ops; None if not basic."""
    import torch

    aten = torch.ops.aten
    items = idx if isinstance(idx, tuple) else (idx,)
    if not all(i is None or i is Ellipsis or isinstance(i, (int, slice)) for i in items):
        return None
    if any(i is Ellipsis for i in items):
        at = items.index(Ellipsis)
        used = sum(1 for i in items if i is not None and i is not Ellipsis)
        items = items[:at] + (slice(None),) * (t.dim() - used) + items[at + 1 :]
    out, dim = t, 0
    for i in items:
        if i is None:
            out = aten.unsqueeze.default(out, dim)
            dim += 1
        elif isinstance(i, slice):
            out = aten.slice.Tensor(out, dim, i.start, i.stop, 1 if i.step is None else i.step)
            dim += 1
        else:
            out = aten.select.int(out, dim, i)
    return out


@contextlib.contextmanager
def fake_cuda_indexing() -> Iterator[None]:
    """Let ``t[...]`` and ``t[...] = v`` work on fake CUDA tensors in a CPU-only torch build (restored on exit).

    Python indexing of a tensor whose device is ``cuda`` enters a CUDA device guard, which a CPU build
    refuses ("PyTorch is not linked with support for cuda devices") even under ``FakeTensorMode``. Wrappers
    that pad or fill a buffer before the kernel launch (e.g. ``input_tensor[:, :, :k] = a``) need it. Basic
    indices are rewritten to the aten view ops (``slice``, ``select``, ``unsqueeze``) and assignment to
    ``copy_`` / ``fill_`` of that view, which is what the indexing does; other indices take the original path.
    """
    import torch

    get, put = torch.Tensor.__getitem__, torch.Tensor.__setitem__

    def getitem(self: Any, idx: Any) -> Any:
        if self.device.type == "cuda":
            view = _basic_index(self, idx)
            if view is not None:
                return view
        return get(self, idx)

    def setitem(self: Any, idx: Any, value: Any) -> None:
        if self.device.type == "cuda":
            view = _basic_index(self, idx)
            if view is not None:
                if isinstance(value, torch.Tensor):
                    torch.ops.aten.copy_.default(view, value)
                else:
                    torch.ops.aten.fill_.Scalar(view, value)
                return
        put(self, idx, value)

    torch.Tensor.__getitem__, torch.Tensor.__setitem__ = getitem, setitem
    try:
        yield
    finally:
        torch.Tensor.__getitem__, torch.Tensor.__setitem__ = get, put
