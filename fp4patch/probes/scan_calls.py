"""The scan's call table: which FlashInfer FP4/FP8 functions ``scan_probe.py`` compiles, and with what call.

Each entry of :data:`FUNCTIONS` names a public ``flashinfer`` function and the argument pool its call is built
from (DeepSeek-V3 / Qwen3-MoE-like shapes at decode, M = 8 tokens; ``args(t, torch)``, where ``t(shape, dtype)``
makes a tensor): only the parameters the installed signature has are passed, so one pool serves every release.

Besides each function's default call, *variants* (``name[variant]``, counted as entries of their own) make
the calls engines make: each backend of ``fp4_quantize`` and ``mxfp8_quantize`` (SGLang's CuTe-DSL call on
SM100), vLLM's per-token ``nvfp4_quantize`` and SGLang's (``backend="cute-dsl"``), the TRT-LLM-Gen MoE ops with
``do_finalize=False``, ``block_scale_interleave`` into a caller's ``out=``. A variant names the parameters it sets
(``variant``), which the release must have. ``mm_fp4[...]`` and ``cutlass_fused_moe[nvfp4]`` are the function's
only calls, not variants.

Which fp4patch spec makes an entry traceable is data: ``spec`` when given, else the function's
name in kebab case + ``-fullgraph`` (``mm_fp4`` -> ``mm-fp4-fullgraph``, :func:`spec_for`), and ``fallback_spec``
the one whose op the call reaches where that spec is not applied (``nvfp4_quantize``'s default call: its own op
from 0.6.11, ``fp4_quantize``'s before); ``verify --trace`` runs the entries of every such spec that is applied,
variants aside (a scan reports them; what a spec promises for them its own tests check). Where a call's argument
depends on the release (a backend the installed release accepts), its value comes from fp4patch's release data
(:func:`release_choice`, :func:`release_lacks`). :func:`planned_pool` describes a call without FlashInfer and
without tracing: what fp4patch hashes as what a release was traced with (``fp4patch.checks.trace.probe_plan``).

A sibling of ``scan_probe.py``, which loads it by path and offers its names: it imports only the standard library,
is handed torch, reads FlashInfer from ``sys.modules`` when a call is built (``SfLayout``), and imports nothing of
fp4patch.
"""
from __future__ import annotations

import sys

# --------------------------------------------------------------------------- #
# Shapes: a DeepSeek-V3 / Qwen3-MoE-like layer at decode, M = 8 tokens.
# --------------------------------------------------------------------------- #
M = 8  # tokens
K = 7168  # hidden size
N = 2048  # output features of a projection (mm_fp4, bmm_fp8)
E = 256  # experts
TOP_K = 8  # experts per token
I_MOE = 2048  # expert intermediate size
L = 32  # local experts of a grouped / batched quantizer
MAX_M = 64  # rows per expert of a grouped quantizer


def _round_up(x, y):
    return (x + y - 1) // y * y


def _sf_128x4(rows, cols):
    """Bytes of a 128x4-swizzled scale-factor tensor for a [rows, cols * 16] NVFP4 matrix."""
    return _round_up(rows, 128) * _round_up(cols, 4)


# --------------------------------------------------------------------------- #
# Argument pools: parameter name -> factory(t), where t(shape, dtype) makes a fake CUDA tensor.
# Only the names the installed signature has are used, so one pool serves every release.
# --------------------------------------------------------------------------- #
def _quantizer_args(t, torch):
    return {
        "input": lambda: t((M, K), torch.bfloat16),
        "a": lambda: t((M, K), torch.bfloat16),
        "global_scale": lambda: t((1,), torch.float32),
        "a_global_sf": lambda: t((1,), torch.float32),
    }


def _grouped_args(t, torch, k, global_scale):
    args = {"a": lambda: t((L, MAX_M, k), torch.bfloat16), "mask": lambda: t((L,), torch.int32)}
    if global_scale:
        args["a_global_sf"] = lambda: t((L,), torch.float32)
    return args


