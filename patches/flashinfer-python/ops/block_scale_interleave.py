"""fp4patch op source for ``flashinfer.block_scale_interleave`` (alias ``nvfp4_block_scale_interleave``).

Read from FlashInfer 0.5.0 .. 0.7.4 (``flashinfer/fp4_quantization.py`` until 0.6.6,
``flashinfer/quantization/fp4_quantization.py`` from 0.6.7): the wrapper asserts the dtype (uint8; uint8 or
bfloat16 from 0.6.0) and hands ``unswizzled_sf`` to ``get_fp4_quantization_module(arch).block_scale_interleave_sm100``,
which allocates the output in Python: a flat contiguous tensor of ``num_experts * round_up(rows, 128) *
round_up(cols, 4)`` elements (``_compute_swizzled_layout_sf_size``; ``num_experts`` is ``shape[0]`` for a 3-D
input, else 1; rows, cols the last two dims), dtype uint8 before 0.6.0, the input's from 0.6.0, on the input's
device. Under compile Dynamo stopped in the JIT module loader (``flashinfer/jit/cpp_ext.py``). FlashInfer's own
fake of ``flashinfer::block_scale_interleave_sm100`` is not used: it says ``[shape[0] * shape[1] // 16]`` uint8.

Schema: ``(unswizzled_sf, out=None) -> Tensor``; the op always returns a fresh tensor, allocated by the
wrapper's own code. ``out`` (0.7.2.post1+, keyword-only: a caller's buffer, kept across CUDA graph replays) never
crosses into the op: ``entry`` checks it as the wrapper does, copies the op's result into it and returns it, so
the caller gets its own tensor, written in place, at the cost of one device copy of the scale factors.

The fake raises what the Python code raises: the dtype ``AssertionError`` and, with ``out``, the wrapper's
``ValueError`` (both with ``_first_line``: the wrapper's message is the first line of the compile error), and an
``IndexError`` for a tensor of fewer than two dims (``unswizzled_sf.shape[-2]``). The C++ entry ``BlockScaleInterleave``
(``csrc/nv_internal/tensorrt_llm/thop/fp4Op.cpp``) refuses a non-contiguous input and more than three dims; the
fake raises those messages too (``torch._check``). No check reads the sizes, so a symbolic row count never guards.
"""

from typing import Optional

import torch

from ._refusal import _first_line

RELEASE = {
    # the dtypes the wrapper asserts (0.6.0+: uint8 or bfloat16) and its message
    "dtypes": ["uint8", "bfloat16"],
    "dtype_error": "Input dtype must be uint8 or bfloat16, got {dtype}",
}
MUTATES_ARGS = ()


def _round_up(x, y):
    return (x + y - 1) // y * y


def _out_size(unswizzled_sf):
    # block_scale_interleave_sm100's allocation: num_experts * _compute_swizzled_layout_sf_size(rows, cols, 128)
    num_experts = unswizzled_sf.shape[0] if unswizzled_sf.dim() == 3 else 1
    return num_experts * _round_up(unswizzled_sf.shape[-2], 128) * _round_up(unswizzled_sf.shape[-1], 4)


def entry(**OP_PARAMS):
    """Called while compiling with every parameter of the installed wrapper by keyword: the op's fresh result,
    or, given ``out``, that result copied into ``out`` and ``out`` returned (as the wrapper returns it)."""
    result = OP(**OP_PARAMS)
    if out is None:
        return result
    # the aten op, not Tensor.copy_: the method's device guard needs a CUDA build (a CPU-only compile of fake CUDA tensors)
    torch.ops.aten.copy_.default(out, result)
    return out


def op(unswizzled_sf: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The custom op's eager body: the real wrapper, which allocates its result (``out`` is ``entry``'s)."""
    return WRAPPER(**OP_PARAMS, out=OMIT)


def fake(**OP_PARAMS):
    """A flat contiguous ``[num_experts * round_up(rows, 128) * round_up(cols, 4)]`` of the input's dtype."""
    if str(unswizzled_sf.dtype).replace("torch.", "") not in RELEASE["dtypes"]:
        _first_line(AssertionError, RELEASE["dtype_error"].format(dtype=unswizzled_sf.dtype))
    size = _out_size(unswizzled_sf)  # an IndexError below two dims, as in the wrapper
    if out is not None and (
        out.device != unswizzled_sf.device or out.dtype != unswizzled_sf.dtype or tuple(out.shape) != (size,) or not out.is_contiguous()
    ):
        _first_line(
            ValueError,
            "block_scale_interleave out must be a contiguous flat tensor "
            f"of shape ({size},), dtype {unswizzled_sf.dtype}, on {unswizzled_sf.device}",
        )
    torch._check(unswizzled_sf.is_contiguous(), lambda: "blockScale must be contiguous")
    torch._check(unswizzled_sf.dim() <= 3, lambda: "Block Scale should be 2D or 3D tensor.")
    return unswizzled_sf.new_empty((size,))
