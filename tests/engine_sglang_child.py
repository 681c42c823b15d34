"""Child script of tests/test_engines.py: SGLang's own FlashInfer-calling code under ``torch.compile(fullgraph=True)``.

Run in a fresh interpreter with PYTHONPATH=<flashinfer site> (patched with fp4patch's default specs, or pristine):
``python engine_sglang_child.py '{"scan_probe": PATH, "child_support": PATH, "engine": SITE, "extra": [SITE...]}'``;
prints one line ``FP4PATCH-SGLANG-RESULT <json>``.

``engine`` is the unpacked ``sglang`` wheel (0.5.23, installed without its dependencies, ``tests/conftest.py:
engine_site``); ``extra`` are site-packages of the few dependencies installed rather than stood in for (msgspec). The
set-up is ``tests/child_support.py``'s: the scan probe's SM100 device stubs, stand-ins for the packages named in
:data:`MISSING` (only where not installed, only for SGLang's and FlashInfer's comm modules), CUDA reported while
SGLang is imported and its objects built. The objects are shaped as after SGLang's weight loading (a DeepSeek-V3-like
MoE layer: 256 experts, hidden 7168, expert intermediate 2048, top-8 of 8 groups / 4; 8 tokens), on fake CUDA
tensors; each case is one ``torch.compile(fullgraph=True)`` of a function making SGLang's own call
(``child_support.trace``). The cases (names are the keys of the result's ``cases``):

* ``moe[logits]``, ``moe[topk]``, ``moe[packed]``: ``ModelOptNvFp4FusedMoEMethod.apply(layer, dispatch_output)``
  (``sglang/srt/layers/quantization/modelopt_quant.py``; what ``FusedMoE.run_moe_core`` calls) with per-token NVFP4
  activations (``use_per_token_activation``, what ``SGLANG_FLASHINFER_NVFP4_PER_TOKEN_ACTIVATION=1`` sets), which
  runs the TRT-LLM FP4 MoE runner ``fused_experts_none_to_flashinfer_trtllm_fp4``
  (``sglang/srt/layers/moe/moe_runner/flashinfer_trtllm.py``) in its three routing forms: routing from the router
  logits (``BypassedTopKOutput``, backend ``flashinfer_trtllm``: ``trtllm_fp4_block_scale_moe``), precomputed top-k
  ids and weights (``StandardTopKOutput``: ``trtllm_fp4_block_scale_routed_moe`` with an ``(ids, weights)`` tuple)
  and packed top-k (``PackedTopKOutput``, backend ``flashinfer_trtllm_routed``: the routed MoE with ``score << 16 |
  id`` int32 ids); the activations are quantized by ``nvfp4_quantize(..., per_token_activation=True,
  backend="cute-dsl")`` first;
* ``norm[rmsnorm_quant]``, ``norm[fused_add_rmsnorm_quant]``: ``RMSNorm`` (``sglang/srt/layers/layernorm.py``)
  fused with the static per-tensor FP8 input quantization of the projection it feeds (``fuse_input_quant`` of an
  ``Fp8LinearMethod`` linear with a (1,) ``input_scale``), called as a decoder layer does (``norm(x)``,
  ``norm(x, residual)``); ``forward_cuda`` calls ``flashinfer.norm.rmsnorm_quant`` / ``fused_add_rmsnorm_quant``;
* ``own[...]``: SGLang's own custom ops around FlashInfer (the NVFP4 linear's ``fp4_quantize`` and ``fp4_gemm``, the
  piecewise-CUDA-graph MoE ops), each expected to stay one opaque node.

Besides ``cases``: ``torch`` (version), ``stand_ins`` (the entries of :data:`MISSING` served),
``unneeded_stand_ins`` (entries neither served nor installed: the list should not carry them), ``cute_dsl`` (whether
FlashInfer finds CuTe-DSL here).
"""

from __future__ import annotations

import json
import os
import sys

import torch

MARK = "FP4PATCH-SGLANG-RESULT "
P = json.loads(sys.argv[1])
for where in reversed([P["engine"], *P.get("extra", [])]):
    sys.path.insert(1, where)  # after PYTHONPATH's FlashInfer site (sys.path[0] is this script's folder)

