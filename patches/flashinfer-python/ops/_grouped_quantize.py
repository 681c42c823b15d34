"""Shared helpers of the grouped quantizer op sources (the masked grouped-GEMM layout of MoE experts).

Not an op source: the renderer (``fp4patch/ops/render.py``) copies the functions an op source imports from
here into its rendered block, so nothing installed imports this file. The layouts are those of
``flashinfer/quantization/fp4_quantization.py`` / ``fp8_quantization.py`` (0.6.7+; ``flashinfer/fp4_quantization.py``
in 0.6.0), the same from 0.5.0 to 0.7.4.
"""
import torch


def _masked_mxfp8_outputs(a, b, m, k):
    """(x_q, sf) in the masked grouped-GEMM layout, as permuted views of contiguous buffers."""
    # x_q float8_e4m3fn [M, padded_K, B], sf uint8 [32, 4, padded_M // 128, 4, padded_K // 128, B]
    padded_k = (k + 127) // 128 * 128
    padded_m = (m + 127) // 128 * 128
    x_q = a.new_empty((b, m, padded_k), dtype=torch.float8_e4m3fn).permute(1, 2, 0)
    sf = a.new_empty((b, padded_m // 128, padded_k // 128, 32, 4, 4), dtype=torch.uint8)
    return x_q, sf.permute(3, 4, 1, 5, 2, 0)


def _grouped_nvfp4_outputs(a, l, m, k):
    """The permuted (x_q, sf) views of the masked grouped-GEMM layout, as the kernel entry returns them."""
    padded_m = (m + 127) // 128 * 128
    padded_k = (k // 16 + 3) // 4 * 4
    x_q = a.new_empty((l, m, k // 2), dtype=torch.uint8).permute(1, 2, 0)
    sf = a.new_empty((l, padded_m // 128, padded_k // 4, 32, 4, 4), dtype=torch.float8_e4m3fn)
    return x_q, sf.permute(3, 4, 1, 5, 2, 0)


def _check_grouped_nvfp4(k, mask, a_global_sf):
    """The NVFP4 grouped quantizers' checks on K, mask and the global scales, same class and message."""
    # K % 16 == 0 (the wrapper's assert); csrc/nv_internal/tensorrt_llm/thop/fp4Quantize.cpp: mask and
    # a_global_sf 1-D with one entry per group.
    torch._check_with(AssertionError, k % 16 == 0, lambda: f"k must be multiple of 16, but got {k}.")
    torch._check(mask.dim() == 1, lambda: "Check failed: mask.ndim() == 1")
    torch._check(a_global_sf.dim() == 1, lambda: "Check failed: input_global_scale.ndim() == 1")
    torch._check(
        mask.shape[0] == a_global_sf.shape[0],
        lambda: "Check failed: mask.shape()[0] == n_experts (%s vs. %s)" % (mask.shape[0], a_global_sf.shape[0]),
    )
