"""Argument builders and CPU stand-ins shared by the MoE case grids: not a grid (no ``FUNCTION``).

Used by ``trtllm_fp4_block_scale_moe.py``, ``trtllm_fp4_block_scale_routed_moe.py`` and
``cutlass_fused_moe.py`` beside this file, which load it by path (the probe loads grids by path, so there
is no package to import from); standard library only at module level, like a grid.

The calls are NVFP4 MoE layers as vLLM and SGLang pass them (FlashInfer 0.6.0 - 0.7.4,
``flashinfer/fused_moe/core.py``): E = 8 experts, hidden 256, intermediate 256, top-k 2, M tokens.
"""

import contextlib

#: the MoE layer of every case: experts, hidden size, intermediate size, top-k
E, H, I, TOP_K = 8, 256, 256, 2


def t(*shape, dtype="bfloat16"):
    """A fake CUDA tensor of ``shape``."""
    return {"t": list(shape), "dtype": dtype}


def trtllm_kwargs(m, act="nvfp4", do_finalize=True, output=None, **extra):
    """Keyword arguments of a TRT-LLM-Gen FP4 MoE call (without ``routing_logits`` / ``topk_ids``).

    ``act``: the activations, ``"nvfp4"`` (uint8-packed ``[M, H/2]`` with e4m3 scales ``[M, H/16]``),
    ``"bf16"`` (``[M, H]``, no scale) or ``"mxfp8"`` (e4m3 ``[M, H]`` with uint8 scales ``[M, H/32]``);
    ``output``: None, ``"given"`` (``[M, H]`` bf16), ``"narrow"`` (``[M, H/2]``), ``"bad_rows"`` (``[M+1, H]``),
    ``"bad_dtype"`` (fp16). ``extra``: more keyword arguments as they are.
    """
    if act == "nvfp4":
        hs, hs_scale = t(m, H // 2, dtype="uint8"), t(m, H // 16, dtype="float8_e4m3fn")
    elif act == "bf16":
        hs, hs_scale = t(m, H), None
    else:
        hs, hs_scale = t(m, H, dtype="float8_e4m3fn"), t(m, H // 32, dtype="uint8")
    wsv = 16 if act == "nvfp4" else 32
    kw = {
        "routing_bias": None,
        "hidden_states": hs,
        "hidden_states_scale": hs_scale,
        "gemm1_weights": t(E, 2 * I, H // 2, dtype="uint8"),
        "gemm1_weights_scale": t(E, 2 * I, H // wsv, dtype="float8_e4m3fn"),
        "gemm1_bias": None,
        "gemm1_alpha": None,
        "gemm1_beta": None,
        "gemm1_clamp_limit": None,
        "gemm2_weights": t(E, H, I // 2, dtype="uint8"),
        "gemm2_weights_scale": t(E, H, I // wsv, dtype="float8_e4m3fn"),
        "gemm2_bias": None,
        "output1_scale_scalar": t(E, dtype="float32"),
        "output1_scale_gate_scalar": t(E, dtype="float32"),
        "output2_scale_scalar": t(E, dtype="float32"),
        "num_experts": E,
        "top_k": TOP_K,
        "n_group": None,
        "topk_group": None,
        "intermediate_size": I,
        "local_expert_offset": 0,
        "local_num_experts": E,
        "routed_scaling_factor": None,
        "routing_method_type": {"enum": "RoutingMethodType.Renormalize"},
        "do_finalize": do_finalize,
        **extra,
    }
    outputs = {"given": t(m, H), "narrow": t(m, H // 2), "bad_rows": t(m + 1, H), "bad_dtype": t(m, H, dtype="float16")}
    if output is not None:
        kw["output"] = outputs[output]
    return kw


def cutlass_kwargs(m, act="nvfp4", out_dtype="bfloat16", output=None, weights="uint8", **extra):
    """Keyword arguments of a ``cutlass_fused_moe`` NVFP4 call: ``act`` ``"nvfp4"`` (uint8-packed input with
    its 1-D scales) or ``"bf16"``; ``weights`` ``"uint8"`` (packed FP4) or ``"int64"`` (eight FP4 values per
    element, as 0.7.x engines pass them); ``output`` None, ``"given"``, ``"bad_rows"``, ``"bad_dtype"``."""
    per = 8 if weights == "int64" else 1
    if act == "nvfp4":
        x, x_sf = t(m, H // 2, dtype="uint8"), t(m * H // 16, dtype="uint8")
    else:
        x, x_sf = t(m, H), None
    kw = {
        "input": x,
        "token_selected_experts": t(m, TOP_K, dtype="int32"),
        "token_final_scales": t(m, TOP_K, dtype="float32"),
        "fc1_expert_weights": t(E, 2 * I, H // 2 // per, dtype=weights),
        "fc2_expert_weights": t(E, H, I // 2 // per, dtype=weights),
        "output_dtype": {"dtype": out_dtype},
        "quant_scales": [t(1, dtype="float32"), t(E, 2 * I, H // 16 // 4, dtype="int32"), t(E, dtype="float32"),
                         t(1, dtype="float32"), t(E, H, I // 16 // 4, dtype="int32"), t(E, dtype="float32")],
        "input_sf": x_sf,
        "activation_type": {"enum": "ActivationType.Swiglu"},
        **extra,
    }
    outputs = {"given": t(m, H, dtype=out_dtype), "bad_rows": t(m + 1, H, dtype=out_dtype), "bad_dtype": t(m, H, dtype="float32")}
    if output is not None:
        kw["output"] = outputs[output]
    return kw


class _Spec:
    """Stands for a ``JitSpec`` that ``gen_*_module`` would render (templates, cubin downloads): loads ``recorder``."""

    def __init__(self, recorder):
        self.recorder = recorder

    def build_and_load(self, *args, **kwargs):
        return self.recorder

    def get_library_path(self):
        return "/nonexistent"

    def get_library_paths(self):
        return []


class _Device:
    """Stands for ``torch.cuda.device(...)``, which needs a CUDA build to enter (0.7.x ``cutlass_fused_moe``)."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@contextlib.contextmanager
def moe_stubs(oracle, recorder, core, returns=None):
    """The stand-ins the MoE wrappers of ``core`` (``flashinfer.fused_moe.core``) need on CPU.

    Every ``gen_*_module`` of ``core`` returns a :class:`_Spec` that loads ``recorder`` (the generators
    render sources and fetch cubins before ``build_and_load``), ``setup_cubin_loader`` does nothing, the
    autotuner picks the first runner with tactic -1 (``AutoTuner.choose_one``), ``torch.cuda.device`` is a
    no-op context, ``torch.from_dlpack`` hands a tensor back as it is (the kernels' results would be DLPack
    capsules; a ``None`` from the recorder still fails there, naming ``NoneType``: not visible on CPU), and
    ``returns`` is added to ``recorder.returns`` for the duration (kernels that return a runner object).
    """
    import torch

    targets = {f"{core.__name__}:{name}": (lambda *a, **k: _Spec(recorder)) for name in vars(core) if name.startswith("gen_") and name.endswith("_module")}
    if hasattr(core, "setup_cubin_loader"):
        targets[f"{core.__name__}:setup_cubin_loader"] = lambda *a, **k: None
    targets[f"{core.__name__}:AutoTuner.choose_one"] = lambda self, name, runners, *a, **k: (runners[0], -1)
    from_dlpack = torch.from_dlpack
    targets["torch:from_dlpack"] = lambda x: x if isinstance(x, torch.Tensor) else from_dlpack(x)
    targets["torch.cuda:device"] = _Device
    saved = {name: recorder.returns.get(name) for name in returns or {}}
    recorder.returns.update(returns or {})
    try:
        with oracle.replaced(targets):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                recorder.returns.pop(name, None)
            else:
                recorder.returns[name] = value



def trtllm_fp8_kwargs(params, m, block, act="fp8", logits="bfloat16", do_finalize=True, output=None, **extra):
    """Keyword arguments of a TRT-LLM-Gen FP8 MoE call, kept to ``params`` (the release's wrapper parameters).

    ``block``: ``trtllm_fp8_block_scale_moe`` (block scales: activations with ``hidden_states_scale``
    ``[H/128, M]`` float32 as SGLang passes it, ``a_sf.t().contiguous()``; weights with ``[E, N/128, K/128]``
    float32 scales; ``act="mxfp8"``: uint8 scales ``[M, H/32]`` and ``fp8_quantization_type=MxFp8``; a flat ``[M * H/32]`` one
    with no tokens is refused by 0.7.x's tuning config, ``fused_moe/shared/tuning.py``, which the fake does
    not mirror), else
    ``trtllm_fp8_per_tensor_scale_moe`` (one float32 scale per local expert for each GEMM output).
    ``act``: ``"fp8"`` (e4m3 ``[M, H]``), ``"bf16"`` (``[M, H]``) or ``"mxfp8"``; ``logits``: the routing
    logits' dtype (float32 with DeepSeekV3 routing, bf16 with Renormalize, as the engines pair them);
    ``output`` as :func:`trtllm_kwargs`; ``extra``: more keyword arguments as they are.
    """
    hs = t(m, H, dtype="bfloat16" if act == "bf16" else "float8_e4m3fn")
    deepseek = logits == "float32"
    kw = {
        "routing_logits": t(m, E, dtype=logits),
        "routing_bias": t(E, dtype="bfloat16") if deepseek else None,
        "hidden_states": hs,
        "gemm1_weights": t(E, 2 * I, H, dtype="float8_e4m3fn"),
        "gemm2_weights": t(E, H, I, dtype="float8_e4m3fn"),
        "num_experts": E,
        "top_k": TOP_K,
        "n_group": 2 if deepseek else None,
        "topk_group": 1 if deepseek else None,
        "intermediate_size": I,
        "local_expert_offset": 0,
        "local_num_experts": E,
        "routed_scaling_factor": 2.5 if deepseek else None,
        "routing_method_type": {"enum": "RoutingMethodType.DeepSeekV3" if deepseek else "RoutingMethodType.Renormalize"},
        "do_finalize": do_finalize,
    }
    if block:
        kw["hidden_states_scale"] = t(m, H // 32, dtype="uint8") if act == "mxfp8" else t(H // 128, m, dtype="float32")
        kw["gemm1_weights_scale"] = t(E, 2 * I // 128, H // 128, dtype="float32")
        kw["gemm2_weights_scale"] = t(E, H // 128, I // 128, dtype="float32")
        if act == "mxfp8":
            kw["fp8_quantization_type"] = {"enum": "Fp8QuantizationType.MxFp8"}
            kw["gemm1_weights_scale"] = t(E, 2 * I, H // 32, dtype="uint8")
            kw["gemm2_weights_scale"] = t(E, H, I // 32, dtype="uint8")
    else:
        kw["output1_scales_scalar"] = t(E, dtype="float32")
        kw["output1_scales_gate_scalar"] = t(E, dtype="float32")
        kw["output2_scales_scalar"] = t(E, dtype="float32")
        kw["use_routing_scales_on_input"] = False
    # an ActivationType (an IntEnum): 0.6.3's per-tensor op reads activation_type.value, which its own int default lacks
    kw["activation_type"] = {"enum": "ActivationType.Swiglu"}
    outputs = {"given": t(m, H), "narrow": t(m, H // 2), "bad_rows": t(m + 1, H), "bad_dtype": t(m, H, dtype="float16")}
    if output is not None:
        kw["output"] = outputs[output]
    kw.update(extra)
    return {k: v for k, v in kw.items() if k in params}