M = 8  # tokens
K = 7168  # hidden size
E = 256  # experts (all local: EP 1)
I_MOE = 2048  # expert intermediate size per partition (TP 1)
TOP_K = 8
SGLANG_IMPORTERS = ("sglang",)

#: Packages SGLang 0.5.23 imports at module level on the way to the MoE runner, the norm and the NVFP4 linear that a
#: CPU test interpreter lacks (none is called on the traced paths: ``stand_ins`` of each case must stay empty).
MISSING = {
    "sgl_kernel": ("SGLang's CUDA kernel library (sglang-kernel): CUDA binaries, imported by the CUDA paths", SGLANG_IMPORTERS),
    "triton": ("GPU kernel compiler: SGLang defines @triton.jit kernels at import (the CPU torch build has none)", SGLANG_IMPORTERS),
    "cuda": ("cuda-python: FlashInfer's comm module (reached from SGLang's token dispatcher) and its cuda_utils import it",
             (*SGLANG_IMPORTERS, "flashinfer.comm", "flashinfer.cuda_utils", "flashinfer.utils")),
    "transformers": ("model configs: sglang.srt.configs subclasses PretrainedConfig at import", SGLANG_IMPORTERS),
    "huggingface_hub": ("model download, imported with the configs", SGLANG_IMPORTERS),
    "safetensors": ("checkpoint loading, imported with the configs", SGLANG_IMPORTERS),
    "sentencepiece": ("tokenizers, imported with the configs", SGLANG_IMPORTERS),
    "gguf": ("GGUF checkpoints (the quantization package imports every method)", SGLANG_IMPORTERS),
    "compressed_tensors": ("compressed-tensors checkpoints (the quantization package imports every method)", SGLANG_IMPORTERS),
    "einops": ("tensor rearrangement in model code imported with the layers", SGLANG_IMPORTERS),
    "regex": ("text processing of the server's parsers (served as the standard library's re, whose API it extends)", SGLANG_IMPORTERS),
    "orjson": ("server JSON, imported by sglang.srt.utils", SGLANG_IMPORTERS),
    "pybase64": ("server request decoding, imported by sglang.srt.utils", SGLANG_IMPORTERS),
    "psutil": ("process management, imported by sglang.srt.utils", SGLANG_IMPORTERS),
    "zmq": ("pyzmq: the server's inter-process messaging", SGLANG_IMPORTERS),
    "starlette": ("the HTTP server", SGLANG_IMPORTERS),
    "PIL": ("Pillow: multimodal inputs", SGLANG_IMPORTERS),
    "torchvision": ("multimodal processors", SGLANG_IMPORTERS),
    "IPython": ("notebook display helpers", SGLANG_IMPORTERS),
    "partial_json_parser": ("tool-call parsing, imported with the scheduler", SGLANG_IMPORTERS),
    "openai": ("the OpenAI-compatible API's protocol types", SGLANG_IMPORTERS),
    "dill": ("pickling of custom logit processors: sglang.srt.configs.deepseek_ocr pickles one at import", SGLANG_IMPORTERS),
}
#: What a stand-in module must hold for a module body to run: deepseek_ocr's import-time
#: ``json.dumps({"callable": dill.dumps(cls).hex()})`` needs bytes.
VALUES = {"dill.dumps": lambda *args, **kwargs: b""}
#: Served as another, real module: the parsers build patterns with ``re.escape`` at import.
ALIASES = {"regex": "re"}

support_module = P["child_support"]
import importlib.util

_spec = importlib.util.spec_from_file_location("_engine_child_support", support_module)
support = importlib.util.module_from_spec(_spec)
sys.modules["_engine_child_support"] = support
_spec.loader.exec_module(support)

probe = support.prepare_torch(torch, P["scan_probe"])
import flashinfer

stand_ins = support.MissingPackages(MISSING, VALUES, ALIASES).install()
engine_dir = os.path.join(P["engine"], "sglang")
# sglang/__init__.py patches transformers (stood in for here) and loads the front-end language API and its
# clients; the layers under test do not go through it. Its submodules import as usual.
support.bare_package("sglang", engine_dir)

from torch._subclasses.fake_tensor import FakeTensorMode

fake_mode = FakeTensorMode(allow_non_fake_inputs=True)


t = support.tensor_maker(torch, "cuda")  # t(shape, dtype): a fake CUDA tensor of fake_mode


def param(value):
    return torch.nn.Parameter(value, requires_grad=False)


