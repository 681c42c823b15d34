"""Case grid of ``flashinfer.mxfp8_quantize`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/fp8_quantization.py`` until 0.6.6, ``flashinfer/quantization/fp8_quantization.py``
from 0.6.7) hands ``input`` to the kernel entry ``mxfp8_quantize_sm100`` of
``get_mxfp8_quantization_sm100_module``, which allocates float8_e4m3fn ``[..., padded_K]`` and the uint8 1-D
scale factors of the layout (128x4 / 8x4 swizzled, linear) in Python. Cases: M in {0, 1, 8, 127, 129},
swizzled and linear, 3-D fp16 input, an ``alignment`` that pads K, K = 48; where the release has them, each
``sf_swizzle_layout`` (``SfLayout``, 0.6.7+), each backend of the release data's ``backends`` and one it does
not accept, ``enable_pdl=False`` and ``batch_invariant=True`` (0.7.4). ``backend="cute-dsl"`` where the
release data's ``cute_dsl`` is true (every release with the backend, 0.6.7+): the CuTe-DSL driver
``mxfp8_quantize_cute_dsl`` (``flashinfer/quantization/kernels/mxfp8_quantize.py``) over M in {0, 1, 8, 127,
129} x each ``sf_swizzle_layout`` and ``is_sf_swizzled_layout`` (8x4 refused by the 0.6.7-0.6.11.post3
wrapper), SGLang's SM100 call (128x4, alignment 32), the linear layout with the swizzled flag (the flag
decides before 0.6.12), 3-D and column-major input (it flattens and copies), fp32 input (accepted from 0.7.1)
/ fp16 input and an fp8 one it refuses, an ``alignment`` that pads K and one it refuses, 1-D input. Where
``cute_dsl`` is false (no release now), and for ``batch_invariant=True``, the fake refuses under
torch.compile (their layouts are not mirrored): those cases check the refusal. A backend
this grid does not know is ``unchecked``. The CUDA kernel's checks of ``alignment`` and of a non-contiguous
input carry the kernel's message.

The host path (a CPU input, every release): the kernel entry's CPU branch allocates uint8 ``input.shape`` (no
padding) and uint8 scale factors from ``input.shape[0]`` / ``input.shape[1] // 32`` (128x4) or ``numel // 32``
(linear), and refuses 8x4 (0.6.7+, where ``sf_swizzle_layout`` exists): fp32 ``[M, 64]`` for M in {0, 1, 8, 129},
swizzled and linear, an ``alignment`` it ignores, each ``sf_swizzle_layout`` and each mirrored backend of the
release; a 1-D input (128x4: ``IndexError`` in Python); what only the host kernel ``mxfp8_quantize_host`` refuses
carries its message (a bf16 input, a 3-D one, a 1-D linear one).

:func:`stubs` makes the CuTe-DSL driver run on CPU (as ``grids/fp4_quantize.py`` does): ``cutlass`` /
``cuda`` as stub packages where they are not installed, every ``_get_compiled_kernel*`` getter of
``kernels.mxfp8_quantize`` a recorder call returning a no-op launch, ``is_cute_dsl_available`` True.
"""

import contextlib

FUNCTION = "mxfp8_quantize"
#: the wrapper's outputs, in order (named in the fake check's messages)
OUTPUTS = ("x_q", "sf")
#: backends whose layout the fake mirrors (the CUDA kernel; "auto" is the CUDA kernel), and those it refuses
MIRRORED = ("auto", "cuda")
REFUSED = ("cute-dsl",)
#: the CuTe-DSL kernel module, relative to the wrapper's package (flashinfer/quantization/kernels/)
CUTE_DSL_MODULE = "kernels.mxfp8_quantize"


#: a fake CUDA tensor of ``shape`` (``grids/_tensors.py``)
_t = sibling("_tensors").tensor  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid


