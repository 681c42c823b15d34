#!/usr/bin/env python3
"""CPU scan: which public FlashInfer FP4/FP8 quantization, GEMM and MoE functions compile under fullgraph.

Standalone, like ``trace_probe.py`` next to it (whose device stubs and graph helpers it loads by
path): run it by path in the target interpreter, ``python scan_probe.py [--json] [--only NAME ...]``;
it needs the standard library, torch (a CPU build is enough) and the flashinfer that interpreter
imports, not fp4patch.

For each entry of :data:`FUNCTIONS` it looks the function up on the installed ``flashinfer``
(``not-present`` when absent), builds one representative call from the installed signature
(DeepSeek/Qwen-MoE-like shapes, M = 8 tokens: only the parameters the installed function has are
passed, by keyword; values are fake CUDA tensors made under ``FakeTensorMode``), and compiles a
function making that call with ``torch.compile(fullgraph=True)`` and a backend that only records the
FX graph, after a fresh ``torch._dynamo.reset()``, then hands the function itself to ``torch.compile`` with the same
arguments (:data:`FORMS`: ``nested`` and ``direct``; ``--forms`` picks). Where a call's argument depends on the release
(a backend the installed release accepts), its value comes from fp4patch's release data for that release, the same
data the op is rendered from (``--release-data``, :func:`release_choice`); without it, the wrapper's default. Per
function it reports (for the first form that fails, else the first; each form's own in ``forms``):

* ``compiles``: one graph, no graph break, and the non-aten ops in it (``ns::name``);
* ``fails``: the Dynamo error's first line verbatim, its ``Explanation:`` line (and for an
  ``Observed exception``, the exception FlashInfer raised, as ``raised``), the innermost exception behind it
  (``root_cause`` and ``root_location``: what a ``TorchRuntimeError`` hides), and the
  ``flashinfer/...py:LINE`` (with that source line) where tracing stopped: the innermost frame
  inside the flashinfer package of the exception's user stack (Dynamo's ``real_stack``), else of
  its traceback;
* ``not-present``: the installed flashinfer has no such function, or (a variant) lacks a parameter
  the variant sets (``error`` names it);
* ``no-call``: the scan has no value for a required parameter of the installed signature.

Besides each function's default call, *variants* (``name[variant]``, counted as entries of their own) make
the calls engines make: each backend of ``fp4_quantize`` and ``mxfp8_quantize`` (SGLang's CuTe-DSL call on
SM100), vLLM's per-token ``nvfp4_quantize`` and SGLang's (``backend="cute-dsl"``), the TRT-LLM-Gen MoE ops with ``do_finalize=False``,
``block_scale_interleave`` into a caller's ``out=``. A variant
names the parameters it sets (``variant``), which the release must have. ``mm_fp4[...]`` and
``cutlass_fused_moe[nvfp4]`` are the function's only calls, not variants.

Which fp4patch spec makes an entry traceable is data: ``spec`` when given, else the function's
name in kebab case + ``-fullgraph`` (``mm_fp4`` -> ``mm-fp4-fullgraph``), and ``fallback_spec`` the one whose
op the call reaches where that spec is not applied (``nvfp4_quantize``'s default call: its own op from 0.6.11,
``fp4_quantize``'s before); ``verify --trace`` runs the entries of every such spec that is applied, variants aside (a scan reports them; what a spec
promises for them its own tests check).

Device stubs (CPU stand-ins): those of ``trace_probe`` (capability (10, 0), device properties),
plus ``torch.cuda.current_device`` -> 0, ``torch.cuda.device_count`` -> 1 (so FlashInfer's
compilation context targets sm100), ``torch._C._cuda_getCurrentRawStream`` -> 0 and
``Tensor.cuda`` -> the tensor itself, ``torch.cuda.device(...)`` -> a null context.

Exit status: 0 when the scan ran (it is a report, whatever compiles), 2 when flashinfer cannot
be imported.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import json
import linecache
import os
import sys
import traceback

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


def _trace_probe():
    """``trace_probe.py`` of the same directory, loaded by path (fp4patch need not be importable)."""
    name = "_fp4patch_trace_probe"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(os.path.abspath(__file__)), "trace_probe.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def install_device_stubs(torch):
    """The trace probe's stubs, plus the device queries the GEMM and MoE paths make."""
    _trace_probe()._install_device_stubs(torch)
    torch.cuda.current_device = lambda: 0
    torch.cuda.device_count = lambda: 1
    torch._C._cuda_getCurrentRawStream = lambda device=0: 0
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.cuda.device = lambda device=None: contextlib.nullcontext()


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
# Where tracing stopped
# --------------------------------------------------------------------------- #
def _frames(exc):
    """(filename, line) pairs, innermost last: the user stack Dynamo kept, then the traceback."""
    seen = set()
    chain = []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    stacks = []
    for e in chain:
        real = getattr(e, "real_stack", None)
        if real:
            stacks.append([(f.filename, f.lineno) for f in real])
    for e in chain:
        if e.__traceback__ is not None:
            stacks.append([(f.filename, f.lineno) for f in traceback.extract_tb(e.__traceback__)])
    return stacks


