"""fp4patch op source for flashinfer.silu_and_mul_scaled_nvfp4_experts_quantize.

Schema: ``(a, mask, a_global_sf, nvfp4_4over6=-1) -> (x_q, sf)``. ``nvfp4_4over6`` (FlashInfer 0.7.1+)
crosses as an int: -1 = omitted (``_UNSET``, the environment is read at run time inside the op), 0 =
``None``; an ``NVFP44Over6Config`` is refused under compile.

The fake mirrors ``silu_and_mul_scaled_nvfp4_experts_quantize_sm100`` inside ``get_fp4_quantization_module``
(0.6.0 ``flashinfer/fp4_quantization.py``; 0.6.7+ ``flashinfer/quantization/fp4_quantization.py``; the
wrapper lives in ``flashinfer/activation.py``; the same allocation and permutes from 0.5.0 to 0.7.4): ``a`` is
``[L, M, 2 * K]`` (gate half, then up half), ``K = a.shape[2] // 2`` and ``K % 16 == 0`` (the entry's
``assert``, raised as ``AssertionError`` with its message). Outputs are the masked grouped-GEMM layout of
``scaled_fp4_grouped_quantize`` for ``K``: ``x_q`` uint8 ``[M, K // 2, L]`` and ``sf`` float8_e4m3fn
``[32, 4, padded_M // 128, 4, padded_K // 4, L]``, permuted views of contiguous buffers. The kernel's shape
checks (``csrc/nv_internal/tensorrt_llm/thop/fp4Quantize.cpp``): ``2 * K`` even, ``mask`` and
``a_global_sf`` 1-D with one entry per expert.
"""
from typing import Tuple

import torch

from ._grouped_quantize import _check_grouped_nvfp4, _grouped_nvfp4_outputs
from ._nvfp4_4over6 import _nvfp4_4over6_argument, _nvfp4_4over6_code
from ._refusal import _check_nvfp4_4over6

RELEASE = {}
MUTATES_ARGS = ()


def entry(**OP_PARAMS):
    """Called while compiling: ``nvfp4_4over6`` crosses as an int (``_nvfp4_4over6_code``; a config is refused)."""
    return OP(**OP_PARAMS, nvfp4_4over6=_nvfp4_4over6_code(nvfp4_4over6, "silu_and_mul_scaled_nvfp4_experts_quantize"))  # noqa: F821


def op(a: torch.Tensor, mask: torch.Tensor, a_global_sf: torch.Tensor, nvfp4_4over6: int = -1) -> Tuple[torch.Tensor, torch.Tensor]:
    """The real call, eagerly: -1 / 0 back to omitted (``_UNSET``) / ``None``. Outputs are views of fresh buffers."""
    return WRAPPER(  # noqa: F821
        **OP_PARAMS,
        nvfp4_4over6=_nvfp4_4over6_argument(nvfp4_4over6),
    )


def fake(**OP_PARAMS):
    """Permuted views: uint8 ``[M, K // 2, L]`` and float8_e4m3fn ``[32, 4, padded_M // 128, 4, padded_K // 4, L]``."""
    _check_nvfp4_4over6(nvfp4_4over6, "silu_and_mul_scaled_nvfp4_experts_quantize")  # a config or a bad value: the compile error's first line
    l, m, k_by_2 = a.shape
    k = k_by_2 // 2
    _check_grouped_nvfp4(k, mask, a_global_sf)
    torch._check(k_by_2 % 2 == 0, lambda: "k must be a multiple of 2")
    a.view(l * m, k_by_2)  # the kernel entry's own view: a non-contiguous input fails here as it does there
    return _grouped_nvfp4_outputs(a, l, m, k)
