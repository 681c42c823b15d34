"""fp4patch op source for flashinfer.nvfp4_batched_quantize.

Schema: ``(a, a_global_sf, sf_vec_size=16, nvfp4_4over6=-1) -> (x_q, sf)``. ``nvfp4_4over6`` (FlashInfer
0.7.1+) crosses the schema as an int: -1 = argument omitted (``_UNSET``: the kernel entry reads the
``FLASHINFER_NVFP4_4OVER6*`` environment at run time, eagerly, inside the op), 0 = ``None``. An
``NVFP44Over6Config`` object is refused under compile (call outside the compiled region).

The fake mirrors ``fp4_batched_quantize_sm100`` inside ``get_fp4_quantization_module`` (0.6.0
``flashinfer/fp4_quantization.py``; 0.6.7+ ``flashinfer/quantization/fp4_quantization.py``; the same
allocation from 0.5.0 to 0.7.4): ``a`` is ``[B, M, K]`` (unpacked as a 3-tuple, so another rank fails the
same way), ``x_q = uint8 [B, M, K // 2]`` contiguous, ``sf = uint8 [B, round_up(M, 128) *
round_up(K // sf_vec_size, 4)]`` contiguous (128x4 swizzled, always). The kernel
(``csrc/nv_internal/tensorrt_llm/thop/fp4Quantize.cpp`` ``fp4_batched_quantize``) accepts only
a contiguous input, ``sf_vec_size == 16`` and ``K % 16 == 0``; the fake checks them with ``torch._check`` (no guard on sizes).
"""
from typing import Tuple

import torch

from ._nvfp4_4over6 import _nvfp4_4over6_argument, _nvfp4_4over6_code
from ._refusal import _check_nvfp4_4over6, _first_line

# Release data: none differs between releases beyond the parameter list (nvfp4_4over6 from 0.7.1).
RELEASE = {}
# Tensor parameters the real call writes into.
MUTATES_ARGS = ()


def entry(**OP_PARAMS):
    """Called while compiling: ``nvfp4_4over6`` crosses as an int (``_nvfp4_4over6_code``; a config is refused)."""
    return OP(**OP_PARAMS, nvfp4_4over6=_nvfp4_4over6_code(nvfp4_4over6, "nvfp4_batched_quantize"))  # noqa: F821


def op(a: torch.Tensor, a_global_sf: torch.Tensor, sf_vec_size: int = 16, nvfp4_4over6: int = -1) -> Tuple[torch.Tensor, torch.Tensor]:
    """The real call, eagerly: -1 / 0 back to omitted (``_UNSET``) / ``None``."""
    return WRAPPER(  # noqa: F821
        **OP_PARAMS,
        nvfp4_4over6=_nvfp4_4over6_argument(nvfp4_4over6),
    )


def fake(**OP_PARAMS):
    """uint8 ``[B, M, K // 2]`` and uint8 ``[B, round_up(M, 128) * round_up(K // sf_vec_size, 4)]``, contiguous."""
    if nvfp4_4over6 == -2 and a.dtype == torch.float8_e4m3fn:  # the wrapper's refusal of an explicit recipe for e4m3 input
        _first_line(ValueError, "NVFP4 4over6 (from the nvfp4_4over6= argument or the FLASHINFER_NVFP4_4OVER6* environment) requires fp16 or bf16 input, got %s." % (a.dtype,))
    _check_nvfp4_4over6(nvfp4_4over6, "nvfp4_batched_quantize")  # a config or a bad value: the compile error's first line
    b, m, k = a.shape
    torch._check(a.is_contiguous(), lambda: "self must be contiguous")
    torch._check(sf_vec_size == 16, lambda: "sfVecSize can only be 16")
    torch._check(k % sf_vec_size == 0, lambda: "fp4_batched_quantize: K=%s is not a multiple of sf_vec_size=%s" % (k, sf_vec_size))
    sf_size = (m + 127) // 128 * 128 * ((k // sf_vec_size + 3) // 4 * 4)
    x_q = a.new_empty((b, m, k // 2), dtype=torch.uint8)
    sf = a.new_empty((b, sf_size), dtype=torch.uint8)
    return x_q, sf