def _cute_dsl_cases(params):
    """``backend="cute-dsl"`` calls the fake mirrors (the release data's ``cute_dsl``)."""
    out = []

    def add(name, args, kwargs=None, **extra):
        out.append({"name": "cute-dsl " + name, "args": args, "kwargs": {"backend": "cute-dsl", **(kwargs or {})}, "kernel": None, **extra})

    for m in (0, 1, 8, 127, 129):
        add(f"M={m} K=64", [_t(m, 64)])
        add(f"M={m} K=64 linear", [_t(m, 64)], {"is_sf_swizzled_layout": False})
        for layout in ("layout_128x4", "layout_8x4", "layout_linear"):
            add(f"M={m} K=64 {layout}", [_t(m, 64)], {"sf_swizzle_layout": {"enum": f"SfLayout.{layout}"}})
    # SGLang's SM100 call: mxfp8_quantize(x, is_sf_swizzled_layout=True, alignment=32, backend="cute-dsl",
    # sf_swizzle_layout=SfLayout.layout_128x4)
    add("SGLang SM100 [129, 7168] 128x4", [_t(129, 7168)],
        {"is_sf_swizzled_layout": True, "alignment": 32, "sf_swizzle_layout": {"enum": "SfLayout.layout_128x4"}})
    add("linear layout, swizzled flag", [_t(8, 64)], {"is_sf_swizzled_layout": True, "sf_swizzle_layout": {"enum": "SfLayout.layout_linear"}})
    add("3-D [2, 8, 7168] fp16", [_t(2, 8, 7168, dtype="float16")])
    add("3-D [2, 65, 128] 8x4", [_t(2, 65, 128)], {"sf_swizzle_layout": {"enum": "SfLayout.layout_8x4"}})
    add("column-major input", [_t(64, 8 * 32, transposed=True)])
    add("fp32 input", [_t(8, 64, dtype="float32")])
    add("fp8 input", [_t(8, 64, dtype="float8_e4m3fn")])
    add("alignment=128 K=96", [_t(8, 96)], {"alignment": 128})
    add("alignment=128 K=96 linear", [_t(8, 96)], {"alignment": 128, "is_sf_swizzled_layout": False})
    add("alignment=48", [_t(8, 64)], {"alignment": 48})
    add("K=48", [_t(8, 48)])
    add("1-D input", [_t(64)])
    if "enable_pdl" in params:
        add("enable_pdl=False", [_t(8, 64)], {"enable_pdl": False})
    return out


def cases(params, release):
    """The cases for a release whose wrapper takes ``params``; ``release["backends"]``: the backends the
    wrapper accepts (read where ``backend`` is a parameter)."""
    out = []

    def add(name, args, kwargs=None, **extra):
        out.append({"name": name, "args": args, "kwargs": kwargs or {}, "kernel": None, **extra})

    for m in (1, 8, 127, 129):
        add(f"M={m} K=64 bf16", [_t(m, 64)])
        add(f"M={m} K=64 linear", [_t(m, 64)], {"is_sf_swizzled_layout": False})
    add("M=0 K=64", [_t(0, 64)])
    add("3-D [2, 8, 7168] fp16", [_t(2, 8, 7168, dtype="float16")])
    add("alignment=128 K=96", [_t(8, 96)], {"alignment": 128})
    add("K=48", [_t(8, 48)])
    add("alignment=48", [_t(8, 64)], {"alignment": 48}, kernel="alignment must be divisible by SF_VEC_SIZE = 32")
    add("column-major input", [_t(64, 8, transposed=True)], kernel="input must be contiguous")
    if "enable_pdl" in params:
        add("enable_pdl=False", [_t(8, 64)], {"enable_pdl": False})
    if "sf_swizzle_layout" in params:
        for layout in ("layout_128x4", "layout_8x4", "layout_linear"):
            add(f"M=129 K=64 {layout}", [_t(129, 64)], {"sf_swizzle_layout": {"enum": f"SfLayout.{layout}"}})
    if "backend" in params:
        # every backend the grid knows and every one the release data lists: the data is what is checked
        for backend in dict.fromkeys([*MIRRORED, *REFUSED, *release.get("backends", ())]):
            if backend in MIRRORED:
                add(f"backend={backend}", [_t(8, 64)], {"backend": backend})
                add(f"backend={backend} M=129 linear", [_t(129, 64)], {"backend": backend, "is_sf_swizzled_layout": False})
            elif backend == "cute-dsl" and release.get("cute_dsl"):
                out.extend(_cute_dsl_cases(params))
            elif backend in REFUSED:
                add(f"backend={backend}", [_t(8, 64)], {"backend": backend}, refused="the fake refuses this backend under torch.compile")
            else:
                add(f"backend={backend}", [_t(8, 64)], {"backend": backend}, unchecked=f"backend {backend!r} is new to this grid")
        add("backend=bogus", [_t(8, 64)], {"backend": "bogus"})
    if "batch_invariant" in params:
        add("batch_invariant=True", [_t(8, 64)], {"batch_invariant": True}, refused="the fake refuses batch_invariant under torch.compile")
    out.extend(_host_cases(params, release))
    return out


