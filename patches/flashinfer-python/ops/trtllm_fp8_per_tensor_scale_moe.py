"""fp4patch op source for flashinfer.trtllm_fp8_per_tensor_scale_moe (TRT-LLM-Gen FP8 per-tensor-scale MoE, routing from logits).

Schema: every parameter of the installed wrapper (FlashInfer 0.6.0 - 0.7.4, ``flashinfer/fused_moe/core.py``;
``activation_type`` from 0.6.3, ``do_finalize`` 0.6.5, ``norm_topk_prob`` / ``routing_replay_out`` 0.6.8,
``output`` 0.6.14, ``gemm1_clamp_limit`` 0.7.2.post1, ``workspace_buffer`` 0.7.4). ``tune_max_num_tokens``
(a tuning-only max-token hint) is in the schema, since entry/op/fake share one signature, but ``entry``
never passes the caller's value (OP gets the default): engines pass a batch-size bound, and an int argument of the op would make Dynamo
specialise on it, so each new batch size would recompile; under compile the eager body tunes with the
release default, 8192. Enums cross as int: ``routing_method_type`` (``RoutingMethodType``),
``activation_type`` (``ActivationType``; the eager body gives 0.6.3's wrapper the enum back, whose inner op
reads ``activation_type.value``, a call with the wrapper's own int default failing there). MUTATES_ARGS comes from ``RELEASE["mutates"]`` (``output`` from
0.6.14, ``routing_replay_out`` from 0.6.8, ``workspace_buffer`` 0.7.4).

Outputs: the wrapper returns one tensor when ``do_finalize`` (``result[0]``; every release before 0.6.5,
which has no ``do_finalize``), else the list ``[gemm2_output, expert_weights, expanded_idx_to_permuted_idx]``.
The caller's ``output=`` cannot be returned by a custom op, so it is declared mutated, the op leaves it out
and ``entry`` hands it back; the op returns four tensors, padded with empty ones (``_four``, as the FP4 MoE
ops), and ``entry`` rebuilds the wrapper's tensor or list from them.

Fake (``_trtllm_fp8_moe_outputs``), read from ``trtllm_fp8_per_tensor_scale_moe_op`` and
``csrc/trtllm_fused_moe_kernel_launcher.cu`` (``Fp8PerTensorLauncher``) of 0.6.0 and 0.7.4: finalized,
``[num_tokens, hidden_states.shape[-1]]`` bf16 (the launcher's own before 0.6.5, the wrapper's buffer or the
caller's after); unfinalized, ``gemm2_output`` ``[R, hidden]`` bf16 with R a new unbacked size (needs
``capture_dynamic_output_shape_ops``), the launcher's ``expert_weights`` ``[num_tokens, top_k]`` bf16 and
``expanded_idx_to_permuted_idx`` ``[num_tokens * top_k]`` int32.

Rejected like the wrapper (same class and message, ``_check_trtllm_fp8_moe``): an ``output`` of another shape
or dtype than ``[num_tokens, hidden]`` bf16 (``check_shape_dtype_device``, from 0.6.14; also unfinalized on
0.6.14). The wrapper's own validators (``_validate_routing_replay_out``, ``_validate_fp8_per_tensor_step_limit``)
and the kernel's TVM_FFI_ICHECKs are not mirrored: they run in the eager body, where they raise as before.
"""
from typing import Optional, Tuple

import torch

from ._moe_helpers import _as_int, _check_trtllm_fp8_moe, _four, _trtllm_fp8_moe_outputs

# Release data (defaults: FlashInfer 0.7.4; each spec target overrides what differs).
RELEASE = {
    # the tensor parameters the real call writes into (those this release has)
    "mutates": ["output", "routing_replay_out", "workspace_buffer"],
    # how the wrapper checks output= ("none" before 0.6.14, "exact": check_shape_dtype_device, from 0.6.14)
    "output_check": "exact",
    # an output= tensor is checked also when do_finalize=False (0.6.14)
    "output_checked_unfinalized": False,
    # the inner op of 0.6.3 reads activation_type.value: the eager body hands the wrapper an ActivationType
    "activation_enum": False,
    # do_finalize=False with 0 tokens refused (the FP4 ops' release data; not claimed for FP8: the CPU
    # cannot see the launcher's unfinalized outputs)
    "unfinalized_needs_tokens": False,
}
MUTATES_ARGS = tuple(RELEASE["mutates"])


def entry(**OP_PARAMS):
    """Called while compiling with every wrapper parameter by keyword; enums to int, then OP.

    ``tune_max_num_tokens`` stops here: OP gets its default, never the caller's value, so Dynamo never specialises on it.
    """
    fresh = OP(
        **OP_PARAMS,
        routing_method_type=_as_int(routing_method_type),
        activation_type=_as_int(activation_type),
        tune_max_num_tokens=OMIT,  # never the caller's value: Dynamo would specialise on it (see the module docstring)
    )
    if do_finalize:  # the wrapper's result[0]: the op's first output, or the caller's own tensor
        return output if output is not None else fresh[0]
    return list(fresh[:3])


def op(
    routing_logits: torch.Tensor,
    routing_bias: Optional[torch.Tensor],
    hidden_states: torch.Tensor,
    gemm1_weights: torch.Tensor,
    output1_scales_scalar: torch.Tensor,
    output1_scales_gate_scalar: torch.Tensor,
    gemm2_weights: torch.Tensor,
    output2_scales_scalar: torch.Tensor,
    num_experts: int,
    top_k: int,
    n_group: Optional[int],
    topk_group: Optional[int],
    intermediate_size: int,
    local_expert_offset: int,
    local_num_experts: int,
    routed_scaling_factor: Optional[float],
    use_routing_scales_on_input: bool,
    routing_method_type: int = 0,
    do_finalize: bool = True,
    enable_pdl: Optional[bool] = None,
    tune_max_num_tokens: int = 8192,
    activation_type: int = 3,
    norm_topk_prob: bool = True,
    routing_replay_out: Optional[torch.Tensor] = None,
    output: Optional[torch.Tensor] = None,
    gemm1_clamp_limit: Optional[torch.Tensor] = None,
    workspace_buffer: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eager body: the wrapper by keyword (``activation_type`` back to its enum where the release reads
    ``.value``); the caller's ``output`` left out, four tensors."""
    result = WRAPPER(
        **OP_PARAMS,
        activation_type=ActivationType(activation_type) if RELEASE["activation_enum"] else activation_type,
        tune_max_num_tokens=OMIT,  # never the caller's value: Dynamo would specialise on it (see the module docstring)
    )
    if do_finalize:  # the wrapper's one tensor: the caller's output (left out) or its own
        return _four([] if output is not None else [result], hidden_states)
    return _four(result, hidden_states)


def fake(**OP_PARAMS):
    """The wrapper's outputs without the caller's ``output`` (see the module docstring)."""
    num_tokens, hidden, width = _check_trtllm_fp8_moe(hidden_states, output, None, do_finalize, RELEASE)
    return _trtllm_fp8_moe_outputs(
        hidden_states, num_tokens, hidden, width, do_finalize, output, top_k, "trtllm_fp8_per_tensor_scale_moe"
    )
