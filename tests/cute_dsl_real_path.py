"""Run ``fp4_quantize(backend="cute-dsl")``'s real Python path on CPU and compare it with fp4patch's fake.

Used by ``tests/test_op_fp4_quantize_cute_dsl.py`` in a child interpreter that imports an unpacked
FlashInfer release (``PYTHONPATH=<site>``); not a test module itself.

The real path is FlashInfer's own code, from ``fp4_quantize`` through ``_fp4_quantize_cute_dsl`` to the
drivers ``nvfp4_quantize_cute_dsl`` / ``mxfp4_quantize_cute_dsl`` (``flashinfer/quantization/kernels/``),
which allocate the outputs in Python. Only what cannot run on a CPU is replaced:

* ``cutlass`` / ``cuda`` (nvidia-cutlass-dsl, cuda-python: not installed here) are permissive stub
  modules, so the kernel modules import; their kernel classes are never instantiated;
* every ``_get_compiled_kernel*`` getter of the two kernel modules returns a no-op launch, so nothing
  compiles and nothing runs;
* ``torch.cuda.get_device_capability`` / ``get_device_properties`` report an SM100 (or SM107) device
  with 148 SMs, as ``fp4patch/trace_probe.py`` does;
* ``flashinfer.cute_dsl.is_cute_dsl_available`` answers True;
* while the real path runs, ``Tensor.__getitem__`` / ``__setitem__`` with ints and slices go
  through ``aten.select`` / ``aten.slice``, and ``Tensor.contiguous`` through ``aten.clone``: on a
  CPU-only torch these Python bindings raise ``PyTorch is not linked with support for cuda devices``
  for a fake CUDA tensor (their device guard), and the drivers use them (``input.contiguous()``,
  ``input[0]``, ``scale_output[: m * cols]``, ``input_padded[:m, :] = input``).

Inputs are fake CUDA tensors (``FakeTensorMode``). The fake is the op block fp4patch renders for the
release, executed in the real ``fp4_quantization`` module (its wrapper is left as it is).
"""

from __future__ import annotations

import collections
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types


