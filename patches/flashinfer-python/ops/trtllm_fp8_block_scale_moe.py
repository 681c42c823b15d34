"""fp4patch op source for flashinfer.trtllm_fp8_block_scale_moe (TRT-LLM-Gen FP8 block-scale MoE, DeepSeek FP8 or MXFP8, routing from logits).

Schema: every parameter of the installed wrapper (FlashInfer 0.6.0 - 0.7.4, ``flashinfer/fused_moe/core.py``;
``fp8_quantization_type`` from 0.6.4, ``do_finalize`` 0.6.5, ``activation_type`` 0.6.7, ``norm_topk_prob`` /
``routing_replay_out`` 0.6.8, ``gemm1_alpha`` / ``gemm1_beta`` / ``gemm1_clamp_limit`` 0.6.13, ``output``
0.6.14, ``num_fused_shared_experts`` 0.6.15, ``gemm1_bias`` / ``gemm2_bias`` / ``valid_hidden_size`` /
``valid_intermediate_size`` 0.7.0, ``workspace_buffer`` 0.7.4). ``tune_max_num_tokens`` (a tuning-only
max-token hint) is in the schema, since entry/op/fake share one signature, but ``entry`` never passes the caller's value (OP gets the default):
engines pass ``next_power_of_2(num_tokens)`` or a batch-size bound, and an int argument of the op would make
Dynamo specialise on it, so each new batch size would recompile; under compile the eager body tunes with
the release default, 8192. Enums cross as int: ``routing_method_type`` (``RoutingMethodType``),
``activation_type`` (``ActivationType``), ``fp8_quantization_type`` (``Fp8QuantizationType``, an IntEnum,
turned back into one for the wrapper). MUTATES_ARGS comes from ``RELEASE["mutates"]`` (``output`` from
0.6.14, ``routing_replay_out`` from 0.6.8, ``workspace_buffer`` 0.7.4).

Outputs: the wrapper returns one tensor when ``do_finalize`` (``result[0]``; every release before 0.6.5,
which has no ``do_finalize``), else the list ``[gemm2_output, expert_weights, expanded_idx_to_permuted_idx]``.
The caller's ``output=`` (filled and handed back when ``do_finalize``) cannot be returned by a custom op, so
it is declared mutated, the op leaves it out and ``entry`` hands it back. The op returns four tensors, padded
with empty ones (``_four``, as the FP4 MoE ops: a mutable op returning ``List[Tensor]`` cannot be
auto-functionalized); ``entry`` rebuilds the wrapper's tensor or list from them.

Fake (``_trtllm_fp8_moe_outputs``), read from ``trtllm_fp8_block_scale_moe_op`` and
``csrc/trtllm_fused_moe_kernel_launcher.cu`` (``Fp8BlockScaleLauncher``) of 0.6.0 and 0.7.4:

* finalized: ``[num_tokens, W]`` bf16, W = ``valid_hidden_size`` (0.7.x) or ``hidden_states.shape[-1]``
  (fp8 or bf16 activations, never packed). Before 0.6.5 the C++ launcher allocates it (the Python buffer
  the wrapper makes is not the one returned); from 0.6.5 the wrapper's own buffer, or the caller's.
* unfinalized: ``gemm2_output`` ``[R, hidden]`` bf16, R a new unbacked size (the launcher's padded row
  count, from the tile the autotuner picks; needs ``capture_dynamic_output_shape_ops``);
  ``expert_weights`` ``[num_tokens, top_k + num_fused_shared_experts]`` bf16 (the launcher's buffer, bf16
  whatever the logits' dtype); ``expanded_idx_to_permuted_idx`` ``[num_tokens * (top_k + shared)]`` int32.

Rejected like the wrapper (same class and message, ``_check_trtllm_fp8_moe``): an ``output`` of the wrong
shape or dtype (0.6.14 - 0.6.18: ``check_shape_dtype_device``, also unfinalized on 0.6.14; 0.7.x: the FP4
wrappers' dtype / row / width checks) and ``valid_hidden_size`` out of range or unfinalized when it does not
round up to the hidden size. The wrapper's own validators (``_validate_fused_shared_experts``,
``_validate_routing_replay_out``, ``_validate_fp8_block_scale_gemm1_activation_params``) and the kernel's
TVM_FFI_ICHECKs are not mirrored: they run in the eager body, where they raise as before; nor is 0.7.x's
refusal of a flat (1-D) MXFP8 ``hidden_states_scale`` with no tokens (``fused_moe/shared/tuning.py``, the
autotuner's tuning config).
"""
from typing import Optional, Tuple

