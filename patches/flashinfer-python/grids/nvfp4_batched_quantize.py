"""Case grid of ``flashinfer.nvfp4_batched_quantize`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/fp4_quantization.py`` until 0.6.6, ``flashinfer/quantization/fp4_quantization.py``
from 0.6.7) hands ``a`` to the kernel entry ``fp4_batched_quantize_sm100`` of ``get_fp4_quantization_module``,
which allocates uint8 ``[B, M, K // 2]`` and the per-batch 128x4-swizzled scale factors
``[B, round_up(M, 128) * round_up(K // sf_vec_size, 4)]`` in Python. Cases: token counts M in {0, 1, 8, 127,
129}, fp16 / bf16 / fp8 input, 2-D input (the wrapper's unpacking fails), and ``nvfp4_4over6=None`` where the
release has the parameter (0.7.1+). The C++ kernel refuses ``sf_vec_size`` other than 16, K not a multiple
of 16 and a non-contiguous input, which the CPU cannot see: those cases carry the kernel's message.
"""

FUNCTION = "nvfp4_batched_quantize"
#: the wrapper's outputs, in order (named in the fake check's messages)
OUTPUTS = ("x_q", "sf")


#: a fake CUDA tensor of ``shape`` (``grids/_tensors.py``)
_t = sibling("_tensors").tensor  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid


def cases(params, release):
    """The cases for a release whose wrapper takes ``params`` (``release``: no data is read for this op)."""
    out, add = sibling("_tensors").collector()  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid

    gs = _t(1, dtype="float32")
    for m in (0, 1, 8, 127, 129):
        add(f"B=3 M={m} K=128 bf16", [_t(3, m, 128), gs])
    add("B=2 M=8 K=7168 fp16", [_t(2, 8, 7168, dtype="float16"), gs])
    add("B=2 M=8 K=64 e4m3 input", [_t(2, 8, 64, dtype="float8_e4m3fn"), gs])
    add("2-D input", [_t(8, 64), gs])
    add("sf_vec_size=32", [_t(2, 8, 64), gs], {"sf_vec_size": 32}, kernel="sfVecSize can only be 16")
    add("K=40", [_t(2, 8, 40), gs], kernel="fp4_batched_quantize: K=40 is not a multiple of sf_vec_size=16")
    add("non-contiguous input", [_t(2, 64, 8, transposed=True), gs], kernel="self must be contiguous")
    if "nvfp4_4over6" in params:
        add("nvfp4_4over6=None", [_t(2, 8, 64), gs], {"nvfp4_4over6": None})
    return out