# --------------------------------------------------------------------------- #
# Stub modules for cutlass / cuda-python
# --------------------------------------------------------------------------- #
class _Stub:
    """Any attribute, call, subscript, arithmetic or base-class use of a stubbed module's names."""

    def __init__(self, name: str = "stub") -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _Stub(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        # a decorator (@cute.jit, @cute.kernel, @dsl_user_op) keeps the function it decorates
        if len(args) == 1 and not kwargs and isinstance(args[0], (types.FunctionType, type, staticmethod, classmethod)):
            return args[0]
        return _Stub(f"{self._name}()")

    def __getitem__(self, key):
        return _Stub(f"{self._name}[]")

    def __mro_entries__(self, bases):
        return (object,)

    def __iter__(self):
        return iter(())

    def __repr__(self) -> str:
        return f"<stub {self._name}>"


def _same(self, *args):
    return self


_OPERATORS = ["add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv", "rfloordiv", "mod", "rmod", "pow", "rpow"]
_OPERATORS += ["or", "ror", "and", "rand", "xor", "rxor", "lshift", "rshift", "neg", "pos", "invert", "lt", "le", "gt", "ge"]
for _name in _OPERATORS:
    setattr(_Stub, f"__{_name}__", _same)


class _StubModule(types.ModuleType):
    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _Stub(f"{self.__name__}.{attr}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: set[str]) -> None:
        self.roots = roots

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        pass


def install_stubs(roots=("cutlass", "cuda")) -> None:
    """Make ``import cutlass...`` / ``import cuda...`` succeed with stub modules (after ``import flashinfer``)."""
    for root in roots:
        if importlib.util.find_spec(root) is not None and not isinstance(sys.modules.get(root), _StubModule):
            raise RuntimeError(f"{root} is installed here: run the real kernel modules instead of stubbing them")
    sys.meta_path.insert(0, _StubFinder(set(roots)))


# --------------------------------------------------------------------------- #
# Device and kernel stubs
# --------------------------------------------------------------------------- #
def set_device(torch, capability: tuple[int, int]) -> None:
    """Report one CUDA device of ``capability`` with 148 SMs; clear FlashInfer's cached device queries."""
    props = collections.namedtuple("_Props", "major minor name multi_processor_count total_memory")(
        capability[0], capability[1], f"fp4patch-stub-sm{capability[0]}{capability[1]}", 148, 1 << 37
    )
    torch.cuda.get_device_capability = lambda device=None: capability
    torch.cuda.get_device_properties = lambda device=None: props
    for module_name in ("flashinfer.utils", "flashinfer.cute_dsl.utils"):
        module = sys.modules.get(module_name)
        for value in vars(module).values() if module else ():
            if callable(getattr(value, "cache_clear", None)) and getattr(value, "__module__", "") == module_name:
                value.cache_clear()


def _no_launch(*args, **kwargs) -> None:
    return None


#: How often each stubbed compiled-kernel getter was asked for a kernel (which driver paths ran).
GETTER_CALLS: collections.Counter = collections.Counter()


def _getter(name: str):
    def get(*args, **kwargs):
        GETTER_CALLS[name] += 1
        return _no_launch, 1

    return get


def stub_kernels() -> list:
    """Import the two CuTe-DSL kernel modules and replace their compiled-kernel getters by no-op launches."""
    import flashinfer.cute_dsl

    flashinfer.cute_dsl.is_cute_dsl_available = lambda: True
    modules = [
        importlib.import_module("flashinfer.quantization.kernels.nvfp4_quantize"),
        importlib.import_module("flashinfer.quantization.kernels.mxfp4_quantize"),
    ]
    stubbed = []
    for module in modules:
        for name in list(vars(module)):
            if name.startswith("_get_compiled_kernel"):
                setattr(module, name, _getter(name))
                stubbed.append(f"{module.__name__}.{name}")
    return stubbed


class aten_tensor_methods:
    """Context manager: int / slice indexing and ``contiguous()`` through aten ops (see the module docstring)."""

    def __enter__(self):
        import torch

        self.torch = torch
        self.saved = (torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.contiguous)
        original_get, original_set = self.saved[:2]

        def view(tensor, index):
            out, dim = tensor, 0
            for i in index if isinstance(index, tuple) else (index,):
                if isinstance(i, int):
                    out = out.select(dim, i)
                elif isinstance(i, slice):
                    stop = sys.maxsize if i.stop is None else i.stop
                    out = torch.ops.aten.slice.Tensor(out, dim, i.start or 0, stop, i.step or 1)
                    dim += 1
                else:
                    return None
            return out

        def getitem(tensor, index):
            out = view(tensor, index)
            return original_get(tensor, index) if out is None else out

        def setitem(tensor, index, value):
            out = view(tensor, index)
            if out is None:
                return original_set(tensor, index, value)
            torch.ops.aten.copy_.default(out, value)

        def contiguous(tensor, memory_format=torch.contiguous_format):
            if tensor.is_contiguous(memory_format=memory_format):
                return tensor
            return torch.ops.aten.clone.default(tensor, memory_format=memory_format)

        torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.contiguous = getitem, setitem, contiguous
        return self

    def __exit__(self, *exc) -> None:
        self.torch.Tensor.__getitem__, self.torch.Tensor.__setitem__, self.torch.Tensor.contiguous = self.saved


# --------------------------------------------------------------------------- #
# The comparison
# --------------------------------------------------------------------------- #
def _outcome(function, x, gs, kwargs):
    """``function(x, gs, backend="cute-dsl", **kwargs)`` as ('ok', [[shape, stride, dtype], ...]) or ('error', class, message)."""
    try:
        outputs = function(x, gs, backend="cute-dsl", **kwargs)
    except Exception as exc:  # noqa: BLE001 (every exception class is part of the comparison)
        return ["error", type(exc).__name__, str(exc)]
    return ["ok", [[list(t.shape), list(t.stride()), str(t.dtype)] for t in outputs]]


def cases():
    """The grid: recipe x layout x input kind x M x K x dtype, plus the TMA sizes and the environment."""
    recipes = [(16, False), (32, True), (16, True), (32, False)]
    layouts = [(True, False), (True, True), (False, False), (False, True)]  # (is_sf_swizzled_layout, is_sf_8x4_layout)
    for sf_vec_size, ue8m0 in recipes:
        valid = (sf_vec_size == 16) != ue8m0  # the other two are refused before any size is read
        for swizzled, l8x4 in layouts:
            for kind in ("2d", "column-major", "3d"):
                for m in (0, 1, 8, 127, 129) if valid else (8,):
                    for k in (64, 192, 7168) if valid else (64,):
                        yield {"m": m, "k": k, "kind": kind, "dtype": "bfloat16", "sf_vec_size": sf_vec_size,
                               "sf_use_ue8m0": ue8m0, "is_sf_swizzled_layout": swizzled, "is_sf_8x4_layout": l8x4}
        for dtype in ("float16", "float8_e4m3fn", "float32"):
            for swizzled, l8x4 in layouts[:3]:
                yield {"m": 129, "k": 64, "kind": "2d", "dtype": dtype, "sf_vec_size": sf_vec_size, "sf_use_ue8m0": ue8m0,
                       "is_sf_swizzled_layout": swizzled, "is_sf_8x4_layout": l8x4}
        for k in (40, 48):  # K not a multiple of sf_vec_size; K / 16 not a multiple of 4
            yield {"m": 8, "k": k, "kind": "2d", "dtype": "bfloat16", "sf_vec_size": sf_vec_size, "sf_use_ue8m0": ue8m0,
                   "is_sf_swizzled_layout": True, "is_sf_8x4_layout": False}
        for global_scale in ("none", "per-expert"):  # the NVFP4 driver wants one element
            for m in (0, 8):
                yield {"m": m, "k": 64, "kind": "2d", "dtype": "bfloat16", "sf_vec_size": sf_vec_size, "sf_use_ue8m0": ue8m0,
                       "is_sf_swizzled_layout": True, "is_sf_8x4_layout": False, "global_scale": global_scale}
    # the NVFP4 TMA kernel: floor(log2 M) + floor(log2 K) >= 25 from M = 4096 at K = 8192 (M % 16 != 0 shows 16-row padding)
    for m, k in ((4095, 8192), (4097, 8192), (1025, 1 << 15), (1023, 1 << 16), (4097, 8704), (4097, 8200)):
        for dtype in ("bfloat16", "float8_e4m3fn"):
            for swizzled, l8x4 in layouts[:3]:
                for kind in ("2d", "3d"):
                    yield {"m": m, "k": k, "kind": kind, "dtype": dtype, "sf_vec_size": 16, "sf_use_ue8m0": False,
                           "is_sf_swizzled_layout": swizzled, "is_sf_8x4_layout": l8x4}


ENVIRONMENTS = [
    {},
    {"FLASHINFER_NVFP4_QUANTIZE_USE_TMA": "1"},
    {"FLASHINFER_NVFP4_QUANTIZE_USE_TMA": "0"},
    {"FLASHINFER_NVFP4_4OVER6": "1"},
    {"FLASHINFER_NVFP4_4OVER6": "1", "FLASHINFER_NVFP4_QUANTIZE_USE_TMA": "1"},
]


def _input(torch, case):
    dtype = getattr(torch, case["dtype"])
    m, k = case["m"], case["k"]
    if case["kind"] == "column-major":
        return torch.empty(k, m, dtype=dtype, device="cuda").t()
    if case["kind"] == "3d":  # [2, M, K]: the drivers flatten the leading dimensions to 2 * M rows
        return torch.empty(2, m, k, dtype=dtype, device="cuda")
    return torch.empty(m, k, dtype=dtype, device="cuda")


def run(params: dict) -> dict:
    """Compare real path and fake over :func:`cases` x ``ENVIRONMENTS`` x SM100/SM107; mismatches and counts."""
    import warnings

    import flashinfer
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fp4patch.spec import load_specs

    warnings.simplefilter("ignore")  # FlashInfer's FutureWarning for the FLASHINFER_NVFP4_4OVER6 shim
    set_device(torch, (10, 0))
    install_stubs()
    stubbed = stub_kernels()
    version = flashinfer.__version__
    spec = next(s for s in load_specs(None) if s.id == "fp4-quantize-fullgraph")
    (target,) = [t for t in spec.targets_for(version) if not t.status]
    (rendered,) = target.custom_ops
    (block,) = [op.code for op in target.operations if op.kind == "append-to-module"]
    module = importlib.import_module(target.file[: -len(".py")].replace("/", "."))
    real = module.fp4_quantize
    exec(compile(block, f"<{rendered.op_name}>", "exec", dont_inherit=True), vars(module))  # noqa: S102 (fp4patch's own op block)
    assert module._fp4patch_fp4_quantize_ready(), "the op block could not register its op"  # done on first need
    op = getattr(torch.ops.fp4patch, rendered.op_name.split("::")[1]).default
    schema = {a.name for a in op._schema.arguments}

    mismatches = []
    counts = collections.Counter()
    for capability in ((10, 0), (10, 7)):  # SM107 (0.7.1+): its own TMA crossover and 128x4 tile kernel
        set_device(torch, capability)
        for env in ENVIRONMENTS:
            saved = {name: os.environ.pop(name, None) for name in ("FLASHINFER_NVFP4_QUANTIZE_USE_TMA", "FLASHINFER_NVFP4_4OVER6")}
            os.environ.update(env)
            try:
                for case in cases():
                    nvfp4 = case["sf_vec_size"] == 16 and not case["sf_use_ue8m0"]
                    if env and not (nvfp4 and case["m"] in (0, 129, 4097)):
                        continue  # the environment only reaches the NVFP4 driver
                    if capability != (10, 0) and not (case["m"] >= 129 and case["kind"] != "column-major"):
                        continue  # the SM107 paths need sizes
                    kwargs = {key: case[key] for key in ("sf_vec_size", "sf_use_ue8m0", "is_sf_swizzled_layout", "is_sf_8x4_layout")}
                    with FakeTensorMode(allow_non_fake_inputs=True):
                        x = _input(torch, case)
                        gs = {"none": None, "per-expert": torch.ones(4, dtype=torch.float32, device="cuda")}.get(
                            case.get("global_scale"), torch.ones(1, dtype=torch.float32, device="cuda")
                        )
                        with aten_tensor_methods():
                            expected = _outcome(real, x, gs, kwargs)
                        got = _outcome(op, x, gs, kwargs)
                    counts[expected[0] if expected[0] == "ok" else f"error {expected[1]}"] += 1
                    if expected != got:
                        mismatches.append({"case": case, "env": env, "device": capability, "real": expected, "fake": got})
            finally:
                for name, value in saved.items():
                    os.environ.pop(name, None)
                    if value is not None:
                        os.environ[name] = value
    return {"version": version, "op": rendered.op_name, "schema": sorted(schema), "stubbed": stubbed, "counts": dict(counts),
            "kernels": dict(GETTER_CALLS), "mismatches": mismatches[:40], "mismatch_count": len(mismatches)}
