"""fp4patch op source for ``flashinfer.fp4_quantize`` (FlashInfer 0.5.0 .. 0.7.4).

Schema: the wrapper's parameters over every supported release (``fp4_quantize`` in
``flashinfer/fp4_quantization.py`` until 0.6.6, ``flashinfer/quantization/fp4_quantization.py`` from
0.6.7): ``backend`` from 0.6.8, ``is_global_scale_inversed`` from 0.6.11, ``nvfp4_4over6`` from 0.7.1
(crosses the schema as -1 = omitted, 0 = None), keyword-only ``batch_invariant`` from 0.7.4.

Fake: the CUDA kernel path of the wrapper. x_q is packed uint8 ``[..., K/2]``; scale factors are
uint8, swizzled 128x4 / 8x4 (rows padded to 128 / 8, columns to 4) or linear ``[M, K/sf_vec_size]``,
reshaped as the release's wrapper does: ``(-1, K/sf_vec_size)`` before 0.6.8, ``(-1, round_up(K/sf_vec_size,
4))`` from 0.6.8 (``RELEASE["sf_padded_columns"]``). Column-major input (``stride(-2) == 1``) is
quantized transposed and both outputs come back as transposed views.

Refused under compile (their layouts are not mirrored): ``backend`` other than
``RELEASE["compile_backends"]``, ``batch_invariant=True``, an ``nvfp4_4over6`` config object.
"""
from typing import Optional, Tuple

import torch

RELEASE = {
    # 0.6.8+: swizzled sf reshaped to (-1, round_up(K // sf_vec_size, 4)); before, (-1, K // sf_vec_size)
    "sf_padded_columns": True,
    # backends whose output layout the fake mirrors
    "compile_backends": ["cuda"],
}
MUTATES_ARGS = ()


def _round_up(x, y):
    return (x + y - 1) // y * y


def entry(
    input,
    global_scale=None,
    sf_vec_size=16,
    sf_use_ue8m0=False,
    is_sf_swizzled_layout=True,
    is_sf_8x4_layout=False,
    is_global_scale_inversed=False,
    enable_pdl=None,
    backend="cuda",
    nvfp4_4over6=-1,
    batch_invariant=False,
):
    # Only "omitted" and None cross the schema (as -1 / 0); a NVFP44Over6Config cannot.
    if isinstance(nvfp4_4over6, int):  # -1: not a parameter of this release
        pass
    elif nvfp4_4over6 is None:
        nvfp4_4over6 = 0
    elif nvfp4_4over6 is _UNSET:  # the sentinel of FlashInfer 0.7.1+ (a global of this module)
        nvfp4_4over6 = -1
    else:
        raise TypeError(
            "fp4patch: fp4_quantize(nvfp4_4over6=<config>) cannot be traced by torch.compile: "
            "a NVFP44Over6Config cannot cross the custom-op schema; "
            "omit nvfp4_4over6 or pass None, or call fp4_quantize outside the compiled region"
        )
    return OP(
        input=input,
        global_scale=global_scale,
        sf_vec_size=sf_vec_size,
        sf_use_ue8m0=sf_use_ue8m0,
        is_sf_swizzled_layout=is_sf_swizzled_layout,
        is_sf_8x4_layout=is_sf_8x4_layout,
        is_global_scale_inversed=is_global_scale_inversed,
        enable_pdl=enable_pdl,
        backend=backend,
        nvfp4_4over6=nvfp4_4over6,
        batch_invariant=batch_invariant,
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
        input=input,
        global_scale=global_scale,
        sf_vec_size=sf_vec_size,
        sf_use_ue8m0=sf_use_ue8m0,
        is_sf_swizzled_layout=is_sf_swizzled_layout,
        is_sf_8x4_layout=is_sf_8x4_layout,
        is_global_scale_inversed=is_global_scale_inversed,
        enable_pdl=enable_pdl,
        backend=backend,
        nvfp4_4over6=_UNSET if nvfp4_4over6 == -1 else None,
        batch_invariant=batch_invariant,
    )
    # custom_op outputs may not alias: the wrapper's transposed views are fresh tensors' views
    return x_q, sf


def fake(
    input,
    global_scale=None,
    sf_vec_size=16,
    sf_use_ue8m0=False,
    is_sf_swizzled_layout=True,
    is_sf_8x4_layout=False,
    is_global_scale_inversed=False,
    enable_pdl=None,
    backend="cuda",
    nvfp4_4over6=-1,
    batch_invariant=False,
):
    if backend not in RELEASE["compile_backends"]:
        raise NotImplementedError(
            "fp4patch: fp4_quantize(backend=%r) is not supported under torch.compile (only %s: the fake "
            "mirrors the CUDA kernel's output layout); call it outside the compiled region"
            % (backend, " / ".join(RELEASE["compile_backends"]))
        )
    if batch_invariant:
        raise NotImplementedError(
            "fp4patch: fp4_quantize(batch_invariant=True) is not supported under torch.compile (its output "
            "layout is not mirrored by the fake); call it outside the compiled region"
        )
    if nvfp4_4over6 not in (-1, 0):
        raise ValueError("fp4patch: fp4_quantize: nvfp4_4over6 must be -1 (argument omitted) or 0 (None), got %r" % (nvfp4_4over6,))
    if sf_vec_size != 16 and sf_vec_size != 32:
        raise NotImplementedError("sf_vec_size can only be 16 or 32")
    shape = list(input.shape)
    is_column_major = input.stride(-2) == 1
    if is_column_major:
        shape[-2], shape[-1] = shape[-1], shape[-2]
    k = shape[-1]
    torch._check(k % sf_vec_size == 0, lambda: "fp4_quantize: K=%s is not a multiple of sf_vec_size=%s" % (k, sf_vec_size))
    m = 1
    for d in shape[:-1]:
        m = m * d
    cols = k // sf_vec_size
    if not is_sf_swizzled_layout:
        sf_shape = [m, cols]
    elif RELEASE["sf_padded_columns"]:
        sf_shape = [_round_up(m, 8 if is_sf_8x4_layout else 128), _round_up(cols, 4)]
    else:  # sf.reshape((-1, cols)) of the padded buffer
        numel = _round_up(m, 8 if is_sf_8x4_layout else 128) * _round_up(cols, 4)
        torch._check(numel % cols == 0, lambda: "shape '[-1, %s]' is invalid for input of size %s" % (cols, numel))
        sf_shape = [numel // cols, cols]
    q_shape = shape[:-1] + [k // 2]
    q_stride = [1] * len(q_shape)
    for i in range(len(q_shape) - 2, -1, -1):
        q_stride[i] = q_stride[i + 1] * q_shape[i + 1]
    sf_stride = [sf_shape[1], 1]
    if is_column_major:
        for dims in (q_shape, q_stride, sf_shape, sf_stride):
            dims[-2], dims[-1] = dims[-1], dims[-2]
    x_q = torch.empty_strided(q_shape, q_stride, dtype=torch.uint8, device=input.device)
    sf = torch.empty_strided(sf_shape, sf_stride, dtype=torch.uint8, device=input.device)
    return x_q, sf
