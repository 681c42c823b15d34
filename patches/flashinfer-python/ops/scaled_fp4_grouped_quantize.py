"""fp4patch op source for flashinfer.scaled_fp4_grouped_quantize.

Schema: ``(a, mask, a_global_sf, nvfp4_4over6=-1) -> (x_q, sf)``. ``nvfp4_4over6`` (FlashInfer 0.7.1+)
crosses as an int: -1 = omitted (``_UNSET``, the environment is read at run time inside the op), 0 =
``None``; an ``NVFP44Over6Config`` is refused under compile.

The fake mirrors ``scaled_fp4_grouped_quant_sm100`` inside ``get_fp4_quantization_module`` (0.6.0
``flashinfer/fp4_quantization.py``; 0.6.7+ ``flashinfer/quantization/fp4_quantization.py``; the same
allocation and permutes from 0.5.0 to 0.7.4): ``a`` is ``[L, M, K]``, ``K % 16 == 0`` (the wrapper's
``assert``, raised as ``AssertionError`` with its message). Outputs are permuted views of contiguous buffers:
``x_q`` uint8 ``[M, K // 2, L]`` (physical ``[L, M, K // 2]``) and ``sf`` float8_e4m3fn
``[32, 4, padded_M // 128, 4, padded_K // 4, L]`` (physical ``[L, padded_M // 128, padded_K // 4, 32, 4, 4]``),
``padded_M = round_up(M, 128)``, ``padded_K = round_up(K // 16, 4)`` (built here directly in the
viewed shape: no view arithmetic on symbolic sizes). The kernel's shape checks
(``csrc/nv_internal/tensorrt_llm/thop/fp4Quantize.cpp`` ``silu_and_mul_scaled_nvfp4_experts_quantize``):
``mask`` and ``a_global_sf`` are 1-D with one entry per group (a ``[1]`` global scale with ``L > 1`` is
rejected, as the kernel does).
"""
from typing import Tuple

import torch

RELEASE = {}
MUTATES_ARGS = ()


def _grouped_nvfp4_outputs(a, l, m, k):
    """The permuted (x_q, sf) views of the masked grouped-GEMM layout, as the kernel entry returns them."""
    padded_m = (m + 127) // 128 * 128
    padded_k = (k // 16 + 3) // 4 * 4
    x_q = a.new_empty((l, m, k // 2), dtype=torch.uint8).permute(1, 2, 0)
    sf = a.new_empty((l, padded_m // 128, padded_k // 4, 32, 4, 4), dtype=torch.float8_e4m3fn)
    return x_q, sf.permute(3, 4, 1, 5, 2, 0)


def entry(**OP_PARAMS):
    """Called while compiling: ``nvfp4_4over6`` omitted / ``None`` cross as -1 / 0; a config is refused.

    Where a release lacks the parameter, the renderer binds it to ``op()``'s default (-1): it is then an int
    already, and ``_UNSET`` (absent from those modules) is never looked up.
    """
    if nvfp4_4over6 is None:
        nvfp4_4over6_code = 0
    elif isinstance(nvfp4_4over6, int):  # a release without the parameter: bound to op()'s default, -1
        nvfp4_4over6_code = nvfp4_4over6
    elif nvfp4_4over6 is _UNSET:  # noqa: F821 - the target module's own sentinel (0.7.1+, where the parameter exists)
        nvfp4_4over6_code = -1
    else:
        raise TypeError(
            "fp4patch: scaled_fp4_grouped_quantize(nvfp4_4over6=<config>) cannot be traced by torch.compile: an "
            "NVFP44Over6Config cannot cross the custom-op schema; omit nvfp4_4over6 or pass None, or call "
            "scaled_fp4_grouped_quantize outside the compiled region"
        )
    return OP(**OP_PARAMS, nvfp4_4over6=nvfp4_4over6_code)  # noqa: F821


def op(a: torch.Tensor, mask: torch.Tensor, a_global_sf: torch.Tensor, nvfp4_4over6: int = -1) -> Tuple[torch.Tensor, torch.Tensor]:
    """The real call, eagerly: -1 / 0 back to omitted (``_UNSET``) / ``None``.

    The wrapper returns permuted views of buffers it allocated itself (never of an input): custom_op
    accepts them as fresh outputs.
    """
    return WRAPPER(  # noqa: F821
        **OP_PARAMS,
        nvfp4_4over6=_UNSET if nvfp4_4over6 == -1 else None,  # noqa: F821
    )


def fake(**OP_PARAMS):
    """Permuted views: uint8 ``[M, K // 2, L]`` and float8_e4m3fn ``[32, 4, padded_M // 128, 4, padded_K // 4, L]``."""
    l, m, k = a.shape
    torch._check_with(AssertionError, k % 16 == 0, lambda: f"k must be multiple of 16, but got {k}.")
    torch._check(mask.dim() == 1, lambda: "Check failed: mask.ndim() == 1")
    torch._check(a_global_sf.dim() == 1, lambda: "Check failed: input_global_scale.ndim() == 1")
    torch._check(
        mask.shape[0] == a_global_sf.shape[0],
        lambda: "Check failed: mask.shape()[0] == n_experts (%s vs. %s)" % (mask.shape[0], a_global_sf.shape[0]),
    )
    a.view(l * m, k)  # the kernel entry's own view: a non-contiguous input fails here as it does there
    return _grouped_nvfp4_outputs(a, l, m, k)
