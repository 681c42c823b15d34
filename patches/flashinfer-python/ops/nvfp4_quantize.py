"""fp4patch op source for ``flashinfer.nvfp4_quantize`` (FlashInfer 0.6.11 .. 0.7.4: the releases with ``per_token_activation``).

Read from ``nvfp4_quantize`` in ``flashinfer/quantization/fp4_quantization.py`` of 0.6.11, 0.6.13, 0.6.17, 0.7.1,
0.7.2 and 0.7.4 (six code eras), the kernel entry ``get_fp4_quantization_module(...).nvfp4_quant_and_per_token_scale_sm100``
of the same file (it allocates the three outputs in Python, then launches the C++ launcher
``nvfp4_quant_and_per_token_scale`` of ``csrc/nv_internal/tensorrt_llm/thop/fp4Quantize.cpp`` on them) and the CuTe-DSL
driver ``nvfp4_quantize_per_token_cute_dsl`` of ``flashinfer/quantization/kernels/nvfp4_quantize.py`` (0.6.13+).

Schema: the wrapper's parameters over every supported release, and always three outputs: a custom op's schema
has a fixed number of outputs, so ``entry`` returns the first two, or all three when ``per_token_activation``
(a Python bool while tracing) is set, as the wrapper does. ``sfLayout`` crosses as the ``SfLayout`` int;
``a_global_sf`` as a Tensor: a Python float (vLLM's and SGLang's per-token call pass ``1 / (448 * 6)``) crosses as
a 0-d float64 CPU tensor that ``op`` turns back into the float, so the eager call is exactly the caller's (no
device tensor, no synchronization); ``nvfp4_4over6`` (0.7.1+) as -1 = omitted, 0 = None (``ops/_nvfp4_4over6.py``).

Fake, per token (``per_token_activation=True``): x_q uint8 ``[M, K/2]``, the E4M3 scale factors as uint8
``[rows, columns]`` (linear: ``[M, K/16]``; 128x4 / 8x4: rows padded to 128 / 8, columns to 4), and the per-token
float32 scales ``[M]``, all contiguous; the same for ``backend="cuda"`` (the kernel entry's allocation) and
``backend="cute-dsl"`` (the driver's, which also asserts fp16 / bf16, a CUDA input, 2-D and K a multiple of 16,
with the driver's AssertionError). Per tensor: ``backend="cuda"`` calls ``fp4_quantize`` with the flags derived from
``sfLayout``, so the first two outputs are ``fp4_quantize``'s CUDA layout (``ops/_fp4_layout.py``, shared with
``ops/fp4_quantize.py``); the third is an empty float32 tensor that ``entry`` drops. The wrapper's own
``ValueError``s (a backend the release lacks, ``sf_vec_size`` other than 16 per token, ``out_scale`` or
``expanded_idx_to_permuted_idx`` where not accepted, ``batch_invariant`` with another backend than ``auto``) are
raised by the fake with the wrapper's message.

Refused under compile (``_refuse``: fp4patch's one line is the first line of the error): ``do_shuffle=True`` (the
TRT-LLM weight shuffle, a load-time transform whose row permutation is computed on the host),
``backend="cute-dsl"`` per tensor (its TMA / vector kernel choice is ``fp4_quantize``'s, not mirrored here),
``backend="cake"`` per token (0.7.2+, experimental), ``batch_invariant=True`` (0.7.4). Not checked by the fake
(the op raises when it runs): the recipe check of an explicit ``nvfp4_4over6`` against a float scale, CuTe-DSL not
installed, a GPU below SM100, the C++ launcher's dtype / K checks.

With a device tensor ``a_global_sf``, the CUDA per-token path reads it with ``a_global_sf.item()`` inside the real
call: a host synchronization when the op runs, which CUDA-graph capture cannot hold. Pass a float or a CPU tensor
there (what vLLM and SGLang pass), or ``backend="cute-dsl"``, which keeps a tensor on the device.
"""
from typing import Optional, Tuple

import torch

from ._fp4_layout import _fp4_cuda_outputs, _round_up
from ._nvfp4_4over6 import _nvfp4_4over6_argument, _nvfp4_4over6_code
from ._refusal import _check_nvfp4_4over6, _refuse

