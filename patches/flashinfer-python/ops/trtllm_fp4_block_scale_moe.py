"""fp4patch op source for flashinfer.trtllm_fp4_block_scale_moe (TRT-LLM-Gen FP4 block-scale MoE, routing from logits).

Schema: every parameter of the installed wrapper. ``tune_max_num_tokens`` (a tuning-only max-token
hint) is in the schema, since entry/op/fake share one signature, but ``entry`` never passes the caller's value (OP gets the default):
engines pass ``next_power_of_2(num_tokens)``, and an int argument of the op would make Dynamo
specialise on it, so each new batch size would recompile. Under compile the eager body therefore
tunes with the release default, 8192 (SGLang's own wrappers of these entry points keep it out of
their schema too). Enums cross as int: ``routing_method_type`` (``RoutingMethodType``),
``gated_act_type`` (before 0.6.3) / ``activation_type`` (``ActivationType``),
``hidden_states_scale_layout`` (``SfLayout``, 0.7.x); ``nvfp4_4over6`` crosses as -1 (argument
omitted) or 0 (None); a ``NVFP44Over6Config`` is refused under compile (it cannot cross the schema).
MUTATES_ARGS comes from ``RELEASE["mutates"]``, since the mutated parameters differ between
releases.

Outputs: the wrapper returns a list. A tensor of that list that is the caller's own (``output=`` when
``do_finalize``) cannot be returned by a custom op, so ``output`` is declared mutated, the op returns
the list without it and ``entry`` puts the caller's tensor back in its place. The op returns four
tensors, the list padded with empty ones (``_four``): a mutable op returning ``List[Tensor]`` cannot be
auto-functionalized, so AOTAutograd / Inductor refused it; ``entry`` keeps as many as the call returns.

Fake, read from ``flashinfer/fused_moe/core.py`` (``trtllm_fp4_block_scale_moe_op``) and
``csrc/trtllm_fused_moe_kernel_launcher.cu`` (``FP4BlockScaleLauncher``) of 0.6.0 and 0.7.4,
and ``flashinfer/fused_moe/shared/inputs.py`` of 0.7.4:

* ``do_finalize=True``: ``[output]``, ``[num_tokens, W]`` bf16, W = ``valid_hidden_size`` (0.7.x) or
  the unpacked hidden size (``hidden_states.shape[-1]``, times 2 for uint8-packed FP4).
* ``do_finalize=False``: ``[gemm2_output, expert_weights, expanded_idx_to_permuted_idx]``:
  ``gemm2_output`` is ``[R, hidden]`` bf16 with R the padded permuted row count the launcher allocates,
  ``max(tile * getMaxNumCtasInBatchDim(M, top_k', E', tile), maybeGetMinTokenCount(...))``
  (``max_num_padded_tokens_gemm2``), whose ``tile`` is the autotuner's tactic or the launcher's default
  for M, chosen when the call runs: no formula of the input sizes gives R, so the fake gives it as a new
  unbacked size (``_launcher_rows``), which under torch.compile needs
  ``torch._dynamo.config.capture_dynamic_output_shape_ops`` (else fp4patch's one-line error); ``expert_weights`` is ``[num_tokens, top_k]`` with the dtype of ``routing_logits`` on
  releases where ``RELEASE["weights_follow_logits"]`` (0.6.0), bf16 otherwise;
  ``expanded_idx_to_permuted_idx`` is ``[num_tokens * (top_k + num_fused_shared_experts)]`` int32.

Rejected like the wrapper (same class and message): an ``output`` of the wrong dtype, row count or
width; ``valid_hidden_size`` out of range or with ``do_finalize=False`` when it does not round up to
the hidden size. Checks the kernel makes in C++ (TVM_FFI_ICHECK) are not mirrored.
"""
from typing import Optional, Tuple

import torch

from ._moe_helpers import _as_int, _check_trtllm_fp4_moe, _four, _int_or_none, _launcher_rows, _trtllm_fp4_moe_params
from ._nvfp4_4over6 import _nvfp4_4over6_argument, _nvfp4_4over6_code
from ._refusal import _check_nvfp4_4over6, _first_line