import torch

from ._moe_helpers import _as_int, _check_trtllm_fp8_moe, _four, _trtllm_fp8_moe_outputs

# Release data (defaults: FlashInfer 0.7.4; each spec target overrides what differs).
RELEASE = {
    # the tensor parameters the real call writes into (those this release has)
    "mutates": ["output", "routing_replay_out", "workspace_buffer"],
    # how the wrapper checks output= ("none" before 0.6.14, "exact" 0.6.14 - 0.6.18, "bounded" 0.7.x)
    "output_check": "bounded",
    # an output= tensor is checked also when do_finalize=False (0.6.14)
    "output_checked_unfinalized": False,
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
        fp8_quantization_type=_as_int(fp8_quantization_type),
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
    hidden_states_scale: torch.Tensor,
    gemm1_weights: torch.Tensor,
    gemm1_weights_scale: torch.Tensor,
    gemm2_weights: torch.Tensor,
    gemm2_weights_scale: torch.Tensor,
    num_experts: int,
    top_k: int,
    n_group: Optional[int],
    topk_group: Optional[int],
    intermediate_size: int,
    local_expert_offset: int,
    local_num_experts: int,
    routed_scaling_factor: Optional[float],
    routing_method_type: int = 0,
    use_shuffled_weight: bool = False,
    weight_layout: int = 0,
    do_finalize: bool = True,
    enable_pdl: Optional[bool] = None,
    tune_max_num_tokens: int = 8192,
    fp8_quantization_type: int = 1,
    num_fused_shared_experts: Optional[int] = None,
    activation_type: int = 3,
    norm_topk_prob: bool = True,
    routing_replay_out: Optional[torch.Tensor] = None,
    gemm1_alpha: Optional[torch.Tensor] = None,
    gemm1_beta: Optional[torch.Tensor] = None,
    gemm1_clamp_limit: Optional[torch.Tensor] = None,
    output: Optional[torch.Tensor] = None,
    valid_hidden_size: Optional[int] = None,
    valid_intermediate_size: Optional[int] = None,
    gemm1_bias: Optional[torch.Tensor] = None,
    gemm2_bias: Optional[torch.Tensor] = None,
    workspace_buffer: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eager body: the wrapper by keyword (the quantization type back to its IntEnum); the caller's ``output`` left out, four tensors."""
    result = WRAPPER(
        **OP_PARAMS,
        fp8_quantization_type=Fp8QuantizationType(fp8_quantization_type),
        tune_max_num_tokens=OMIT,  # never the caller's value: Dynamo would specialise on it (see the module docstring)
    )
    if do_finalize:  # the wrapper's one tensor: the caller's output (left out) or its own
        return _four([] if output is not None else [result], hidden_states)
    return _four(result, hidden_states)


def fake(**OP_PARAMS):
    """The wrapper's outputs without the caller's ``output`` (see the module docstring)."""
    num_tokens, hidden, width = _check_trtllm_fp8_moe(hidden_states, output, valid_hidden_size, do_finalize, RELEASE)
    experts_per_token = top_k + (num_fused_shared_experts or 0)
    return _trtllm_fp8_moe_outputs(
        hidden_states, num_tokens, hidden, width, do_finalize, output, experts_per_token, "trtllm_fp8_block_scale_moe"
    )
