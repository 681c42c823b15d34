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

That metadata is the oracle a custom op's fake is checked against: by ``fp4patch/probes/fake_check_probe.py``
(the product's check of an op on a release it was not verified on, over the op's case grid
``patches/<distribution>/grids/<function>.py``) and by the tests (``tests/test_op_*.py``). The module is
generic: it knows nothing about a particular FlashInfer function. It is loaded by file path in a child
interpreter whose ``sys.path`` holds a FlashInfer site-packages, where fp4patch need not be installed: it
imports only the standard library at module level, and torch and FlashInfer lazily, inside its functions
(never fp4patch). It needs only torch (a CPU build) and FlashInfer's import-time dependencies.

Typical use (in the child)::

    oracle = <this file, loaded by path>
    with oracle.device_stubs(), oracle.jit_modules_replaced() as kernels, oracle.fake_mode() as mode:
        x = oracle.cuda_tensor((4, 8, 64), torch.bfloat16)
        out = flashinfer.nvfp4_batched_quantize(x, oracle.cuda_tensor((1,), torch.float32))
        print(oracle.metadata(out), kernels.calls)
"""

from __future__ import annotations

import collections
import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any

#: What the stubbed device reports (an SM100 Blackwell part, as ``fp4patch/probes/trace_probe.py`` uses).
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

    FlashInfer caches some of those answers (``functools.cache`` on ``flashinfer/utils.py``
    ``get_compute_capability``, 0.7.4; ``flashinfer/cute_dsl/utils.py``'s device queries): the caches of
    the functions defined in :data:`DEVICE_CACHE_MODULES` (those already imported) are cleared on entry and
    on exit, so nested stubs of another ``capability`` (an SM107 case inside an SM100 run) are seen.
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
        _clear_device_caches()
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.cuda, name, fn)
        torch.Tensor.cuda = tensor_cuda
        _clear_device_caches()


#: Modules whose cached device queries :func:`device_stubs` clears (FlashInfer 0.6.x-0.7.x).
DEVICE_CACHE_MODULES = ("flashinfer.utils", "flashinfer.cute_dsl.utils")


def _clear_device_caches() -> None:
    """``cache_clear()`` every cached function defined in an imported module of :data:`DEVICE_CACHE_MODULES`."""
    import sys

    for module_name in DEVICE_CACHE_MODULES:
        module = sys.modules.get(module_name)
        for value in list(vars(module).values()) if module is not None else ():
            if callable(getattr(value, "cache_clear", None)) and getattr(value, "__module__", "") == module_name:
                value.cache_clear()


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


def metadata(out: Any, inputs: dict[str, Any] | None = None) -> Any:
    """``[shape, stride, dtype]`` of each tensor in ``out`` (nested tuples/lists kept); other values as ``repr``.

    Symbolic sizes are written with ``str`` (e.g. ``"s0"``), so results are JSON-serialisable. With
    ``inputs`` (parameter name -> argument), an output that *is* one of those tensors (the caller's own
    ``out=`` handed back, not a copy) gets the parameter's name as a fourth item:
    ``[shape, stride, dtype, "out"]``.
    """
    import torch

    def dim(d: Any) -> Any:
        return d if isinstance(d, int) else str(d)

    if isinstance(out, torch.Tensor):
        meta = [[dim(d) for d in out.shape], [dim(s) for s in out.stride()], str(out.dtype)]
        same = [name for name, value in (inputs or {}).items() if value is out]
        return meta + same[:1]
    if isinstance(out, (tuple, list)):
        return [metadata(o, inputs) for o in out]
    return repr(out)


def first_line(exc: BaseException) -> list[str]:
    """``[exception class name, first line of its message]`` (``""`` for an empty message)."""
    text = str(exc).strip().splitlines()
    return [type(exc).__name__, text[0] if text else ""]


def call_outcome(fn: Callable[..., Any], args: tuple | list = (), kwargs: dict | None = None, inputs: dict[str, Any] | None = None) -> dict:
    """Call ``fn(*args, **kwargs)``: ``{"ok": metadata(result, inputs)}``, or ``{"error": first_line(exception)}``.

    Used to compare a fake with the wrapper on invalid input as well: both must raise the same class with
    the same message. ``inputs`` as for :func:`metadata` (which outputs are an argument itself).
    """
    try:
        return {"ok": metadata(fn(*args, **(kwargs or {})), inputs)}
    except Exception as e:  # noqa: BLE001 - the point is to report any failure
        return {"error": first_line(e)}


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict:
    """``call_outcome(fn, args, kwargs)``: ``{"ok": metadata}`` or ``{"error": [class, first line]}``."""
    return call_outcome(fn, args, kwargs)


@contextlib.contextmanager
def environment(values: dict[str, str | None]) -> Iterator[None]:
    """Set environment variables (``None``: unset) for the duration; the previous values restored on exit.

    FlashInfer reads some per call (``FLASHINFER_NVFP4_QUANTIZE_USE_TMA``, ``FLASHINFER_NVFP4_4OVER6``:
    which CuTe-DSL kernel ``fp4_quantize`` runs, 0.6.16+), and an op's fake reads the same ones.
    """
    import os

    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


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


@contextlib.contextmanager
def fake_cuda_contiguous() -> Iterator[None]:
    """Let ``t.contiguous()`` of a non-contiguous fake CUDA tensor work in a CPU-only torch build (restored on exit).

    The Python binding enters a CUDA device guard, as indexing does (see :func:`fake_cuda_indexing`); the
    CuTe-DSL drivers of ``fp4_quantize`` call it on their input (``flashinfer/quantization/kernels/``,
    0.6.8+). A non-contiguous CUDA tensor is copied with ``aten.clone`` in the requested memory format,
    which is what ``contiguous`` does; every other tensor takes the original path.
    """
    import torch

    original = torch.Tensor.contiguous

    def contiguous(self: Any, memory_format: Any = torch.contiguous_format) -> Any:
        if self.device.type == "cuda":
            if self.is_contiguous(memory_format=memory_format):
                return self
            return torch.ops.aten.clone.default(self, memory_format=memory_format)
        return original(self, memory_format=memory_format)

    torch.Tensor.contiguous = contiguous
    try:
        yield
    finally:
        torch.Tensor.contiguous = original


# --------------------------------------------------------------------------- #
# Stand-in packages for GPU compilers that are not installed (cutlass, cuda-python)
# --------------------------------------------------------------------------- #
class _Stub:
    """Any attribute, call, subscript, arithmetic or base-class use of a stubbed package's names."""

    def __init__(self, name: str = "stub") -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _Stub(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import types

        # a decorator (@cute.jit, @cute.kernel, @dsl_user_op) keeps the function it decorates
        if len(args) == 1 and not kwargs and isinstance(args[0], (types.FunctionType, type, staticmethod, classmethod)):
            return args[0]
        return _Stub(f"{self._name}()")

    def __getitem__(self, key: Any) -> Any:
        return _Stub(f"{self._name}[]")

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __repr__(self) -> str:
        return f"<stub {self._name}>"


def _same(self: Any, *args: Any) -> Any:
    return self


_OPERATORS = ["add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv", "rfloordiv", "mod", "rmod", "pow", "rpow"]
_OPERATORS += ["or", "ror", "and", "rand", "xor", "rxor", "lshift", "rshift", "neg", "pos", "invert", "lt", "le", "gt", "ge"]
for _operator in _OPERATORS:
    setattr(_Stub, f"__{_operator}__", _same)


def _stub_module_class() -> type:
    import types

    class _StubModule(types.ModuleType):
        def __getattr__(self, attr: str) -> Any:
            if attr.startswith("__") and attr.endswith("__"):
                raise AttributeError(attr)
            return _Stub(f"{self.__name__}.{attr}")

    return _StubModule


class _StubFinder:
    """A ``sys.meta_path`` finder and loader: every module under ``roots`` is a permissive stub package."""

    def __init__(self, roots: set[str]) -> None:
        self.roots = roots
        self.module_class = _stub_module_class()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        import importlib.machinery

        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        module = self.module_class(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: Any) -> None:
        pass


@contextlib.contextmanager
def stub_packages(roots: tuple[str, ...]) -> Iterator[list[str]]:
    """Make ``import <root>...`` succeed with permissive stub modules, for each root not installed here.

    For kernel modules that import a GPU compiler at module level (FlashInfer's CuTe-DSL kernels import
    ``cutlass`` and ``cuda`` from nvidia-cutlass-dsl / cuda-python, ``flashinfer/quantization/kernels/``):
    their Python drivers, which allocate the outputs, then import and run, while their compiled-kernel
    getters must be replaced (with :func:`replaced`) so that no stub is ever launched. A root that is
    installed is left alone (its real modules import). Yields the roots stubbed; on exit the finder and the
    stub modules are removed (modules that imported them keep what they got).
    """
    import importlib.util
    import sys

    stubbed = [root for root in roots if importlib.util.find_spec(root) is None]
    finder = _StubFinder(set(stubbed))
    sys.meta_path.insert(0, finder)
    try:
        yield stubbed
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n.split(".")[0] in finder.roots]:
            if isinstance(sys.modules[name], finder.module_class):
                del sys.modules[name]