def _mm_fp4_args(t, torch, backend):
    def col_major(shape, dtype):  # what engines pass: the weight and its scales transposed
        return t((shape[1], shape[0]), dtype).t()

    return {
        "a": lambda: t((M, K // 2), torch.uint8),
        "b": lambda: col_major((K // 2, N), torch.uint8),
        "a_descale": lambda: t((_round_up(M, 128), K // 16), torch.float8_e4m3fn),
        "b_descale": lambda: col_major((K // 16, _round_up(N, 128)), torch.float8_e4m3fn),
        "alpha": lambda: t((), torch.float32),
        "out_dtype": lambda: torch.bfloat16,
        "backend": lambda: backend,
    }


def _bmm_fp8_args(t, torch):
    return {
        "A": lambda: t((1, M, K), torch.float8_e4m3fn),
        "B": lambda: t((1, N, K), torch.float8_e4m3fn).transpose(-2, -1),
        "A_scale": lambda: t((), torch.float32),
        "B_scale": lambda: t((), torch.float32),
        "dtype": lambda: torch.bfloat16,
    }


def _routing_args():
    """DeepSeek-V3 routing: 8 groups, 4 of them, 8 experts per token."""
    return {
        "num_experts": lambda: E,
        "top_k": lambda: TOP_K,
        "n_group": lambda: 8,
        "topk_group": lambda: 4,
        "intermediate_size": lambda: I_MOE,
        "local_expert_offset": lambda: 0,
        "local_num_experts": lambda: E,
        "routed_scaling_factor": lambda: 2.5,
        "routing_method_type": lambda: 2,  # RoutingMethodType.DeepSeekV3
        "do_finalize": lambda: True,
    }


def _trtllm_fp4_moe_args(t, torch, routed):
    args = {
        "routing_bias": lambda: t((E,), torch.bfloat16),
        "hidden_states": lambda: t((M, K // 2), torch.uint8),
        "hidden_states_scale": lambda: t((M * K // 16,), torch.float8_e4m3fn),
        "gemm1_weights": lambda: t((E, 2 * I_MOE, K // 2), torch.uint8),
        "gemm1_weights_scale": lambda: t((E, 2 * I_MOE, K // 16), torch.float8_e4m3fn),
        "gemm1_bias": lambda: None,
        "gemm1_alpha": lambda: None,
        "gemm1_beta": lambda: None,
        "gemm1_clamp_limit": lambda: None,
        "gemm2_weights": lambda: t((E, K, I_MOE // 2), torch.uint8),
        "gemm2_weights_scale": lambda: t((E, K, I_MOE // 16), torch.float8_e4m3fn),
        "gemm2_bias": lambda: None,
        "output1_scale_scalar": lambda: t((E,), torch.float32),
        "output1_scale_gate_scalar": lambda: t((E,), torch.float32),
        "output2_scale_scalar": lambda: t((E,), torch.float32),
        **_routing_args(),
    }
    if routed:  # packed (score << 16 | expert id), as the routed variant takes
        args["topk_ids"] = lambda: t((M, TOP_K), torch.int32)
    else:
        args["routing_logits"] = lambda: t((M, E), torch.float32)
    return args


def _trtllm_fp8_moe_args(t, torch):
    return {
        "routing_logits": lambda: t((M, E), torch.float32),
        "routing_bias": lambda: t((E,), torch.bfloat16),
        "hidden_states": lambda: t((M, K), torch.float8_e4m3fn),
        "hidden_states_scale": lambda: t((K // 128, M), torch.float32),
        "gemm1_weights": lambda: t((E, 2 * I_MOE, K), torch.float8_e4m3fn),
        "gemm1_weights_scale": lambda: t((E, 2 * I_MOE // 128, K // 128), torch.float32),
        "gemm2_weights": lambda: t((E, K, I_MOE), torch.float8_e4m3fn),
        "gemm2_weights_scale": lambda: t((E, K // 128, I_MOE // 128), torch.float32),
        **_routing_args(),
    }


def _trtllm_fp8_per_tensor_moe_args(t, torch):
    # vLLM's and SGLang's FlashInfer TRT-LLM FP8 per-tensor MoE: bf16 routing logits, FP8 activations and
    # weights, one float32 scale per local expert for each GEMM output
    return {
        "routing_logits": lambda: t((M, E), torch.bfloat16),
        "routing_bias": lambda: None,
        "hidden_states": lambda: t((M, K), torch.float8_e4m3fn),
        "gemm1_weights": lambda: t((E, 2 * I_MOE, K), torch.float8_e4m3fn),
        "output1_scales_scalar": lambda: t((E,), torch.float32),
        "output1_scales_gate_scalar": lambda: t((E,), torch.float32),
        "gemm2_weights": lambda: t((E, K, I_MOE), torch.float8_e4m3fn),
        "output2_scales_scalar": lambda: t((E,), torch.float32),
        "use_routing_scales_on_input": lambda: False,
        **_routing_args(),
        "n_group": lambda: None,
        "topk_group": lambda: None,
        "routed_scaling_factor": lambda: None,
        "routing_method_type": lambda: 1,  # RoutingMethodType.Renormalize
    }


def _cutlass_moe_nvfp4_args(t, torch):
    # NVFP4 weights packed two per byte, block scales as int32 words (vLLM's layout of the call)
    def quant_scales():
        return [
            t((1,), torch.float32),  # fc1 input global scale
            t((E, 2 * I_MOE, K // 16 // 4), torch.int32),  # fc1 weight block scales
            t((E,), torch.float32),  # fc1 alpha
            t((1,), torch.float32),  # fc2 input global scale
            t((E, K, I_MOE // 16 // 4), torch.int32),  # fc2 weight block scales
            t((E,), torch.float32),  # fc2 alpha
        ]

    return {
        "input": lambda: t((M, K), torch.bfloat16),
        "token_selected_experts": lambda: t((M, TOP_K), torch.int32),
        "token_final_scales": lambda: t((M, TOP_K), torch.float32),
        "fc1_expert_weights": lambda: t((E, 2 * I_MOE, K // 16), torch.int64),
        "fc2_expert_weights": lambda: t((E, K, I_MOE // 16), torch.int64),
        "output_dtype": lambda: torch.bfloat16,
        "quant_scales": quant_scales,
    }


def _norm_quant_args(t, torch, residual):
    args = {
        "out": lambda: t((M, K), torch.float8_e4m3fn),
        "input": lambda: t((M, K), torch.bfloat16),
        "weight": lambda: t((K,), torch.bfloat16),
        "scale": lambda: t((1,), torch.float32),
    }
    if residual:
        args["residual"] = lambda: t((M, K), torch.bfloat16)
    return args


def _sf_layout(name):
    """A member of the installed FlashInfer's ``SfLayout`` (0.6.7+; read when the call is built)."""
    return getattr(sys.modules["flashinfer"].SfLayout, name)


def _with(args, **values):
    """The argument pool ``args`` with ``values`` (name -> value) set: a variant's call."""

    def pool(t, torch):
        return {**args(t, torch), **{name: (lambda v=v: v() if callable(v) else v) for name, v in values.items()}}

    return pool


#: SGLang's MXFP8 activation quantization on SM100: mxfp8_quantize(x, is_sf_swizzled_layout=True, alignment=32,
#: backend="cute-dsl", sf_swizzle_layout=SfLayout.layout_128x4)
_SGLANG_MXFP8 = {"is_sf_swizzled_layout": True, "alignment": 32, "backend": "cute-dsl", "sf_swizzle_layout": lambda: _sf_layout("layout_128x4")}
#: vLLM's per-token NVFP4 activation quantization: nvfp4_quantize(h, global_scale, sfLayout=SfLayout.layout_linear,
#: per_token_activation=True)
_VLLM_PER_TOKEN = {"sfLayout": lambda: _sf_layout("layout_linear"), "per_token_activation": True}
#: SGLang's per-token NVFP4 activation quantization on SM100 (its FP4 all-gather and TRT-LLM MoE paths):
#: nvfp4_quantize(h, scale, sfLayout=SfLayout.layout_linear, per_token_activation=True, backend="cute-dsl")
_SGLANG_PER_TOKEN = {**_VLLM_PER_TOKEN, "backend": "cute-dsl"}


def _trtllm_moe(routed):
    return lambda t, torch: _trtllm_fp4_moe_args(t, torch, routed)


#: ``release_args`` of a call whose backend comes from its spec's release data (:func:`release_choice`).
_BACKEND = {"backend": "backends"}

#: The scanned entries: display name, public ``flashinfer`` function, argument pool
#: ``args(t, torch)``, optionally the fp4patch spec that makes it traceable, and for a variant the
#: parameters it sets (``variant``: the release must have them). ``release_args`` name the parameters whose
#: value comes from the spec's release data on the installed release (:func:`release_choice`);
#: ``requires_release`` a value that release data must list for the call to exist there (:func:`release_lacks`).
FUNCTIONS = [
    {"name": "fp4_quantize", "function": "fp4_quantize", "args": _quantizer_args, "release_args": _BACKEND},
    {"name": "fp4_quantize[cuda]", "function": "fp4_quantize", "args": _with(_quantizer_args, backend="cuda"), "variant": ("backend",),
     "requires_release": {"backends": "cuda"}},
    {"name": "fp4_quantize[cute-dsl]", "function": "fp4_quantize", "args": _with(_quantizer_args, backend="cute-dsl"), "variant": ("backend",),
     "requires_release": {"backends": "cute-dsl"}},
    # its own op from 0.6.11 (per_token_activation); before, and without that spec, the call reaches fp4_quantize's
    {"name": "nvfp4_quantize", "function": "nvfp4_quantize", "args": _quantizer_args, "spec": "nvfp4-quantize-fullgraph",
     "fallback_spec": "fp4-quantize-fullgraph", "release_args": _BACKEND},
    {
        "name": "nvfp4_quantize[per-token]",
        "function": "nvfp4_quantize",
        "args": _with(_quantizer_args, **_VLLM_PER_TOKEN),
        "spec": "nvfp4-quantize-fullgraph",
        "variant": ("sfLayout", "per_token_activation"),
    },
    {
        "name": "nvfp4_quantize[per-token,cute-dsl]",
        "function": "nvfp4_quantize",
        "args": _with(_quantizer_args, **_SGLANG_PER_TOKEN),
        "spec": "nvfp4-quantize-fullgraph",
        "variant": ("sfLayout", "per_token_activation", "backend"),
        "requires_release": {"backends": "cute-dsl"},
    },
    {"name": "mxfp4_quantize", "function": "mxfp4_quantize", "args": _quantizer_args, "spec": "fp4-quantize-fullgraph"},
    {"name": "nvfp4_batched_quantize", "function": "nvfp4_batched_quantize", "args": lambda t, torch: _grouped_args(t, torch, K, True)},
    {"name": "scaled_fp4_grouped_quantize", "function": "scaled_fp4_grouped_quantize", "args": lambda t, torch: _grouped_args(t, torch, K, True)},
    {
        "name": "silu_and_mul_scaled_nvfp4_experts_quantize",
        "function": "silu_and_mul_scaled_nvfp4_experts_quantize",
        "args": lambda t, torch: _grouped_args(t, torch, 2 * I_MOE, True),
    },
    {"name": "block_scale_interleave", "function": "block_scale_interleave", "args": lambda t, torch: {"unswizzled_sf": lambda: t((M, K // 16), torch.uint8)}},
    # the caller's buffer (0.7.2.post1+), kept across CUDA graph replays
    {
        "name": "block_scale_interleave[out]",
        "function": "block_scale_interleave",
        "args": lambda t, torch: {"unswizzled_sf": lambda: t((M, K // 16), torch.uint8), "out": lambda: t((_sf_128x4(M, K // 16),), torch.uint8)},
        "variant": ("out",),
    },
    {
        "name": "e2m1_and_ufp8sf_scale_to_float",
        "function": "e2m1_and_ufp8sf_scale_to_float",
        "args": lambda t, torch: {
            "e2m1_tensor": lambda: t((M, K // 2), torch.uint8),
            "ufp8_scale_tensor": lambda: t((_sf_128x4(M, K // 16),), torch.uint8),
            "global_scale_tensor": lambda: t((1,), torch.float32),
        },
    },
    {"name": "mxfp8_quantize", "function": "mxfp8_quantize", "args": _quantizer_args, "release_args": _BACKEND},
    {"name": "mxfp8_quantize[cuda]", "function": "mxfp8_quantize", "args": _with(_quantizer_args, backend="cuda"), "variant": ("backend",),
     "requires_release": {"backends": "cuda"}},
    {
        "name": "mxfp8_quantize[cute-dsl]",
        "function": "mxfp8_quantize",
        "args": _with(_quantizer_args, **_SGLANG_MXFP8),
        "variant": ("backend", "sf_swizzle_layout"),
        "requires_release": {"backends": "cute-dsl"},
    },
    # the backend from the release data: 0.7.0-0.7.2.post1 take "cutile" and "cake" only, 0.7.4 "cuda" too
    {
        "name": "mxfp8_grouped_quantize",
        "function": "mxfp8_grouped_quantize",
        "args": lambda t, torch: _grouped_args(t, torch, K, False),
        "release_args": _BACKEND,
    },
    {
        "name": "mxfp8_grouped_quantize[cuda]",
        "function": "mxfp8_grouped_quantize",
        "args": lambda t, torch: {**_grouped_args(t, torch, K, False), "backend": lambda: "cuda"},
        "variant": ("backend",),
        "requires_release": {"backends": "cuda"},
    },
    {
        "name": "silu_and_mul_mxfp8_experts_quantize",
        "function": "silu_and_mul_mxfp8_experts_quantize",
        "args": lambda t, torch: _grouped_args(t, torch, 2 * I_MOE, False),
    },
    {"name": "mm_fp4[cutlass]", "function": "mm_fp4", "args": lambda t, torch: _mm_fp4_args(t, torch, "cutlass")},
    {"name": "mm_fp4[trtllm]", "function": "mm_fp4", "args": lambda t, torch: _mm_fp4_args(t, torch, "trtllm")},
    {"name": "mm_fp4[auto]", "function": "mm_fp4", "args": lambda t, torch: _mm_fp4_args(t, torch, "auto")},
    {"name": "bmm_fp8", "function": "bmm_fp8", "args": _bmm_fp8_args},
    {"name": "trtllm_fp4_block_scale_moe", "function": "trtllm_fp4_block_scale_moe", "args": _trtllm_moe(False)},
    {
        "name": "trtllm_fp4_block_scale_moe[do_finalize=False]",
        "function": "trtllm_fp4_block_scale_moe",
        "dynamo_config": {"capture_dynamic_output_shape_ops": True},
        "args": _with(_trtllm_moe(False), do_finalize=False),
        "variant": ("do_finalize",),
    },
    {"name": "trtllm_fp4_block_scale_routed_moe", "function": "trtllm_fp4_block_scale_routed_moe", "args": _trtllm_moe(True)},
    {
        "name": "trtllm_fp4_block_scale_routed_moe[do_finalize=False]",
        "function": "trtllm_fp4_block_scale_routed_moe",
        "dynamo_config": {"capture_dynamic_output_shape_ops": True},
        "args": _with(_trtllm_moe(True), do_finalize=False),
        "variant": ("do_finalize",),
    },
    {"name": "trtllm_fp8_block_scale_moe", "function": "trtllm_fp8_block_scale_moe", "args": _trtllm_fp8_moe_args},
    {
        "name": "trtllm_fp8_block_scale_moe[do_finalize=False]",
        "function": "trtllm_fp8_block_scale_moe",
        "dynamo_config": {"capture_dynamic_output_shape_ops": True},
        "args": _with(_trtllm_fp8_moe_args, do_finalize=False),
        "variant": ("do_finalize",),
    },
    {"name": "trtllm_fp8_per_tensor_scale_moe", "function": "trtllm_fp8_per_tensor_scale_moe", "args": _trtllm_fp8_per_tensor_moe_args},
    {
        "name": "trtllm_fp8_per_tensor_scale_moe[do_finalize=False]",
        "function": "trtllm_fp8_per_tensor_scale_moe",
        "dynamo_config": {"capture_dynamic_output_shape_ops": True},
        "args": _with(_trtllm_fp8_per_tensor_moe_args, do_finalize=False),
        "variant": ("do_finalize",),
    },
    {"name": "cutlass_fused_moe[nvfp4]", "function": "cutlass_fused_moe", "args": _cutlass_moe_nvfp4_args},
    {"name": "rmsnorm_quant", "function": "rmsnorm_quant", "args": lambda t, torch: _norm_quant_args(t, torch, False)},
    {"name": "fused_add_rmsnorm_quant", "function": "fused_add_rmsnorm_quant", "args": lambda t, torch: _norm_quant_args(t, torch, True)},
]


def spec_for(entry):
    """The fp4patch spec id that makes ``entry`` traceable: ``spec``, else ``<function-kebab>-fullgraph``."""
    return entry.get("spec") or entry["function"].replace("_", "-") + "-fullgraph"


def catalog():
    """The entries as plain data: ``[{name, function, spec, fallback_spec, variant}]`` (no torch needed); ``variant``:
    whether the entry is a variant of the function's default call (a bool)."""
    return [{"name": e["name"], "function": e["function"], "spec": spec_for(e), "fallback_spec": e.get("fallback_spec"), "variant": bool(e.get("variant"))}
            for e in FUNCTIONS]


# --------------------------------------------------------------------------- #
# The call as planned: what fp4patch hashes, and the values taken from the release data
# --------------------------------------------------------------------------- #
class _Planned:
    """What :func:`planned_pool` makes of a tensor argument: its shape and dtype, no storage (no torch mode)."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype

    def t(self):  # col_major(): the transposed view engines pass
        return _Planned(tuple(reversed(self.shape)), self.dtype)

    def transpose(self, a, b):
        shape = list(self.shape)
        shape[a], shape[b] = shape[b], shape[a]
        return _Planned(shape, self.dtype)


def _describe_planned(value):
    if isinstance(value, _Planned):
        return "{}[{}]".format(str(value.dtype).replace("torch.", ""), ", ".join(str(d) for d in value.shape))
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, _Planned) for v in value):
        return "[{}]".format(", ".join(_describe_planned(v) for v in value))
    return repr(value)


def planned_pool(entry, release, torch):
    """What ``scan_probe.scan_one`` may pass for ``entry``, without FlashInfer and without tracing: each parameter of its
    argument pool described as its result's ``call`` is (``bfloat16[8, 7168]``), and for a parameter it takes
    from the release data the values that data lists (``release_args``, chosen from per release by
    :func:`release_choice`). A release's call is the part of the pool its wrapper takes. ``release`` as for
    :func:`release_choice`. Part of what a release was traced with (``fp4patch.checks.trace.probe_plan``)."""
    pool = entry["args"](lambda shape, dtype: _Planned(shape, dtype), torch)
    data = (release or {}).get(spec_for(entry)) or {}
    return {
        "pool": {n: _describe_planned(make()) for n, make in sorted(pool.items())},
        "release_args": {n: data.get(key) for n, key in sorted(entry.get("release_args", {}).items())},
        "requires_release": dict(sorted(entry.get("requires_release", {}).items())),
        "dynamo_config": dict(sorted(entry.get("dynamo_config", {}).items())),
    }


def release_choice(entry, parameters, release):
    """The values ``entry`` takes from the release data (``release_args``: parameter -> key of the entry's spec's
    ``RELEASE`` on the installed release): the wrapper's own default where that release data lists it, else the
    first value listed; a parameter the release data has no list for is left out (the wrapper's default).
    ``release``: ``{spec id: RELEASE dict}`` as fp4patch passes it (``--release-data``), or None."""
    data = (release or {}).get(spec_for(entry)) or {}
    chosen = {}
    for name, key in entry.get("release_args", {}).items():
        choices = data.get(key)
        if name not in parameters or not choices:
            continue
        default = parameters[name].default
        chosen[name] = default if default in choices else choices[0]
    return chosen


def release_lacks(entry, release):
    """Why the installed release cannot make ``entry``'s call by fp4patch's release data (``requires_release``:
    key -> value its spec's ``RELEASE[key]`` must list, e.g. a backend), or None (none lacking, or no data)."""
    data = (release or {}).get(spec_for(entry))
    if data is None:
        return None
    for key, value in entry.get("requires_release", {}).items():
        if value not in data.get(key, ()):
            return "{} takes no {} {!r} in this release".format(entry["function"], key.rstrip("s"), value)
    return None