def stopped_at(exc, package_dir):
    """``(relative file, line, source line)`` of the innermost frame inside ``package_dir``, or Nones."""
    root = os.path.dirname(os.path.realpath(package_dir))
    prefix = os.path.realpath(package_dir) + os.sep
    for stack in _frames(exc):
        inside = [(f, n) for f, n in stack if f and os.path.realpath(f).startswith(prefix)]
        if inside:
            filename, line = inside[-1]
            source = linecache.getline(filename, line or 0).strip()
            return os.path.relpath(os.path.realpath(filename), root).replace(os.sep, "/"), line, source
    return None, None, None


# --------------------------------------------------------------------------- #
# One function
# --------------------------------------------------------------------------- #
def _find(flashinfer, function):
    for module in (flashinfer, getattr(flashinfer, "fused_moe", None)):
        fn = getattr(module, function, None) if module is not None else None
        if callable(fn):
            return fn
    return None


def _is_tensor_value(torch, v):
    return isinstance(v, torch.Tensor) or (isinstance(v, (list, tuple)) and v and all(isinstance(x, torch.Tensor) for x in v))


#: How a scanned call is compiled: "nested", a function making the call handed to ``torch.compile`` (how a model's
#: forward reaches it); "direct", the FlashInfer function itself handed to ``torch.compile`` (as FlashInfer's own
#: tests and benchmarks do; before torch 2.13 Dynamo starts in the function's own body there).
FORMS = ("nested", "direct")


def _describe_value(torch, value):
    """A call argument as text, for the result's ``call``: ``bfloat16[8, 7168]`` for a tensor, else ``repr``."""
    if isinstance(value, torch.Tensor):
        return "{}[{}]".format(str(value.dtype).replace("torch.", ""), ", ".join(str(d) for d in value.shape))
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return "[{}]".format(", ".join(_describe_value(torch, v) for v in value))
    return repr(value)


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
    """What :func:`scan_one` may pass for ``entry``, without FlashInfer and without tracing: each parameter of its
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


def _compile_once(torch, form, fn, tensors, static, settings, probe):
    """Compile the call once in ``form`` (:data:`FORMS`) with a graph-recording backend; a result fragment:
    ``passed``, ``graphs``, ``graph_breaks``, ``ops``, ``error`` (``Type: first line``), ``explanation``,
    ``raised``, ``root_cause``, ``root_location`` and the exception (``_exc``, for the caller's location)."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    out = {"passed": False, "graphs": None, "graph_breaks": None, "ops": None, "error": None, "explanation": None, "raised": None,
           "root_cause": None, "root_location": None, "_exc": None}
    try:
        with torch._dynamo.config.patch(**settings):
            if form == "direct":
                torch.compile(fn, fullgraph=True, backend=record, dynamic=False)(**tensors, **static)
            else:
                def call(tensors):
                    return fn(**tensors, **static)

                torch.compile(call, fullgraph=True, backend=record, dynamic=False)(tensors)
    except Exception as exc:  # noqa: BLE001 - Dynamo / fake failures: first line verbatim, and where it stopped
        lines = str(exc).strip().splitlines()
        explanation = [ln.strip() for ln in lines if ln.strip().startswith("Explanation:")]
        # an exception FlashInfer raised while traced ("Observed exception"): what it was
        raised = [ln.strip()[len("Developer debug context: raised exception "):] for ln in lines
                  if ln.strip().startswith("Developer debug context: raised exception ")]
        cause, where = _trace_probe().root_cause(exc)
        out.update(
            graphs=len(graphs),
            error="{}: {}".format(type(exc).__name__, lines[0] if lines else ""),
            explanation=explanation[0] if explanation else None,
            raised=raised[0][:300] if raised else None,
            root_cause=cause,
            root_location=where,
            _exc=exc,
        )
        return out
    try:
        breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    except Exception:  # noqa: BLE001 - counters are best effort
        breaks = None
    ops = []
    for gm in graphs:
        ops.extend(probe._custom_op_nodes(gm))
    compiled = len(graphs) == 1 and not breaks
    out.update(passed=compiled, graphs=len(graphs), graph_breaks=breaks, ops=ops)
    if not compiled:
        out["error"] = f"{len(graphs)} graphs, {breaks} graph breaks"
    return out


