"""Case grid of ``flashinfer.mxfp8_quantize`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/fp8_quantization.py`` until 0.6.6, ``flashinfer/quantization/fp8_quantization.py``
from 0.6.7) hands ``input`` to the kernel entry ``mxfp8_quantize_sm100`` of
``get_mxfp8_quantization_sm100_module``, which allocates float8_e4m3fn ``[..., padded_K]`` and the uint8 1-D
scale factors of the layout (128x4 / 8x4 swizzled, linear) in Python. Cases: M in {0, 1, 8, 127, 129},
swizzled and linear, 3-D fp16 input, an ``alignment`` that pads K, K = 48; where the release has them, each
``sf_swizzle_layout`` (``SfLayout``, 0.6.7+), each backend of the release data's ``backends`` and one it does
not accept, ``enable_pdl=False`` and ``batch_invariant=True`` (0.7.4). The fake refuses
``backend="cute-dsl"`` and ``batch_invariant=True`` under torch.compile (their layouts are not mirrored):
those cases check the refusal. A backend this grid does not know is ``unchecked``. The kernel's checks of
``alignment`` and of a non-contiguous input carry the kernel's message.
"""

FUNCTION = "mxfp8_quantize"
#: the wrapper's outputs, in order (named in the fake check's messages)
OUTPUTS = ("x_q", "sf")
#: backends whose layout the fake mirrors (the CUDA kernel; "auto" is the CUDA kernel), and those it refuses
MIRRORED = ("auto", "cuda")
REFUSED = ("cute-dsl",)


#: a fake CUDA tensor of ``shape`` (``grids/_tensors.py``)
_t = sibling("_tensors").tensor  # noqa: F821 - sibling: given by fp4patch.oracle.load_grid


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
            elif backend in REFUSED:
                add(f"backend={backend}", [_t(8, 64)], {"backend": backend}, refused="the fake refuses this backend under torch.compile")
            else:
                add(f"backend={backend}", [_t(8, 64)], {"backend": backend}, unchecked=f"backend {backend!r} is new to this grid")
        add("backend=bogus", [_t(8, 64)], {"backend": "bogus"})
    if "batch_invariant" in params:
        add("batch_invariant=True", [_t(8, 64)], {"batch_invariant": True}, refused="the fake refuses batch_invariant under torch.compile")
    return out
