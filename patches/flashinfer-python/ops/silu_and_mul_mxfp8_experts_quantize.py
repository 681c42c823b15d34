"""fp4patch op source for flashinfer.silu_and_mul_mxfp8_experts_quantize (FlashInfer 0.7.4+).

Schema: ``(a, mask, enable_pdl=None) -> (x_q, sf)`` (``enable_pdl`` is keyword-only in the wrapper; the op
receives every argument by keyword anyway).

The fake mirrors the wrapper's checks (``flashinfer/quantization/fp8_quantization.py``
``silu_and_mul_mxfp8_experts_quantize``: ``ValueError`` with its messages; size conditions through
``torch._check_with``) and the outputs of ``silu_and_mul_mxfp8_experts_quantize_sm100``
(``_mxfp8_experts_outputs(input, True)`` + ``_to_masked_gemm_layout``): ``a`` is ``[B, M, 2 * K]``,
``padded_K = round_up(K, 128)``, ``padded_M = round_up(M, 128)``; ``x_q`` float8_e4m3fn ``[M, padded_K, B]``
and ``sf`` uint8 ``[32, 4, padded_M // 128, 4, padded_K // 128, B]``, permuted views of contiguous buffers.

Not checked by the fake: the 32-byte alignment of ``a.data_ptr()`` (data, not metadata: the wrapper checks it
when the op runs; under Dynamo it was the wall) and the compute capability (``major < 10`` raises in the op
body).
"""
from typing import Optional, Tuple

import torch

from ._grouped_quantize import _masked_mxfp8_outputs

RELEASE = {}
MUTATES_ARGS = ()


def entry(**OP_PARAMS):
    """Called while compiling: every argument crosses the schema as is."""
    return OP(**OP_PARAMS)  # noqa: F821


def op(a: torch.Tensor, mask: torch.Tensor, enable_pdl: Optional[bool] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """The real call, eagerly. Outputs are views of buffers the kernel entry allocated (never of an input)."""
    return WRAPPER(**OP_PARAMS)  # noqa: F821


def fake(**OP_PARAMS):
    """float8_e4m3fn ``[M, padded_K, B]`` and uint8 ``[32, 4, padded_M // 128, 4, padded_K // 128, B]`` views."""
    if a.dim() != 3:
        raise ValueError("a must be a 3D tensor with shape [B, M, 2 * K]")
    if not a.is_cuda:
        raise ValueError("a must be a CUDA tensor")
    if a.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError("a dtype must be torch.float16 or torch.bfloat16")
    torch._check_with(ValueError, a.is_contiguous(), lambda: "a must be contiguous")
    b, m, k2 = a.shape
    torch._check_with(ValueError, k2 % 64 == 0, lambda: f"a last dim must be 2 * K with K divisible by 32, got {k2}")
    if mask.dim() != 1:
        raise ValueError("mask must be a 1D tensor with one entry per expert")
    torch._check_with(ValueError, mask.size(0) == b, lambda: "mask must be a 1D tensor with one entry per expert")
    if mask.dtype != torch.int32:
        raise ValueError("mask dtype must be torch.int32")
    if mask.device != a.device:
        raise ValueError("mask must live on the same CUDA device as a")
    torch._check_with(ValueError, mask.is_contiguous(), lambda: "mask must be contiguous")
    return _masked_mxfp8_outputs(a, b, m, k2 // 2)
