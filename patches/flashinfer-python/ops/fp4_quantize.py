"""fp4patch op source for ``flashinfer.fp4_quantize`` (FlashInfer 0.5.0 .. 0.7.4).

Schema: the wrapper's parameters over every supported release (``fp4_quantize`` in
``flashinfer/fp4_quantization.py`` until 0.6.6, ``flashinfer/quantization/fp4_quantization.py`` from
0.6.7): ``backend`` from 0.6.8, ``is_global_scale_inversed`` from 0.6.11, ``nvfp4_4over6`` from 0.7.1
(crosses the schema as -1 = omitted, 0 = None), keyword-only ``batch_invariant`` from 0.7.4.

Fake, CUDA kernel path (``backend="cuda"``, ``"auto"``): x_q is packed uint8 ``[..., K/2]``; scale
factors are uint8, swizzled 128x4 / 8x4 (rows padded to 128 / 8, columns to 4) or linear
``[M, K/sf_vec_size]``, reshaped as the release's wrapper does: ``(-1, K/sf_vec_size)`` before 0.6.8,
``(-1, round_up(K/sf_vec_size, 4))`` from 0.6.8 (``RELEASE["sf_padded_columns"]``). Column-major input
(``stride(-2) == 1``) is quantized transposed and both outputs come back as transposed views.

Fake, CuTe-DSL path (``backend="cute-dsl"``, 0.6.8+; ``_fp4_quantize_cute_dsl`` and the Python drivers
``nvfp4_quantize_cute_dsl`` / ``mxfp4_quantize_cute_dsl`` in ``flashinfer/quantization/kernels/``): the
input is flattened to ``[M, K]`` and made contiguous, so x_q is always a 2-D row-major ``[M, K/2]`` (no
transposed views, no leading dimensions) and the scale factors a contiguous ``[rows, columns]``. The
release data (``RELEASE["cute_dsl_*"]``) carries what changed: the MXFP4 8x4 refusal before 0.6.12,
MXFP4 scales reshaped ``(-1, K/32)`` before 0.6.16, the TMA kernel's 8x4 rows (padded to 16, not 8,
until 0.7.0.post1; the TMA kernel runs from M, K and the input dtype up to 0.6.15.post1, and only with
``FLASHINFER_NVFP4_QUANTIZE_USE_TMA=1`` after), where the ``FLASHINFER_NVFP4_4OVER6`` recipe is refused
for fp8 input, and the empty-input return of 0.7.0+. The TMA choice follows M as guard-free integer
arithmetic, so a symbolic or unbacked M stays symbolic. From 0.7.1 the TMA and SM107 kernels lay out
as the vector kernel, so the device (which a fake cannot see) never changes the layout. Rejected as
the real path rejects them, same class and message: a recipe other than NVFP4 / MXFP4, MXFP4 8x4
before 0.6.12, a dtype or K the drivers assert against, a non-CUDA input, NVFP4 without a global scale
or with one of more than one element, fp8 input with the ``FLASHINFER_NVFP4_4OVER6`` recipe. Not
checked by the fake (the op raises when it runs): CuTe-DSL not installed, a GPU below SM100.

Refused under compile (their layouts are not mirrored): ``batch_invariant=True`` and an ``nvfp4_4over6`` config
object (by the fake, with ``_refuse``: a Dynamo ``Unsupported``, so fp4patch's message is the first line of the
error; ``entry`` sends a config as the code -2). Before that refusal the fake raises what 0.7.4's
``_resolve_fp4_quantize_recipe`` raises for an explicit value, as the first line of the error (``_first_line``):
the MXFP4 ``ValueError`` for any value but ``None``, the ``TypeError`` for a value that is neither a config nor
``None`` (code -3), the e4m3-input ``ValueError`` for a config; so is the e4m3-input ``ValueError`` of the
``FLASHINFER_NVFP4_4OVER6`` recipe on the CuTe-DSL path. A backend the release does not have is the wrapper's
``ValueError``.
"""
import os
from typing import Optional, Tuple

import torch

from ._fp4_layout import _fp4_cuda_outputs, _round_up
from ._nvfp4_4over6 import _nvfp4_4over6_argument, _nvfp4_4over6_code
from ._refusal import _check_nvfp4_4over6, _first_line, _refuse

