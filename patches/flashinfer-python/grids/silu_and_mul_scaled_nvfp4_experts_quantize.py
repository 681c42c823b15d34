"""Case grid of ``flashinfer.silu_and_mul_scaled_nvfp4_experts_quantize`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/activation.py``) takes ``a`` ``[L, M, 2K]`` (gate and up halves), applies SiLU and
multiply, and quantizes the ``[L, M, K]`` result per group as ``scaled_fp4_grouped_quantize`` does; its kernel
entry allocates the outputs in Python. Cases: M in {0, 1, 8, 127, 129}, fp16 / bf16, K not a multiple of 16,
a non-contiguous input, and ``nvfp4_4over6=None`` where the release has the parameter (0.7.1+). The
kernel's checks of the global scale's length and of an odd 2K (the CPU cannot see them) carry the kernel's
message.
"""

FUNCTION = "silu_and_mul_scaled_nvfp4_experts_quantize"
#: the wrapper's outputs, in order (named in the fake check's messages)
OUTPUTS = ("x_q", "sf")


#: a fake CUDA tensor of ``shape`` (``grids/_tensors.py``)
_t = sibling("_tensors").tensor  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid


def cases(params, release):
    """The cases for a release whose wrapper takes ``params`` (``release``: no data is read for this op)."""
    out, add = sibling("_tensors").collector()  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid

    mask, gs = _t(4, dtype="int32"), _t(4, dtype="float32")
    for m in (0, 1, 8, 127, 129):
        add(f"L=4 M={m} K=128 bf16", [_t(4, m, 256), mask, gs])
    add("L=2 M=8 K=7168 fp16", [_t(2, 8, 2 * 7168, dtype="float16"), _t(2, dtype="int32"), _t(2, dtype="float32")])
    add("K=40 (not a multiple of 16)", [_t(4, 8, 80), mask, gs])
    add("non-contiguous input", [_t(4, 256, 8, transposed=True), mask, gs])
    add("[1] global scale for 4 groups", [_t(4, 8, 256), mask, _t(1, dtype="float32")],
        kernel="Check failed: mask.shape()[0] == n_experts (4 vs. 1)")
    add("odd 2K", [_t(4, 8, 65), mask, gs], kernel="k must be a multiple of 2")
    if "nvfp4_4over6" in params:
        add("nvfp4_4over6=None", [_t(4, 8, 256), mask, gs], {"nvfp4_4over6": None})
    return out