RELEASE = {
    # the backends the per-token path takes, and whether the wrapper refuses another one first
    # (0.6.11 .. 0.6.12: "only supports backend='cuda'", before the sf_vec_size check)
    "per_token_backends": ["cuda", "cute-dsl", "cake"],
    "per_token_backend_first": False,
    # the backends of the per-tensor path and the wrapper's ValueError for an unknown one
    "backends": ["cuda", "cute-dsl", "cake"],
    "unknown_backend": "Unknown backend: {backend}. Must be 'cuda', 'cute-dsl' or 'cake'.",
    # "auto" is "cuda" (0.7.4)
    "auto_backend": True,
    # the per-token backends that take out_scale (0.7.1+), and the ValueError for another
    "out_scale_backends": ["cute-dsl", "cake"],
    "out_scale_error": "out_scale is only supported with backend='cute-dsl' or 'cake'",
    # fp4_quantize's swizzled sf reshaped to (-1, round_up(K // sf_vec_size, 4)) (0.6.8+)
    "sf_padded_columns": True,
}
MUTATES_ARGS = ()


def _host_float(scale):
    # entry's crossing of a Python float scale: a 0-d float64 CPU tensor
    return scale.dtype == torch.float64 and scale.dim() == 0 and scale.device.type == "cpu"


