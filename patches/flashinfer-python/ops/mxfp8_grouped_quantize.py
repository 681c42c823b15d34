"""fp4patch op source for flashinfer.mxfp8_grouped_quantize (FlashInfer 0.6.14+).

Schema: ``(a, mask, backend="cutile") -> (x_q, sf)``; ``backend`` exists from 0.7.0 (cutile, cake; cuda from
0.7.4). Every backend writes the same layout, so one fake serves them all.

The fake mirrors the wrapper's checks (``flashinfer/quantization/fp8_quantization.py``
``mxfp8_grouped_quantize``: ``ValueError`` with the wrapper's messages; size conditions through
``torch._check_with`` so unbacked sizes never guard) and the outputs of ``mxfp8_grouped_quantize_impl``
(cuTile), ``cake_mxfp8_grouped_quantize_impl`` and, from 0.7.4, ``mxfp8_grouped_quant_sm100``
(``_mxfp8_experts_outputs`` + ``_to_masked_gemm_layout``): ``padded_K = round_up(K, 128)``, ``padded_M =
round_up(M, 128)``; ``x_q`` float8_e4m3fn ``[M, padded_K, B]`` (a permuted view of a contiguous ``[B, M,
padded_K]`` buffer) and ``sf`` uint8 ``[32, 4, padded_M // 128, 4, padded_K // 128, B]`` (a permuted view of a
contiguous ``[B, padded_M // 128, padded_K // 128, 32, 4, 4]`` buffer).

Not checked by the fake (they need the device or the data): the compute capability (``major < 10`` raises
in the op body, at run time), the availability of the cuTile / Cake backend, and, for ``backend="cuda"``,
the 32-byte alignment of ``a.data_ptr()`` (checked by the wrapper when the op runs; under Dynamo that
``data_ptr()`` was the wall).
"""
from typing import Tuple

import torch

from ._grouped_quantize import _masked_mxfp8_outputs

# backends: what the wrapper accepts (0.7.0-0.7.2.post1: cutile, cake; 0.7.4: cutile, cake, cuda); empty
# where the wrapper has no ``backend`` parameter (0.6.14-0.6.18.post1).
RELEASE = {"backends": ["cutile", "cake", "cuda"]}
MUTATES_ARGS = ()


def entry(**OP_PARAMS):
    """Called while compiling: every argument crosses the schema as is."""
    return OP(**OP_PARAMS)  # noqa: F821


def op(a: torch.Tensor, mask: torch.Tensor, backend: str = "cutile") -> Tuple[torch.Tensor, torch.Tensor]:
    """The real call, eagerly. Outputs are views of buffers the kernel entry allocated (never of an input)."""
    return WRAPPER(**OP_PARAMS)  # noqa: F821


def fake(**OP_PARAMS):
    """float8_e4m3fn ``[M, padded_K, B]`` and uint8 ``[32, 4, padded_M // 128, 4, padded_K // 128, B]`` views."""
    backends = RELEASE["backends"]  # noqa: F821 - bound per release by the renderer
    if backends and backend not in backends:
        raise ValueError(f"Unsupported backend for mxfp8_grouped_quantize: {backend!r}")
    if a.dim() != 3:
        raise ValueError("a must be a 3D tensor with shape [B, M, K]")
    if not a.is_cuda:
        raise ValueError("a must be a CUDA tensor")
    if a.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError("a dtype must be torch.float16 or torch.bfloat16")
    if mask.dim() != 1:
        raise ValueError("mask must be a 1D tensor with one entry per group")
    torch._check_with(ValueError, mask.size(0) == a.size(0), lambda: "mask must be a 1D tensor with one entry per group")
    if mask.dtype != torch.int32:
        raise ValueError("mask dtype must be torch.int32")
    if not mask.is_cuda:
        raise ValueError("mask must be a CUDA tensor")
    if mask.device != a.device:
        raise ValueError("mask must live on the same CUDA device as a")
    b, m, k = a.shape
    torch._check_with(ValueError, k % 32 == 0, lambda: f"K must be divisible by 32, got {k}")
    return _masked_mxfp8_outputs(a, b, m, k)