with support.cuda_reported(torch):
    from sglang.kernels.jit.utils import is_arch_support_pdl
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.layers.moe.fused_moe_triton.layer import (
        fused_moe_bypassed_piecewise_cuda_graph_impl,
        moe_forward_piecewise_cuda_graph_impl,
    )
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    from sglang.srt.layers.moe.token_dispatcher.standard import StandardDispatchOutput
    from sglang.srt.layers.moe.topk import BypassedTopKOutput, PackedTopKOutput, StandardTopKOutput, TopKConfig
    from sglang.srt.layers.moe.utils import MoeRunnerBackend, RoutingMethodType
    from sglang.srt.layers.quantization.fp4_utils import fp4_quantize as sglang_fp4_quantize
    from sglang.srt.layers.quantization.fp8 import Fp8Config, Fp8LinearMethod
    from sglang.srt.layers.quantization.modelopt_quant import ModelOptFp4Config, ModelOptNvFp4FusedMoEMethod, fp4_gemm
    from sglang.srt.runtime_context import get_flags, get_parallel

    class _SingleRankGroup:
        """The tensor-parallel group of a one-GPU server (TP 1): what ``use_symmetric_memory`` reads of it."""

        world_size = 1
        rank_in_group = 0

    # A server stamps its groups when it builds them (get_parallel().tp_group); one GPU, TP 1.
    get_parallel()._stamp["tp_group"] = _SingleRankGroup()
    # Filled by the server's eager warm-up forward before any compile (TcPiecewiseCudaGraphBackend._run_compile_pass
    # runs _run_dummy_forward first): a cache_once probe of the device.
    is_arch_support_pdl()

    with fake_mode:
        # ---- the MoE layer after ModelOptNvFp4FusedMoEMethod.process_weights_after_loading (per-token activations,
        # TRT-LLM weight layout: shuffled FP4 weights, E4M3 block scales, per-expert alphas, 0-d input scales) ----
        layer = torch.nn.Module()
        layer.w13_weight = param(t((E, 2 * I_MOE, K // 2), torch.uint8))
        layer.w13_weight_scale = param(t((E, 2 * I_MOE, K // 16), torch.float8_e4m3fn))
        layer.w2_weight = param(t((E, K, I_MOE // 2), torch.uint8))
        layer.w2_weight_scale = param(t((E, K, I_MOE // 16), torch.float8_e4m3fn))
        layer.g1_alphas = param(t((E,), torch.float32))
        layer.g1_alphas_up = param(t((E,), torch.float32))
        layer.g2_alphas = param(t((E,), torch.float32))
        layer.w13_input_scale_quant = param(t((), torch.float32))
        layer.w2_input_scale_quant = param(t((), torch.float32))
        layer.g1_scale_c = param(t((E,), torch.float32))
        layer.num_experts, layer.num_local_experts, layer.moe_ep_rank = E, E, 0
        layer.intermediate_size_per_partition = I_MOE
        layer.trtllm_padded_hidden_size = None  # gated: hidden alignment 1, no padding
        layer._mega_moe_nvfp4 = False
        layer.routing_method_type = RoutingMethodType.DeepSeekV3
        runner_config = MoeRunnerConfig(
            num_experts=E, num_local_experts=E, hidden_size=K, intermediate_size_per_partition=I_MOE, top_k=TOP_K,
            params_dtype=torch.bfloat16, routing_method_type=RoutingMethodType.DeepSeekV3, activation="silu",
            is_gated=True, routed_scaling_factor=2.5,
        )
        layer.moe_runner_config = runner_config
        quant_config = ModelOptFp4Config(is_checkpoint_nvfp4_serialized=True, use_per_token_activation=True)
        methods = {}
        for backend in ("flashinfer_trtllm", "flashinfer_trtllm_routed"):
            get_flags().moe.runner_backend = MoeRunnerBackend(backend)  # --moe-runner-backend, as published
            method = ModelOptNvFp4FusedMoEMethod(quant_config)  # checks get_platform().is_blackwell: the stubs' SM100
            method.create_moe_runner(layer, runner_config)
            methods[backend] = method
        correction_bias = t((E,), torch.float32)  # DeepSeek-V3's e_score_correction_bias (fp32)
        topk_config = TopKConfig(
            top_k=TOP_K, use_grouped_topk=True, topk_group=4, num_expert_group=8, renormalize=True,
            correction_bias=correction_bias, routed_scaling_factor=2.5,
        )
        hidden_states = t((M, K), torch.bfloat16)
        router_logits = t((M, E), torch.float32)
        topk_outputs = {
            "logits": ("flashinfer_trtllm", BypassedTopKOutput(hidden_states=hidden_states, raw_router_logits=router_logits,
                                                               topk_config=topk_config)),
            "topk": ("flashinfer_trtllm", StandardTopKOutput(topk_weights=t((M, TOP_K), torch.float32),
                                                             topk_ids=t((M, TOP_K), torch.int32), router_logits=router_logits)),
            "packed": ("flashinfer_trtllm_routed", PackedTopKOutput(packed_topk_ids=t((M, TOP_K), torch.int32),
                                                                    router_logits=router_logits)),
        }

        # ---- RMSNorm feeding an FP8 linear with a static per-tensor input scale ----
        linear = torch.nn.Module()
        linear.quant_method = Fp8LinearMethod(Fp8Config(is_checkpoint_fp8_serialized=True, activation_scheme="static"))
        linear.input_scale = param(t((1,), torch.float32))
        norm = RMSNorm(K)
        norm.weight = param(t((K,), torch.bfloat16))
        norm.fuse_input_quant(linear)
        norm._forward_method = norm._resolve_forward_method()  # what its first (eager) call resolves
        residual = t((M, K), torch.bfloat16)

        # ---- the NVFP4 linear's operands (ModelOptFp4LinearMethod.apply): weight [N, K/2], swizzled scales ----
        N = 2048
        input_scale_inv = t((), torch.float32)
        weight_fp4 = t((N, K // 2), torch.uint8)
        weight_sf = t((N, K // 16), torch.float8_e4m3fn)
        alpha = t((), torch.float32)

stand_ins.withdraw()
stand_ins.arm()


def moe_call(backend):
    method = methods[backend]

    def call(hidden_states, topk_output):
        dispatch_output = StandardDispatchOutput(hidden_states=hidden_states, hidden_states_scale=None, topk_output=topk_output)
        return method.apply(layer, dispatch_output).hidden_states

    return call


def own_fp4_linear(x):
    x_fp4, x_sf = sglang_fp4_quantize(x, input_scale_inv)
    return fp4_gemm(x_fp4, weight_fp4, x_sf, weight_sf, alpha, torch.bfloat16, N)


CASES = {
    **{f"moe[{form}]": (moe_call(backend), (hidden_states, topk)) for form, (backend, topk) in topk_outputs.items()},
    "norm[rmsnorm_quant]": (lambda x: norm(x), (hidden_states,)),
    "norm[fused_add_rmsnorm_quant]": (lambda x, r: norm(x, r), (hidden_states, residual)),
    "own[fp4_linear]": (own_fp4_linear, (hidden_states,)),
    "own[moe_piecewise]": (lambda x, w, i, logits: moe_forward_piecewise_cuda_graph_impl(x, w, i, logits, 0),
                           (hidden_states, topk_outputs["topk"][1].topk_weights, topk_outputs["topk"][1].topk_ids, router_logits)),
    "own[moe_bypassed_piecewise]": (lambda x, logits, bias: fused_moe_bypassed_piecewise_cuda_graph_impl(x, logits, TOP_K, 4, 8, bias, True, 0, True),
                                    (hidden_states, router_logits, correction_bias)),
}

flashinfer_dir = os.path.dirname(os.path.realpath(flashinfer.__file__))
cases = {}
for name, (fn, args) in CASES.items():
    if P.get("only") and name not in P["only"]:
        continue
    cases[name] = support.trace(fn, args, torch=torch, probe=probe, fake_mode=fake_mode, flashinfer_dir=flashinfer_dir,
                                engine_dir=engine_dir, stand_ins=stand_ins)

try:
    from flashinfer.cute_dsl import is_cute_dsl_available

    cute_dsl = bool(is_cute_dsl_available())
except ImportError:
    cute_dsl = False
support.emit(MARK, {"torch": torch.__version__, "cases": cases, "stand_ins": stand_ins.missing(), "unneeded_stand_ins": stand_ins.unneeded(), "cute_dsl": cute_dsl})
