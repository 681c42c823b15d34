"""Case grid of ``flashinfer.silu_and_mul_mxfp8_experts_quantize`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/quantization/fp8_quantization.py``, 0.7.4+) takes ``a`` ``[B, M, 2K]`` (gate and up
halves) and ``mask``, and its kernel entry ``silu_and_mul_mxfp8_experts_quantize_sm100`` allocates the
``[B, M, K]`` MXFP8 result in the masked-GEMM layout of ``mxfp8_grouped_quantize`` in Python (an empty
input returns without a launch). Cases: M in {0, 1, 8, 127, 129}, fp16 / bf16, K padded to 256,
``enable_pdl=False``; the wrapper's refusals (K = 48, fp32 input, 2-D input, a mask of the wrong length or
dtype, a non-contiguous input).
"""

FUNCTION = "silu_and_mul_mxfp8_experts_quantize"
#: the wrapper's outputs, in order (named in the fake check's messages)
OUTPUTS = ("x_q", "sf")


#: a fake CUDA tensor of ``shape`` (``grids/_tensors.py``)
_t = sibling("_tensors").tensor  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid


def cases(params, release):
    """The cases for a release whose wrapper takes ``params`` (``release``: no data is read for this op)."""
    out = []

    def add(name, args, kwargs=None):
        out.append({"name": name, "args": args, "kwargs": kwargs or {}, "kernel": None})

    mask = _t(4, dtype="int32")
    for m in (0, 1, 8, 127, 129):
        add(f"B=4 M={m} K=128", [_t(4, m, 256), mask])
    add("B=2 M=8 K=7168 fp16", [_t(2, 8, 2 * 7168, dtype="float16"), _t(2, dtype="int32")])
    add("K=96 (padded to 256)", [_t(4, 8, 192), mask])
    if "enable_pdl" in params:
        add("enable_pdl=False", [_t(4, 8, 256), mask], {"enable_pdl": False})
    add("K=48", [_t(4, 8, 96), mask])
    add("fp32 input", [_t(4, 8, 128, dtype="float32"), mask])
    add("2-D input", [_t(8, 128), mask])
    add("mask of 3 for 4 groups", [_t(4, 8, 128), _t(3, dtype="int32")])
    add("int64 mask", [_t(4, 8, 128), _t(4, dtype="int64")])
    add("non-contiguous input", [_t(4, 128, 8, transposed=True), mask])
    return out