def scan_one(entry, torch, flashinfer, release=None, forms=FORMS):
    """The scan result of one :data:`FUNCTIONS` entry (see the module docstring), compiled in each of ``forms``.

    The result's top-level fields are those of the first form that fails (else of the first form), so ``status``
    is ``compiles`` only when every form compiles; ``forms`` holds each form's own fragment, ``form`` names the
    failing one, ``call`` each argument as passed (``bfloat16[8, 7168]``, ``'cutile'``) and ``release_args`` the
    values taken from the release data (:func:`release_choice`).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    probe = _trace_probe()
    result = {
        "name": entry["name"], "function": entry["function"], "spec": spec_for(entry), "status": "not-present", "passed": False,
        "graphs": None, "graph_breaks": None, "ops": None, "error": None, "explanation": None, "raised": None, "location": None, "source": None,
        "defined_at": None, "root_cause": None, "root_location": None, "form": None, "forms": {}, "call": None, "release_args": {},
    }
    fn = _find(flashinfer, entry["function"])
    if fn is None:
        return result
    try:
        defined = inspect.unwrap(fn)
        filename = inspect.getsourcefile(defined)
        line = inspect.getsourcelines(defined)[1]
        root = os.path.dirname(os.path.dirname(os.path.realpath(flashinfer.__file__)))
        result["defined_at"] = "{}:{}".format(os.path.relpath(os.path.realpath(filename), root).replace(os.sep, "/"), line)
    except (TypeError, OSError):
        pass
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError) as exc:
        result.update(status="no-call", error=f"no signature: {exc}")
        return result
    lacking = [n for n in entry.get("variant", ()) if n not in parameters]
    if lacking:  # the variant's parameters are not in this release: nothing to scan
        result["error"] = "{} has no parameter {}".format(entry["function"], ", ".join(lacking))
        return result
    lacks = release_lacks(entry, release)
    if lacks:  # the variant's value is not one this release takes (fp4patch's release data)
        result["error"] = lacks
        return result
    chosen = release_choice(entry, parameters, release)
    result["release_args"] = {k: repr(v) for k, v in chosen.items()}

    fake_mode = {}
    if entry.get("dynamo_config", {}).get("capture_dynamic_output_shape_ops"):
        # the inputs are this mode's fake tensors, so Dynamo traces in this mode: its ShapeEnv must allow
        # the data-dependent output size the option allows
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        fake_mode["shape_env"] = ShapeEnv(allow_dynamic_output_shape_ops=True)
    # an entry's Dynamo settings: what engines set for that call form (deferred finalize returns a
    # row count only the launcher knows: SGLang and TensorRT-LLM compile it with
    # capture_dynamic_output_shape_ops); settings this torch lacks are left out
    settings = {k: v for k, v in entry.get("dynamo_config", {}).items() if hasattr(torch._dynamo.config, k)}
    fragments = {}
    with FakeTensorMode(allow_non_fake_inputs=True, **fake_mode):
        def t(shape, dtype):
            return torch.empty(shape, dtype=dtype, device="cuda")

        pool = {**entry["args"](t, torch), **{name: (lambda v=v: v) for name, v in chosen.items()}}
        missing = [
            n for n, p in parameters.items()
            if n not in pool and p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        if missing:
            result.update(status="no-call", error="the scan has no value for required parameter(s) {}".format(", ".join(missing)))
            return result
        values = {n: pool[n]() for n in parameters if n in pool}
        result["call"] = {n: _describe_value(torch, v) for n, v in values.items()}
        tensors = {n: v for n, v in values.items() if _is_tensor_value(torch, v)}
        static = {n: v for n, v in values.items() if n not in tensors}
        for form in forms:
            fragments[form] = _compile_once(torch, form, fn, tensors, static, settings, probe)
    failed = [f for f in forms if not fragments[f]["passed"]]
    shown = fragments[failed[0] if failed else forms[0]]
    exc = shown.pop("_exc")
    for fragment in fragments.values():
        fragment.pop("_exc", None)
    result.update({k: v for k, v in shown.items()})
    result["forms"] = fragments
    result["form"] = failed[0] if failed else None
    result["status"] = "fails" if failed else "compiles"
    if exc is not None:
        where, line, source = stopped_at(exc, os.path.dirname(os.path.realpath(flashinfer.__file__)))
        result.update(location=f"{where}:{line}" if where else None, source=source)
    return result


def describe(r):
    """One line of text for a result: what the terminal and the logs show."""
    if r["status"] == "compiles":
        return "compiles (1 graph, ops: {})".format(", ".join(r["ops"]) or "none")
    if r["status"] == "not-present":
        return "not present ({})".format(r["error"]) if r.get("error") else "not present"
    if r["status"] == "no-call":
        return "not scanned: {}".format(r["error"])
    if r["status"] == "not-needed":  # set by fp4patch (trace.declare_not_needed): the spec declares it, with a reason
        return "not needed: {}".format(r.get("declared") or "declared by its spec")
    text = r["error"] or "fails"
    if r.get("form") == "direct":
        text = "handed to torch.compile directly: " + text
    if r.get("root_cause") and r["root_cause"] not in text:
        text += " (root cause: {}{})".format(r["root_cause"], " at " + r["root_location"] if r.get("root_location") else "")
    if r.get("raised"):
        text += " ({})".format(r["raised"] if len(r["raised"]) <= 80 else r["raised"][:77] + "...")
    if r.get("location"):
        text += " at {}".format(r["location"])
    if r.get("source"):
        text += ": {}".format(r["source"])
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description="CPU scan of the FP4 path under fullgraph")  # not __doc__: None under -OO
    ap.add_argument("--json", action="store_true", help="print a JSON object: flashinfer and torch versions, results")
    ap.add_argument("--only", nargs="*", default=None, help="scan only these entry names")
    ap.add_argument("--list", action="store_true", help="print the entries (name, function, spec) as JSON and exit; no torch")
    ap.add_argument("--path", default="", help="import flashinfer from this site-packages directory")
    ap.add_argument("--expect", default="", help="refuse a flashinfer imported from anywhere but this directory")
    ap.add_argument("--release-data", default="", help="JSON {spec id: RELEASE dict} of the installed release (fp4patch passes it)")
    ap.add_argument("--forms", default=",".join(FORMS), help="how each call is compiled: nested, direct or both (comma-separated)")
    ns = ap.parse_args(argv)
    release = json.loads(ns.release_data) if ns.release_data else None
    forms = tuple(f for f in ns.forms.split(",") if f)
    if not forms or any(f not in FORMS for f in forms):
        print("--forms takes {} (comma-separated)".format(" or ".join(FORMS)), file=sys.stderr)
        return 2
    if ns.list:
        json.dump(catalog(), sys.stdout)
        sys.stdout.write("\n")
        return 0
    if ns.path:
        sys.path.insert(0, ns.path)
    # --json: the JSON alone goes to stdout. FlashInfer's API logging (FLASHINFER_LOGLEVEL > 0, FLASHINFER_LOGDEST
    # default "stdout") binds a handler to sys.stdout at import and prints a banner: send it to stderr.
    out = sys.stdout
    if ns.json:
        sys.stdout = sys.stderr

    try:
        import torch
    except ImportError as e:  # fp4patch names the pip line that installs it (fp4patch.checks.trace.install_line)
        print("cannot import torch: {}: {}".format(type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else ""), file=sys.stderr)
        return 2

    disabling = _trace_probe().dynamo_disabled(torch)
    if disabling:
        print(f"{disabling} disables torch.compile (Dynamo) in this interpreter, so nothing can be traced; unset it for the scan", file=sys.stderr)
        return 3
    install_device_stubs(torch)
    try:
        import flashinfer
    except Exception as e:  # noqa: BLE001 - any import failure is reported
        msg = str(e).strip().splitlines()
        print("cannot import flashinfer: {}: {}".format(type(e).__name__, msg[0] if msg else ""), file=sys.stderr)
        return 2
    elsewhere = _trace_probe().imported_elsewhere(flashinfer, ns.path or ns.expect)
    if elsewhere:
        print(elsewhere, file=sys.stderr)
        return 2

    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("torch._dynamo").setLevel(logging.CRITICAL)
    entries = [e for e in FUNCTIONS if ns.only is None or e["name"] in ns.only]
    results = [scan_one(e, torch, flashinfer, release, forms) for e in entries]
    payload = {
        "flashinfer": getattr(flashinfer, "__version__", "unknown"), "flashinfer_file": getattr(flashinfer, "__file__", "?"),
        "torch": torch.__version__, "results": results,
    }
    if ns.json:
        json.dump(payload, out, indent=1)
        out.write("\n")
    else:
        print("flashinfer {} at {} | torch {}".format(payload["flashinfer"], payload["flashinfer_file"], payload["torch"]))
        width = max((len(r["name"]) for r in results), default=0)
        for r in results:
            print("  {:{}}  {}".format(r["name"], width, describe(r)))
        print("{}/{} present functions compile".format(sum(r["passed"] for r in results), sum(r["status"] != "not-present" for r in results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
