"""fp4patch op source for flashinfer.mxfp8_quantize.

Schema: ``(input, is_sf_swizzled_layout=True, alignment=32, enable_pdl=None, backend="auto",
sf_swizzle_layout=-1, batch_invariant=False) -> (x_q, sf)``. ``sf_swizzle_layout`` (an ``SfLayout``, FlashInfer
0.6.7+: a plain ``Enum`` there, an ``IntEnum`` in 0.7.x) crosses as its ``.value`` (0 = 128x4, 1 = 8x4,
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

Refused under compile (``NotImplementedError`` from the fake, at trace time): ``backend="cute-dsl"`` (its
CuTe-DSL kernel flattens the input to 2-D and allocates another layout, not mirrored here) and
``batch_invariant=True`` (another kernel class). Call those outside the compiled region.
"""
from typing import Optional, Tuple

import torch

# backends: what the wrapper's ``assert backend in (...)`` accepts, in its order (0.6.7-0.7.2.post1: cuda,
# cute-dsl; 0.7.4: auto, cuda, cute-dsl); empty where the wrapper has no ``backend`` parameter (before 0.6.7).
RELEASE = {"backends": ["auto", "cuda", "cute-dsl"]}
MUTATES_ARGS = ()


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
    """float8_e4m3fn ``[*input.shape[:-1], padded_K]`` and the uint8 1-D scale factors of the chosen layout."""
    backends = RELEASE["backends"]  # noqa: F821 - bound per release by the renderer
    if backends and backend not in backends:
        quoted = ["'%s'" % b for b in backends]
        raise AssertionError("backend must be %s or %s, got '%s'" % (", ".join(quoted[:-1]), quoted[-1], backend))
    if batch_invariant:
        raise NotImplementedError(
            "fp4patch: mxfp8_quantize(batch_invariant=True) is not supported under torch.compile (its output "
            "layout is not mirrored by the fp4patch fake); call it outside the compiled region"
        )
    if backend == "cute-dsl":
        raise NotImplementedError(
            "fp4patch: mxfp8_quantize(backend='cute-dsl') is not supported under torch.compile (only the CUDA "
            "kernel's output layout is mirrored by the fp4patch fake); call it outside the compiled region"
        )
    if sf_swizzle_layout == -1:
        sf_swizzle_layout = 0 if is_sf_swizzled_layout else 2
    k = input.shape[-1]
    torch._check_with(AssertionError, k % 32 == 0, lambda: "")
    torch._check(input.dim() >= 2, lambda: "Input should be >=2D tensor.")
    torch._check(alignment % 32 == 0, lambda: "alignment must be divisible by SF_VEC_SIZE = 32")
    torch._check(input.is_contiguous(), lambda: "input must be contiguous")
    m = 1
    for d in input.shape[:-1]:
        m = m * d
    padded_k = (k + alignment - 1) // alignment * alignment
    if sf_swizzle_layout == 2:
        sf_size = m * padded_k // 32
    elif sf_swizzle_layout in (0, 1):
        row = 128 if sf_swizzle_layout == 0 else 8
        sf_size = (m + row - 1) // row * row * ((padded_k // 32 + 3) // 4 * 4)
    else:
        raise ValueError(f"Invalid sf_swizzle_layout value: {sf_swizzle_layout}")
    x_q = input.new_empty((*input.shape[:-1], padded_k), dtype=torch.float8_e4m3fn)
    sf = input.new_empty((sf_size,), dtype=torch.uint8)
    return x_q, sf
