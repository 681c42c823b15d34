"""Case grid of ``flashinfer.mxfp8_grouped_quantize`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/quantization/fp8_quantization.py``, 0.6.14+) checks ``a`` ``[B, M, K]`` and
``mask`` in Python, then one of its backends (``backend``, 0.7.0+: cuTile, Cake, and from 0.7.4 a CUDA
kernel; before 0.7.0 cuTile alone) allocates float8_e4m3fn ``[M, padded_K, B]`` and uint8 ``[32, 4,
padded_M // 128, 4, padded_K // 128, B]`` as permuted views of contiguous buffers. Cases, for each backend
of the release data's ``backends`` (the default one where the wrapper has no ``backend``): M in {0, 1, 8,
127, 129}, fp16 / bf16, K padded to 256; then the wrapper's refusals (K = 48, fp32 input, 2-D input, a mask
of the wrong length or dtype) and a backend it does not accept. A backend this grid does not know is
``unchecked``.

:func:`stubs` replaces the launchers that are plain Python functions, found by what the wrapper's module
holds (not by version): the cuTile kernel module (its ``cuda.tile`` compiler is not installed here) and
``is_cuda_tile_available``; the Cake launcher of the module itself (``cake_grouped_mxfp8_quantize_launch``,
0.7.4) or of ``flashinfer.jit.cake_grouped_mxfp8_quantize`` (a loaded module's ``run()``, 0.7.0 - 0.7.2.post1).
"""

import contextlib

FUNCTION = "mxfp8_grouped_quantize"
#: the wrapper's outputs, in order (named in the fake check's messages)
OUTPUTS = ("x_q", "sf")
#: backends whose layout the fake mirrors
KNOWN = ("cutile", "cake", "cuda")


#: a fake CUDA tensor of ``shape`` (``grids/_tensors.py``)
_t = sibling("_tensors").tensor  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid


def cases(params, release):
    """The cases for a release whose wrapper takes ``params``; ``release["backends"]``: the backends the
    wrapper accepts (read where ``backend`` is a parameter)."""
    out = []

    def add(name, args, kwargs=None, **extra):
        out.append({"name": name, "args": args, "kwargs": kwargs or {}, "kernel": None, **extra})

    mask = _t(4, dtype="int32")
    # every backend the grid knows and every one the release data lists: the data is what is checked
    backends = list(dict.fromkeys([*KNOWN, *release.get("backends", ())])) if "backend" in params else [None]
    for backend in backends:
        kw = {} if backend is None else {"backend": backend}
        label = "" if backend is None else f"{backend} "
        if backend is not None and backend not in KNOWN:
            add(f"{label}B=4 M=8 K=128", [_t(4, 8, 128), mask], kw, unchecked=f"backend {backend!r} is new to this grid")
            continue
        for m in (0, 1, 8, 127, 129):
            add(f"{label}B=4 M={m} K=128", [_t(4, m, 128), mask], kw)
        add(f"{label}B=2 M=8 K=7168 fp16", [_t(2, 8, 7168, dtype="float16"), _t(2, dtype="int32")], kw)
        add(f"{label}K=96 (padded to 256)", [_t(4, 8, 96), mask], kw)
    add("K=48", [_t(4, 8, 48), mask])
    add("fp32 input", [_t(4, 8, 64, dtype="float32"), mask])
    add("2-D input", [_t(8, 64), mask])
    add("mask of 3 for 4 groups", [_t(4, 8, 64), _t(3, dtype="int32")])
    add("int64 mask", [_t(4, 8, 64), _t(4, dtype="int64")])
    if "backend" in params:
        add("backend=bogus", [_t(4, 8, 64), mask], {"backend": "bogus"})
    return out


@contextlib.contextmanager
def stubs(oracle, recorder, flashinfer):
    """The cuTile and Cake launchers as ``recorder`` launches (see the module docstring)."""
    import importlib.util
    import inspect
    import sys

    module = sys.modules[inspect.unwrap(flashinfer.mxfp8_grouped_quantize).__module__]
    package = module.__name__.rsplit(".", 1)[0]
    injected = {package + ".kernels.cutile.mxfp8_grouped_quantize_cutile": {"mxfp8_grouped_quantize_cutile": recorder.mxfp8_grouped_quantize_cutile}}
    launchers = {module.__name__ + ":is_cuda_tile_available": lambda: True}
    if hasattr(module, "cake_grouped_mxfp8_quantize_launch"):
        launchers[module.__name__ + ":is_cake_grouped_mxfp8_quantize_available"] = lambda *a: True
        launchers[module.__name__ + ":cake_grouped_mxfp8_quantize_launch"] = recorder.cake_grouped_mxfp8_quantize_launch
    elif importlib.util.find_spec("flashinfer.jit.cake_grouped_mxfp8_quantize") is not None:
        cake = "flashinfer.jit.cake_grouped_mxfp8_quantize"
        jit = importlib.import_module(cake)
        launchers[cake + ":is_cake_grouped_mxfp8_quantize_available"] = lambda *a: True
        if hasattr(jit, "get_cake_grouped_mxfp8_quantize_module"):  # 0.7.0 - 0.7.1: a loaded module's run()
            launchers[cake + ":get_cake_grouped_mxfp8_quantize_module"] = lambda *a: recorder
        if hasattr(jit, "cake_grouped_mxfp8_quantize_launch"):  # 0.7.2 - 0.7.2.post1: a launcher the kernel entry imports
            launchers[cake + ":cake_grouped_mxfp8_quantize_launch"] = recorder.cake_grouped_mxfp8_quantize_launch
    with oracle.modules_injected(injected), oracle.replaced(launchers):
        yield
