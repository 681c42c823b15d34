"""Shared helpers of the FP4 quantizer op sources: the CUDA kernel path's output layout of ``fp4_quantize``.

Not an op source: the renderer (``fp4patch/ops/render.py``) copies the functions an op source imports from
here (``from ._fp4_layout import _fp4_cuda_outputs``) into its rendered block, so nothing installed imports
this file. Used by ``ops/fp4_quantize.py`` (its ``backend="cuda"`` fake) and ``ops/nvfp4_quantize.py``
(``nvfp4_quantize``'s per-tensor CUDA path, which calls ``fp4_quantize`` with flags derived from
``sfLayout``), so both fakes give the same layout. The layout is that of ``fp4_quantize`` and its kernel
entry ``get_fp4_quantization_module(...).fp4_quantize_sm100`` (``flashinfer/fp4_quantization.py`` until
0.6.6, ``flashinfer/quantization/fp4_quantization.py`` from 0.6.7).
"""
import torch


def _round_up(x, y):
    return (x + y - 1) // y * y


def _fp4_cuda_outputs(input, sf_vec_size, is_sf_swizzled_layout, is_sf_8x4_layout, sf_padded_columns):
    """``(x_q, sf)`` of ``fp4_quantize``'s CUDA kernel path for ``input`` ``[..., K]``.

    x_q is packed uint8 ``[..., K/2]``; sf is uint8, swizzled 128x4 / 8x4 (rows padded to 128 / 8, columns to 4)
    or linear ``[M, K/sf_vec_size]``, reshaped ``(-1, round_up(K/sf_vec_size, 4))`` when ``sf_padded_columns``
    (0.6.8+), else ``(-1, K/sf_vec_size)``. A column-major input (``stride(-2) == 1``) is quantized transposed
    and both outputs come back as transposed views. K not a multiple of ``sf_vec_size`` is a size check.
    """
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
    elif sf_padded_columns:
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