# Release data (defaults: FlashInfer 0.7.4; each spec target overrides what differs).
RELEASE = {
    # the tensor parameters the real call writes into (those this release has)
    "mutates": ["output", "routing_replay_out", "workspace_buffer"],
    # unfinalized expert_weights take routing_logits' dtype (before 0.6.15), not bf16
    "weights_follow_logits": False,
    # an output= tensor is checked also when do_finalize=False (before 0.6.15)
    "output_checked_unfinalized": False,
    # do_finalize=False with 0 tokens fails in the wrapper (from 0.6.18: the launcher hands back no
    # expert-weights slot for an empty buffer and the wrapper passes None to torch.from_dlpack); the
    # fake rejects it with the same error
    "unfinalized_needs_tokens": True,
}
MUTATES_ARGS = tuple(RELEASE["mutates"])


def entry(**OP_PARAMS):
    """Called while compiling with every wrapper parameter by keyword; enums to int, then OP.

    ``tune_max_num_tokens`` stops here: OP gets its default, never the caller's value, so Dynamo never specialises on it.
    """
    fresh = OP(
        **OP_PARAMS,
        routing_method_type=_as_int(routing_method_type),
        gated_act_type=_as_int(gated_act_type),
        activation_type=_as_int(activation_type),
        hidden_states_scale_layout=_int_or_none(hidden_states_scale_layout),
        nvfp4_4over6=_nvfp4_4over6_code(nvfp4_4over6, "trtllm_fp4_block_scale_moe"),
        tune_max_num_tokens=OMIT,  # never the caller's value: Dynamo would specialise on it (see the module docstring)
    )
    if do_finalize:  # the op's first output, or the caller's own tensor
        return [output] if output is not None else [fresh[0]]
    return list(fresh[:3])


def op(
    routing_logits: torch.Tensor,
    _trtllm_fp4_moe_params: SPLICE,  # routing_bias … tune_max_num_tokens, declared once in _moe_helpers.py
    norm_topk_prob: bool = True,
    routing_replay_out: Optional[torch.Tensor] = None,
    num_fused_shared_experts: Optional[int] = None,
    valid_hidden_size: Optional[int] = None,
    valid_intermediate_size: Optional[int] = None,
    hidden_states_scale_layout: Optional[int] = None,
    workspace_buffer: Optional[torch.Tensor] = None,
    nvfp4_4over6: int = -1,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eager body: the wrapper by keyword (enums back from int); the caller's ``output`` left out, four tensors."""
    result = WRAPPER(
        **OP_PARAMS,
        hidden_states_scale_layout=None if hidden_states_scale_layout is None else SfLayout(hidden_states_scale_layout),
        nvfp4_4over6=_nvfp4_4over6_argument(nvfp4_4over6),
        tune_max_num_tokens=OMIT,  # never the caller's value: Dynamo would specialise on it (see the module docstring)
    )
    if do_finalize and output is not None:
        return _four(result[1:], hidden_states)
    return _four(result, hidden_states)


def fake(**OP_PARAMS):
    """The wrapper's outputs without the caller's ``output`` (see the module docstring)."""
    if nvfp4_4over6 == -3:  # resolve_nvfp4_4over6's TypeError comes first
        _check_nvfp4_4over6(nvfp4_4over6, "trtllm_fp4_block_scale_moe")
    if nvfp4_4over6 == -2 and (per_token_scale is None or hidden_states.dtype != torch.uint8):
        _first_line(  # _trtllm_fp4_nvfp4_4over6_code's refusal of a recipe off the per-token NVFP4 path
            ValueError,
            "nvfp4_4over6 requires per_token_scale with NVFP4 (uint8) hidden_states; no other path has a 4over6 "
            "requantization. Pass None to turn 4over6 off, or omit it to read the environment.",
        )
    _check_nvfp4_4over6(nvfp4_4over6, "trtllm_fp4_block_scale_moe")  # a config or a bad value: the compile error's first line
    num_tokens, hidden, width = _check_trtllm_fp4_moe(hidden_states, output, valid_hidden_size, do_finalize, RELEASE)
    if do_finalize:
        if output is not None:
            return _four([], hidden_states)
        return _four([hidden_states.new_empty((num_tokens, width), dtype=torch.bfloat16)], hidden_states)
    rows = _launcher_rows("trtllm_fp4_block_scale_moe(do_finalize=False)", "gemm2_output")
    weights_dtype = routing_logits.dtype if RELEASE["weights_follow_logits"] else torch.bfloat16
    experts_per_token = top_k + (num_fused_shared_experts or 0)
    return _four([
        hidden_states.new_empty((rows, hidden), dtype=torch.bfloat16),
        hidden_states.new_empty((num_tokens, experts_per_token), dtype=weights_dtype),
        hidden_states.new_empty((num_tokens * experts_per_token,), dtype=torch.int32),
    ], hidden_states)