RELEASE = {
    # 0.6.8+: swizzled sf reshaped to (-1, round_up(K // sf_vec_size, 4)); before, (-1, K // sf_vec_size)
    "sf_padded_columns": True,
    # the backends the wrapper accepts, and its ValueError for any other
    "backends": ["auto", "cuda", "cute-dsl"],
    "unknown_backend": "Unknown backend: {backend}. Must be 'auto', 'cuda' or 'cute-dsl'.",
    # backend="cute-dsl" (0.6.8+), flashinfer/quantization/kernels/{nvfp4,mxfp4}_quantize.py:
    # MXFP4 takes is_sf_8x4_layout (0.6.12+; before, a ValueError whatever is_sf_swizzled_layout says)
    "cute_dsl_mxfp4_8x4": True,
    # MXFP4 scales reshaped to (rows, round_up(K // 32, 4)) (0.6.16+); before, to (-1, K // 32)
    "cute_dsl_mxfp4_padded_columns": True,
    # rows of the NVFP4 TMA kernel's 8x4 scales: 16 (until 0.7.0.post1), else 8 (same as the vector kernel)
    "cute_dsl_tma_8x4_rows": 8,
    # the TMA kernel runs from M, K, dtype ("sizes", until 0.6.15.post1), also needs
    # FLASHINFER_NVFP4_QUANTIZE_USE_TMA=1 ("env", 0.6.16 .. 0.7.0.post1), or lays out as the vector kernel (false)
    "cute_dsl_tma": False,
    # the FLASHINFER_NVFP4_4OVER6 recipe with fp8 input: false (no recipe, until 0.6.12), refused in the
    # NVFP4 driver after its empty-input return ("driver-after-empty", 0.6.13 .. 0.7.0.post1), before it
    # ("driver", 0.7.1 .. 0.7.2.post1), or first in fp4_quantize ("wrapper", 0.7.4), with this ValueError
    "cute_dsl_recipe": "wrapper",
    "cute_dsl_recipe_fp8_error": "NVFP4 4over6 (from the nvfp4_4over6= argument or the FLASHINFER_NVFP4_4OVER6* "
    "environment) requires fp16 or bf16 input, got {dtype}.",
    # the NVFP4 driver returns empty outputs [M, K/2], [M, columns] when M == 0 or K == 0 (0.7.0+)
    "cute_dsl_empty_return": True,
    # _should_use_tma's size test (0.6.8 .. 0.7.4): M >= _TMA_MIN_M, K a multiple of _TMA_COLS_PER_STAGE,
    # floor(log2 M) + floor(log2 K) >= _TMA_LOG2_MK_THRESHOLD
    "cute_dsl_tma_min_m": 1024,
    "cute_dsl_tma_k_multiple": 512,
    "cute_dsl_tma_log2_mk": 25,
}
MUTATES_ARGS = ()


def _known(condition, default):
    # A size condition as a bool: exact for plain ints and backed sizes (a guard), `default` when an
    # unbacked size leaves it open (torch.fx.experimental.symbolic_shapes.guard_or_*, torch 2.8+).
    if isinstance(condition, bool):
        return condition
    try:
        from torch.fx.experimental.symbolic_shapes import guard_or_false, guard_or_true
    except ImportError:  # older torch: guard (a backed size) or raise (an unbacked one)
        return bool(condition)
    return guard_or_true(condition) if default else guard_or_false(condition)


def _assert(condition, message):
    # FlashInfer's `assert condition, message`: AssertionError when the sizes settle it, else a runtime check
    if not _known(condition, True):
        raise AssertionError(message)
    if not isinstance(condition, bool):
        torch._check(condition, lambda: message)