def load_grid(path: str, name: str | None = None) -> Any:
    """The case grid module at ``path`` (``patches/<distribution>/grids/<function>.py``), loaded by path.

    Before the grid runs, its namespace gets ``sibling(helper)``: the helper module ``<helper>.py`` beside
    it (``_tensors``, ``_gemm``, ``_moe``), loaded once per interpreter under
    ``_fp4patch_grid_<helper>``, so that grids share code without being a package and without importing
    fp4patch (the probe runs them where fp4patch is not installed). Used by the probe, by fp4patch's own
    process and by the tests, so every one runs a grid the same way.

    Raises:
        ImportError: ``path`` (or a helper it names) is not a Python module.
    """
    import importlib.util
    import os
    import sys

    def load(file: str, module_name: str) -> Any:
        spec = importlib.util.spec_from_file_location(module_name, file)
        if spec is None or spec.loader is None:
            raise ImportError(f"{file}: not a Python module")
        module = importlib.util.module_from_spec(spec)
        module.sibling = sibling
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        return module

    def sibling(helper: str) -> Any:
        key = f"_fp4patch_grid_{helper}"
        file = os.path.join(os.path.dirname(os.path.abspath(path)), f"{helper}.py")
        if key not in sys.modules or getattr(sys.modules[key], "__file__", None) != file:
            load(file, key)
        return sys.modules[key]

    return load(path, name or f"_fp4patch_grid_{os.path.splitext(os.path.basename(path))[0]}")
