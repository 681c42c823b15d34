"""fp4patch op source for flashinfer.mxfp8_quantize.

Schema: ``(input, is_sf_swizzled_layout=True, alignment=32, enable_pdl=None, backend="auto",
sf_swizzle_layout=-1, batch_invariant=False) -> (x_q, sf)``. ``sf_swizzle_layout`` (an ``SfLayout``, FlashInfer
0.6.7+: an ``IntEnum``; a plain ``Enum`` in 0.6.0-0.6.6, whose wrapper does not take it) crosses as its ``.value`` (0 = 128x4, 1 = 8x4,
2 = linear), ``None`` as -1, and is rebuilt with the target module's ``SfLayout`` inside the op. ``backend``
exists from 0.6.7 (default ``"cuda"``; ``"auto"`` from 0.7.4, see the spec's per-release defaults),
``batch_invariant`` from 0.7.4.

The fake mirrors the CUDA path: the wrapper ``mxfp8_quantize`` (``assert input.shape[-1] % 32 == 0``) and the
kernel entry ``mxfp8_quantize_sm100`` in ``get_mxfp8_quantization_sm100_module`` (0.6.0
``flashinfer/fp8_quantization.py``; 0.6.7+ ``flashinfer/quantization/fp8_quantization.py``): ``m = numel //
K``, ``padded_K = round_up(K, alignment)``; ``x_q`` float8_e4m3fn ``[*input.shape[:-1], padded_K]``
contiguous; ``sf`` uint8 1-D of ``round_up(m, 128) * round_up(padded_K // 32, 4)`` (128x4),
``round_up(m, 8) * round_up(padded_K // 32, 4)`` (8x4) or ``m * padded_K // 32`` (linear). The input is not
transposed back: the kernel (``csrc/nv_internal/tensorrt_llm/thop/fp8Quantize.cpp``) requires it contiguous,
``alignment % 32 == 0`` and rank >= 2; the fake checks those with ``torch._check``.

Fake, host path (a CPU ``input``, the CUDA backend; the same in every release 0.5.0-0.7.4): the kernel entry's
``input.device.type == "cpu"`` branch ignores ``alignment`` and allocates ``x_q`` **uint8** ``input.shape`` (not
float8, not padded) and the uint8 scale factors of ``round_up(input.shape[0], 128) * round_up(input.shape[1] // 32,
4)`` (128x4) or ``input.numel() // 32`` (linear); 8x4 (0.6.7+) raises ``ValueError(f"{sf_swizzle_layout} is not
supported for mxfp8 quantization on CPU.")`` (an ``IntEnum``: ``1``). A 1-D input fails on ``input.shape[1]`` for
128x4 (``IndexError``). The host kernel ``mxfp8_quantize_host`` then requires float32 (``Inconsistency of Tensor type:
x_fp32``) and 2-D (``x_fp32 should be 2D tensor.``); the fake checks those with ``torch._check``.

Fake, CuTe-DSL path (``backend="cute-dsl"``, 0.6.7+: every release with the backend): the driver
``mxfp8_quantize_cute_dsl`` (``flashinfer/quantization/kernels/mxfp8_quantize.py``) asserts the dtype and
``alignment % 32 == 0``, flattens the input to 2-D ``[m, K]`` (``m = numel // K``; a 1-D input fails to unpack)
and copies it contiguous, so the outputs are float8_e4m3fn ``[m, padded_K]`` (2-D whatever the input's rank)
and the uint8 1-D scale factors of the same sizes as the CUDA kernel's for 128x4, 8x4 and linear. What
differs between releases is release data (read from every wheel 0.6.7-0.7.4; the driver's allocation,
``ROW_TILE_SIZE = 128`` and ``SF_VEC_SIZE = 32`` are the same in all):

* ``cute_dsl_layout``: where the scale layout comes from. ``"is_sf_swizzled_layout"`` (0.6.7-0.6.11.post3):
  the wrapper raises ``ValueError("SfLayout.layout_8x4 is not supported in cute-dsl backend")`` when the
  resolved ``sf_swizzle_layout`` is 8x4, and otherwise hands the driver the caller's
  ``is_sf_swizzled_layout`` (128x4 when true, linear when false, whatever ``sf_swizzle_layout`` says).
  ``"sf_swizzle_layout"`` (0.6.12+): the wrapper maps the resolved layout to ``is_sf_swizzled_layout =
  layout != linear`` and ``is_sf_8x4_layout = layout == 8x4`` (the driver takes 8x4 from 0.6.12).
* ``cute_dsl_dtypes``: the input dtypes the driver's assert accepts (float16, bfloat16 before 0.7.1; + float32
  from 0.7.1), its message naming them.

Refused under compile, with fp4patch's one-line error (``_refuse``: an ``Unsupported``, which Dynamo
re-raises as it is, so it is the first line of the error; without ``fullgraph`` a graph break):
``batch_invariant=True`` (another kernel class), and ``backend="cute-dsl"`` where the release data's
``cute_dsl`` is false (no release now: kept for a CuTe-DSL driver whose layout a later release changes
before a target mirrors it). Call those outside the compiled region.
"""
from typing import Optional, Tuple