def _at_least(x, bound):
    # 1 if x >= bound else 0, for x >= 0, as integer arithmetic (no guard on a symbolic x)
    return torch.sym_min(1, x // bound)


def _floor_log2_capped(x, cap):
    # min(floor(log2 x), cap) for x >= 1, as integer arithmetic
    if isinstance(x, int):
        return min(x.bit_length() - 1, cap)
    total = 0
    for j in range(1, cap + 1):
        total = total + _at_least(x, 2**j)
    return total


def _cute_dsl_tma(m, k):
    # FlashInfer's _should_use_tma(m, k, dtype) size test, dtype already checked: 1 or 0
    min_m, cap = RELEASE["cute_dsl_tma_min_m"], RELEASE["cute_dsl_tma_log2_mk"]
    if isinstance(m, int) and m < min_m:
        return 0
    if isinstance(k, int):
        if k % RELEASE["cute_dsl_tma_k_multiple"] != 0:
            return 0
        # floor(log2 m) >= cap - floor(log2 k)  <=>  m >= 2 ** (cap - floor(log2 k))
        return _at_least(m, max(min_m, 2 ** max(0, cap - (k.bit_length() - 1))))
    k_ok = 1 - torch.sym_min(1, k % RELEASE["cute_dsl_tma_k_multiple"])
    log_ok = torch.sym_min(1, torch.sym_max(0, _floor_log2_capped(m, cap) + _floor_log2_capped(k, cap) - (cap - 1)))
    return k_ok * _at_least(m, min_m) * log_ok


def _cute_dsl_fake(input, global_scale, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout, is_sf_8x4_layout, nvfp4_4over6):
    # fp4_quantize(backend="cute-dsl") from the wrapper's checks on: _fp4_quantize_cute_dsl, then
    # nvfp4_quantize_cute_dsl (sf_vec_size 16, E4M3 scales) or mxfp4_quantize_cute_dsl (32, UE8M0)
    nvfp4 = sf_vec_size == 16 and not sf_use_ue8m0
    mxfp4 = sf_vec_size == 32 and sf_use_ue8m0
    fp8 = input.dtype == torch.float8_e4m3fn
    recipe = RELEASE["cute_dsl_recipe"]
    # the 4over6 recipe: omitted (-1) reads the environment (current_nvfp4_4over6_config), None (0) is off
    recipe_on = nvfp4 and bool(recipe) and nvfp4_4over6 == -1 and os.environ.get("FLASHINFER_NVFP4_4OVER6") == "1"
    if recipe == "wrapper" and recipe_on and fp8:
        _first_line(ValueError, RELEASE["cute_dsl_recipe_fp8_error"].format(dtype=input.dtype))
    if not (nvfp4 or mxfp4):
        raise ValueError(
            "CuTe-DSL backend does not support sf_vec_size=%s with sf_use_ue8m0=%s. Supported: "
            "(sf_vec_size=16, sf_use_ue8m0=False) for NVFP4, (sf_vec_size=32, sf_use_ue8m0=True) for MXFP4."
            % (sf_vec_size, sf_use_ue8m0)
        )
    if mxfp4 and is_sf_8x4_layout and not RELEASE["cute_dsl_mxfp4_8x4"]:
        raise ValueError("CuTe-DSL MXFP4 kernel does not support 8x4 layout. Supported: swizzled 128x4 and linear.")
    supported = (torch.float16, torch.bfloat16, torch.float8_e4m3fn)
    if nvfp4 and input.dtype not in supported:
        raise AssertionError("Input dtype must be one of %s, got %s" % (supported, input.dtype))
    if mxfp4 and input.dtype not in (torch.float16, torch.bfloat16):
        raise AssertionError("Input dtype must be float16 or bfloat16, got %s" % (input.dtype,))
    if not input.is_cuda:
        raise AssertionError("Input must be on CUDA device")
    if input.dim() > 2:
        m = input.numel() // input.shape[-1]
        k = input.shape[-1]
    else:
        m, k = input.shape
    _assert(k % sf_vec_size == 0, "K (%s) must be divisible by %s_SF_VEC_SIZE=%s" % (k, "NVFP4" if nvfp4 else "MXFP4", sf_vec_size))
    if recipe in ("driver", "wrapper") and recipe_on and fp8:
        _first_line(ValueError, RELEASE["cute_dsl_recipe_fp8_error"].format(dtype=input.dtype))
    empty = nvfp4 and RELEASE["cute_dsl_empty_return"] and (_known(m == 0, False) or _known(k == 0, False))
    if nvfp4 and not empty:  # the NVFP4 driver's global_scale.float().reshape(1), or float(global_scale)
        if global_scale is None:
            float(global_scale)  # TypeError, in this Python's words
        elif isinstance(global_scale.numel(), int) and global_scale.numel() != 1:
            raise RuntimeError("shape '[1]' is invalid for input of size %d" % global_scale.numel())
    if recipe == "driver-after-empty" and recipe_on and fp8 and not empty:
        _first_line(ValueError, RELEASE["cute_dsl_recipe_fp8_error"].format(dtype=input.dtype))
    cols = k // sf_vec_size
    sf_cols = _round_up(cols, 4) if is_sf_swizzled_layout else cols
    if empty or not is_sf_swizzled_layout:
        rows = m
    elif not is_sf_8x4_layout:
        rows = _round_up(m, 128)
    elif nvfp4 and RELEASE["cute_dsl_tma_8x4_rows"] != 8 and not fp8 and not recipe_on and (
        RELEASE["cute_dsl_tma"] == "sizes"
        or (RELEASE["cute_dsl_tma"] == "env" and os.environ.get("FLASHINFER_NVFP4_QUANTIZE_USE_TMA") == "1")
    ):
        tma_rows = RELEASE["cute_dsl_tma_8x4_rows"]
        rows = _round_up(m, 8) + _cute_dsl_tma(m, k) * (_round_up(m, tma_rows) - _round_up(m, 8))
    else:
        rows = _round_up(m, 8)
    if mxfp4 and not RELEASE["cute_dsl_mxfp4_padded_columns"]:  # scale_output.reshape(-1, K // 32)
        numel = rows * sf_cols
        torch._check(numel % cols == 0, lambda: "shape '[-1, %s]' is invalid for input of size %s" % (cols, numel))
        rows, sf_cols = numel // cols, cols
    x_q = torch.empty_strided([m, k // 2], [k // 2, 1], dtype=torch.uint8, device=input.device)
    sf = torch.empty_strided([rows, sf_cols], [sf_cols, 1], dtype=torch.uint8, device=input.device)
    return x_q, sf


def entry(**OP_PARAMS):
    return OP(
        **OP_PARAMS,
        nvfp4_4over6=_nvfp4_4over6_code(nvfp4_4over6, "fp4_quantize"),
    )


def op(
    input: torch.Tensor,
    global_scale: Optional[torch.Tensor] = None,
    sf_vec_size: int = 16,
    sf_use_ue8m0: bool = False,
    is_sf_swizzled_layout: bool = True,
    is_sf_8x4_layout: bool = False,
    is_global_scale_inversed: bool = False,
    enable_pdl: Optional[bool] = None,
    backend: str = "cuda",
    nvfp4_4over6: int = -1,
    batch_invariant: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    # The unpatched eager path (not compiling here), every argument by keyword.
    if nvfp4_4over6 not in (-1, 0):
        raise ValueError("fp4patch: fp4_quantize: nvfp4_4over6 must be -1 (argument omitted) or 0 (None), got %r" % (nvfp4_4over6,))
    x_q, sf = WRAPPER(
        **OP_PARAMS,
        nvfp4_4over6=_nvfp4_4over6_argument(nvfp4_4over6),
    )
    # custom_op outputs may not alias: the wrapper's transposed views are fresh tensors' views
    return x_q, sf


def fake(**OP_PARAMS):
    if nvfp4_4over6 not in (-1, 0, -2, -3):  # the op called directly with another code
        _check_nvfp4_4over6(nvfp4_4over6, "fp4_quantize")
    if sf_vec_size != 16 and sf_vec_size != 32:
        raise NotImplementedError("sf_vec_size can only be 16 or 32")
    if nvfp4_4over6 in (-2, -3):  # an explicit value other than None: _resolve_fp4_quantize_recipe (0.7.1+) first
        if sf_vec_size != 16 or sf_use_ue8m0:
            _first_line(
                ValueError,
                "nvfp4_4over6 applies to NVFP4 only (sf_vec_size=16, sf_use_ue8m0=False); got sf_vec_size=%s, sf_use_ue8m0=%s."
                % (sf_vec_size, sf_use_ue8m0),
            )
        if nvfp4_4over6 == -2 and input.dtype == torch.float8_e4m3fn:  # an explicit recipe for e4m3 input
            _first_line(ValueError, RELEASE["cute_dsl_recipe_fp8_error"].format(dtype=input.dtype))
        _check_nvfp4_4over6(nvfp4_4over6, "fp4_quantize")  # -3: resolve_nvfp4_4over6's TypeError; -2: refused
    if batch_invariant and backend != "auto":
        raise ValueError("fp4_quantize: batch_invariant=True requires backend='auto' (got backend=%r)" % (backend,))
    if batch_invariant:  # fp4patch's one-line error, the first line torch.compile prints (ops/_refusal.py)
        _refuse("fp4_quantize(batch_invariant=True)", "its output layout is not mirrored by the fp4patch fake")
    if backend not in RELEASE["backends"]:
        raise ValueError(RELEASE["unknown_backend"].format(backend=backend))
    if backend == "cute-dsl":
        return _cute_dsl_fake(input, global_scale, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout, is_sf_8x4_layout, nvfp4_4over6)
    return _fp4_cuda_outputs(input, sf_vec_size, is_sf_swizzled_layout, is_sf_8x4_layout, RELEASE["sf_padded_columns"])