def _per_token_outputs(a, sf_layout):
    # nvfp4_quant_and_per_token_scale_sm100 / nvfp4_quantize_per_token_cute_dsl: layout 0 = 128x4, 1 = 8x4, 2 = linear
    m, k = a.shape
    cols = k // 16
    if sf_layout == 2:
        rows = m
    else:
        rows = _round_up(m, 128 if sf_layout == 0 else 8)
        cols = _round_up(cols, 4)
    x_q = a.new_empty((m, k // 2), dtype=torch.uint8)
    sf = a.new_empty((rows, cols), dtype=torch.uint8)
    return x_q, sf, a.new_empty((m,), dtype=torch.float32)


def entry(**OP_PARAMS):
    """Called while compiling with every parameter of the installed ``nvfp4_quantize`` by keyword: the op's
    three outputs, of which the wrapper's two (or three with ``per_token_activation``) are returned."""
    if not isinstance(a_global_sf, torch.Tensor):
        a_global_sf = torch.tensor(float(a_global_sf), dtype=torch.float64)
    x_q, sf, per_token_scale = OP(
        **OP_PARAMS,
        sfLayout=int(sfLayout),
        nvfp4_4over6=_nvfp4_4over6_code(nvfp4_4over6, "nvfp4_quantize"),
    )
    if per_token_activation:
        return x_q, sf, per_token_scale
    return x_q, sf


def op(
    a: torch.Tensor,
    a_global_sf: torch.Tensor,
    sfLayout: int = 0,
    do_shuffle: bool = False,
    sf_vec_size: int = 16,
    enable_pdl: Optional[bool] = None,
    backend: str = "cuda",
    per_token_activation: bool = False,
    expanded_idx_to_permuted_idx: Optional[torch.Tensor] = None,
    out_scale: Optional[torch.Tensor] = None,
    nvfp4_4over6: int = -1,
    batch_invariant: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The custom op's eager body: the real ``nvfp4_quantize``, the float scale given back as a float."""
    if nvfp4_4over6 not in (-1, 0):
        raise ValueError("fp4patch: nvfp4_quantize: nvfp4_4over6 must be -1 (argument omitted) or 0 (None), got %r" % (nvfp4_4over6,))
    out = WRAPPER(
        **OP_PARAMS,
        a_global_sf=float(a_global_sf.item()) if _host_float(a_global_sf) else a_global_sf,
        sfLayout=SfLayout(sfLayout),  # noqa: F821 - the wrapper module's SfLayout (flashinfer/tllm_enums.py)
        nvfp4_4over6=_nvfp4_4over6_argument(nvfp4_4over6),
    )
    if per_token_activation:
        return out[0], out[1], out[2]
    return out[0], out[1], out[0].new_empty((0,), dtype=torch.float32)


def fake(**OP_PARAMS):
    """The wrapper's outputs (see the module docstring), its ValueErrors, and fp4patch's refusals."""
    if nvfp4_4over6 not in (-1, 0):  # the wrapper resolves it first: a config refused, another value resolve_nvfp4_4over6's TypeError
        _check_nvfp4_4over6(nvfp4_4over6, "nvfp4_quantize")
    if batch_invariant:
        if backend != "auto":
            raise ValueError("nvfp4_quantize: batch_invariant=True requires backend='auto' (got backend=%r)" % (backend,))
        _refuse("nvfp4_quantize(batch_invariant=True)", "its output layout is not mirrored by the fp4patch fake")
    if backend == "auto" and RELEASE["auto_backend"]:
        backend = "cuda"
    if per_token_activation:
        if RELEASE["per_token_backend_first"] and backend != "cuda":
            raise ValueError("Per-token NVFP4 quantization only supports backend='cuda'")
        if sf_vec_size != 16:
            raise ValueError("Per-token NVFP4 quantization only supports sf_vec_size=16")
        if out_scale is not None and backend not in RELEASE["out_scale_backends"]:
            raise ValueError(RELEASE["out_scale_error"])
        if backend == "cute-dsl" and expanded_idx_to_permuted_idx is not None:
            raise ValueError("CuTe-DSL per-token NVFP4 quantization does not support expanded_idx_to_permuted_idx")
        if do_shuffle:
            _refuse("nvfp4_quantize(per_token_activation=True, do_shuffle=True)", "the TRT-LLM shuffle's layout is not mirrored by the fp4patch fake")
        if backend == "cuda":
            return _per_token_outputs(a, sfLayout)
        if backend == "cute-dsl" and backend in RELEASE["per_token_backends"]:
            if a.dtype not in (torch.float16, torch.bfloat16):
                raise AssertionError(
                    "Per-token NVFP4 input dtype must be one of %s, got %s" % ((torch.float16, torch.bfloat16), a.dtype)
                )
            if not a.is_cuda:
                raise AssertionError("Input must be on CUDA device")
            if a.dim() != 2:
                raise AssertionError("Per-token NVFP4 quantization expects a 2D input")
            k = a.shape[1]
            if isinstance(k, int) and k % 16 != 0:
                raise AssertionError("K (%s) must be divisible by NVFP4_SF_VEC_SIZE=16" % (k,))
            torch._check(k % 16 == 0, lambda: "K (%s) must be divisible by NVFP4_SF_VEC_SIZE=16" % (k,))
            return _per_token_outputs(a, sfLayout)
        if backend == "cake" and backend in RELEASE["per_token_backends"]:
            _refuse("nvfp4_quantize(per_token_activation=True, backend='cake')", "the experimental Cake kernel's outputs are not mirrored by the fp4patch fake")
        raise ValueError(RELEASE["unknown_backend"].format(backend=backend))
    if out_scale is not None:
        raise ValueError("out_scale is only supported with per_token_activation=True")
    if backend == "cuda":
        if expanded_idx_to_permuted_idx is not None:
            raise ValueError("expanded_idx_to_permuted_idx is only supported with per_token_activation=True")
        if do_shuffle:
            _refuse("nvfp4_quantize(do_shuffle=True)", "the TRT-LLM shuffle's layout is not mirrored by the fp4patch fake")
        if _host_float(a_global_sf):
            raise AttributeError("'float' object has no attribute 'cuda'")
        if sf_vec_size != 16 and sf_vec_size != 32:
            raise NotImplementedError("sf_vec_size can only be 16 or 32")
        x_q, sf = _fp4_cuda_outputs(a, sf_vec_size, sfLayout != 2, sfLayout == 1, RELEASE["sf_padded_columns"])
        return x_q, sf, a.new_empty((0,), dtype=torch.float32)
    if backend == "cute-dsl":
        if sf_vec_size != 16:
            raise ValueError("CuTe-DSL backend only supports sf_vec_size=16, got %s" % (sf_vec_size,))
        _refuse("nvfp4_quantize(backend='cute-dsl')", "the per-tensor CuTe-DSL layout is not mirrored by the nvfp4_quantize fake; fp4_quantize(backend='cute-dsl') is")
    if backend == "cake" and "cake" in RELEASE["backends"]:
        raise ValueError(
            "backend='cake' implements per_token_activation=True only; use 'cuda' or 'cute-dsl' for the global-scale quantization"
        )
    raise ValueError(RELEASE["unknown_backend"].format(backend=backend))