import torch

from ._refusal import _refuse

# backends: what the wrapper's ``assert backend in (...)`` accepts, in its order (0.6.7-0.7.2.post1: cuda,
# cute-dsl; 0.7.4: auto, cuda, cute-dsl); empty where the wrapper has no ``backend`` parameter (before 0.6.7).
# cute_dsl: whether the fake mirrors backend="cute-dsl" (mxfp8_quantize_cute_dsl; refused where false).
# cute_dsl_layout: "sf_swizzle_layout" (0.6.12+) or "is_sf_swizzled_layout" (0.6.7-0.6.11.post3: 8x4 refused by
#   the wrapper, the caller's flag picks 128x4 / linear); cute_dsl_dtypes: the driver's input dtypes (fp32 from 0.7.1).
RELEASE = {
    "backends": ["auto", "cuda", "cute-dsl"],
    "cute_dsl": True,
    "cute_dsl_layout": "sf_swizzle_layout",
    "cute_dsl_dtypes": ["float16", "bfloat16", "float32"],
}
MUTATES_ARGS = ()


def _sf_size(m, padded_k, layout):
    """The uint8 scale factors' length: 0 = 128x4, 1 = 8x4 (rows padded to 128 / 8, columns to 4), 2 = linear."""
    if layout == 2:
        return m * padded_k // 32
    if layout in (0, 1):
        row = 128 if layout == 0 else 8
        return (m + row - 1) // row * row * ((padded_k // 32 + 3) // 4 * 4)
    raise ValueError(f"Invalid sf_swizzle_layout value: {layout}")


def _host_fake(input, layout):
    """The host path's outputs (a CPU ``input``): uint8 ``input.shape`` and the uint8 scale factors, ``alignment``
    ignored; 0 = 128x4 (from ``input.shape[0]`` and ``input.shape[1] // 32``), 2 = linear, 1 = 8x4 refused."""
    if layout == 1:
        raise ValueError(f"{layout} is not supported for mxfp8 quantization on CPU.")
    if layout == 0:
        rows, cols = input.shape[0], input.shape[1] // 32
        sf_size = (rows + 127) // 128 * 128 * ((cols + 3) // 4 * 4)
    else:
        sf_size = input.numel() // 32
    torch._check(input.dtype == torch.float32, lambda: "Inconsistency of Tensor type: x_fp32")
    torch._check(input.dim() == 2, lambda: "x_fp32 should be 2D tensor.")
    return input.new_empty(input.shape, dtype=torch.uint8), input.new_empty((sf_size,), dtype=torch.uint8)