def _host_cases(params, release):
    """A CPU input: the kernel entry's host branch (``mxfp8_quantize_host``), see the module docstring."""
    out = []

    def add(name, args, kwargs=None, **extra):
        out.append({"name": "CPU " + name, "args": args, "kwargs": kwargs or {}, "kernel": None, **extra})

    def cpu(*shape, dtype="float32"):
        return _t(*shape, dtype=dtype, device="cpu")

    for m in (0, 1, 8, 129):
        add(f"M={m} K=64 fp32", [cpu(m, 64)])
        add(f"M={m} K=64 fp32 linear", [cpu(m, 64)], {"is_sf_swizzled_layout": False})
    add("alignment=128 K=96", [cpu(8, 96)], {"alignment": 128})
    add("alignment=128 K=96 linear", [cpu(8, 96)], {"alignment": 128, "is_sf_swizzled_layout": False})
    add("1-D input", [cpu(64)])
    add("1-D input linear", [cpu(64)], {"is_sf_swizzled_layout": False}, kernel="x_fp32 should be 2D tensor.")
    add("3-D input", [cpu(2, 8, 64)], kernel="x_fp32 should be 2D tensor.")
    add("bf16 input", [cpu(8, 64, dtype="bfloat16")], kernel="Inconsistency of Tensor type: x_fp32")
    if "sf_swizzle_layout" in params:
        for layout in ("layout_128x4", "layout_8x4", "layout_linear"):
            add(f"M=129 K=64 {layout}", [cpu(129, 64)], {"sf_swizzle_layout": {"enum": f"SfLayout.{layout}"}})
    if "backend" in params:
        for backend in dict.fromkeys([*MIRRORED, *release.get("backends", ())]):
            if backend in MIRRORED:
                add(f"backend={backend}", [cpu(8, 64)], {"backend": backend})
    return out


@contextlib.contextmanager
def stubs(oracle, recorder, flashinfer):
    """The CuTe-DSL driver's kernels as ``recorder`` launches (see the module docstring); nothing where the
    wrapper's package has no ``kernels.mxfp8_quantize`` (before 0.6.7)."""
    import importlib
    import inspect
    import os
    import sys

    module = sys.modules[inspect.unwrap(flashinfer.mxfp8_quantize).__module__]
    package = module.__name__.rsplit(".", 1)[0]
    # by file: importing the kernels package needs the stub packages (its __init__ imports cutlass)
    if not os.path.exists(os.path.join(os.path.dirname(module.__file__), *CUTE_DSL_MODULE.split(".")) + ".py"):
        yield
        return
    with oracle.stub_packages(("cutlass", "cuda")):
        kernels = importlib.import_module(f"{package}.{CUTE_DSL_MODULE}")
        getters = {}
        for attr in vars(kernels):
            if attr.startswith("_get_compiled_kernel"):
                getters[f"{kernels.__name__}:{attr}"] = getattr(recorder, attr)
                recorder.returns[attr] = lambda *args, **kwargs: (recorder.cute_dsl_kernel, 1)
        if not getters:
            raise AttributeError(f"{kernels.__name__}: no _get_compiled_kernel* getter to replace; the grid needs updating")
        with oracle.replaced({"flashinfer.cute_dsl:is_cute_dsl_available": lambda: True, **getters}):
            yield