def _cute_dsl_fake(input, alignment, layout, dtypes):
    """``mxfp8_quantize_cute_dsl``'s outputs: float8_e4m3fn ``[m, padded_K]`` (the input flattened to 2-D) and the
    scales; ``dtypes``: the names of the input dtypes its assert accepts, in its order."""
    if input.dtype not in tuple(getattr(torch, d) for d in dtypes):
        names = dtypes[0] if len(dtypes) == 1 else ", ".join(dtypes[:-1]) + ("," if len(dtypes) > 2 else "") + " or " + dtypes[-1]
        raise AssertionError(f"Input dtype must be {names}, got {input.dtype}")
    if alignment % 32 != 0:
        raise AssertionError("alignment must be divisible by SF_VEC_SIZE=32")
    if input.dim() < 2:
        raise ValueError(f"not enough values to unpack (expected 2, got {input.dim()})")
    k = input.shape[-1]
    m = 1
    for d in input.shape[:-1]:
        m = m * d
    padded_k = (k + alignment - 1) // alignment * alignment
    sf_size = _sf_size(m, padded_k, layout)
    return input.new_empty((m, padded_k), dtype=torch.float8_e4m3fn), input.new_empty((sf_size,), dtype=torch.uint8)


def entry(**OP_PARAMS):
    """Called while compiling: ``sf_swizzle_layout`` (an ``SfLayout`` or ``None``) crosses as its value / -1."""
    return OP(  # noqa: F821
        **OP_PARAMS,
        # an int: op()'s default (-1), bound where a release lacks the parameter
        sf_swizzle_layout=-1 if sf_swizzle_layout is None else int(getattr(sf_swizzle_layout, "value", sf_swizzle_layout)),
    )


def op(
    input: torch.Tensor,
    is_sf_swizzled_layout: bool = True,
    alignment: int = 32,
    enable_pdl: Optional[bool] = None,
    backend: str = "auto",
    sf_swizzle_layout: int = -1,
    batch_invariant: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The real call, eagerly: ``sf_swizzle_layout`` back to ``SfLayout`` (or ``None``)."""
    return WRAPPER(  # noqa: F821
        **OP_PARAMS,
        sf_swizzle_layout=None if sf_swizzle_layout == -1 else SfLayout(sf_swizzle_layout),  # noqa: F821
    )


def fake(**OP_PARAMS):
    """float8_e4m3fn ``[*input.shape[:-1], padded_K]`` and the uint8 1-D scale factors of the chosen layout (a CPU
    input: the host path's uint8 ``input.shape`` and scale factors)."""
    backends = RELEASE["backends"]  # noqa: F821 - bound per release by the renderer
    if backends and backend not in backends:
        quoted = ["'%s'" % b for b in backends]
        raise AssertionError("backend must be %s or %s, got '%s'" % (", ".join(quoted[:-1]), quoted[-1], backend))
    if batch_invariant:
        _refuse("mxfp8_quantize(batch_invariant=True)", "its output layout is not mirrored by the fp4patch fake")
    if backend == "cute-dsl" and not RELEASE["cute_dsl"]:  # noqa: F821
        _refuse("mxfp8_quantize(backend='cute-dsl')", "the fp4patch fake mirrors this release's CUDA kernel only")
    if sf_swizzle_layout == -1:
        sf_swizzle_layout = 0 if is_sf_swizzled_layout else 2
    k = input.shape[-1]
    torch._check_with(AssertionError, k % 32 == 0, lambda: "")
    if backend == "cute-dsl":
        if RELEASE["cute_dsl_layout"] == "is_sf_swizzled_layout":
            if sf_swizzle_layout == 1:
                raise ValueError("SfLayout.layout_8x4 is not supported in cute-dsl backend")
            sf_swizzle_layout = 0 if is_sf_swizzled_layout else 2
        return _cute_dsl_fake(input, alignment, sf_swizzle_layout, RELEASE["cute_dsl_dtypes"])  # noqa: F821
    if input.device.type == "cpu":
        return _host_fake(input, sf_swizzle_layout)
    torch._check(input.dim() >= 2, lambda: "Input should be >=2D tensor.")
    torch._check(alignment % 32 == 0, lambda: "alignment must be divisible by SF_VEC_SIZE = 32")
    torch._check(input.is_contiguous(), lambda: "input must be contiguous")
    m = 1
    for d in input.shape[:-1]:
        m = m * d
    padded_k = (k + alignment - 1) // alignment * alignment
    sf_size = _sf_size(m, padded_k, sf_swizzle_layout)
    x_q = input.new_empty((*input.shape[:-1], padded_k), dtype=torch.float8_e4m3fn)
    sf = input.new_empty((sf_size,), dtype=torch.uint8)
    return x_q, sf
