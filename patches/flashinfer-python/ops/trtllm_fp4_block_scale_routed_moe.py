"""fp4patch op source for flashinfer.trtllm_fp4_block_scale_routed_moe (TRT-LLM-Gen FP4 block-scale MoE, routing precomputed).

Schema: every parameter of the installed wrapper. ``tune_max_num_tokens`` (a tuning-only max-token
hint) is in the schema, since entry/op/fake share one signature, but ``entry`` never passes the caller's value (OP gets the default):
engines pass ``next_power_of_2(num_tokens)``, and an int argument of the op would make Dynamo
specialise on it, so each new batch size would recompile. Under compile the eager body therefore
tunes with the release default, 8192 (SGLang's own wrappers of these entry points keep it out of
their schema too). ``topk_ids`` crosses as a list: ``[packed_ids]`` (int32, expert id << 16 | bf16
weight bits) or, from 0.6.11, ``[ids, weights]`` for the ``(ids, weights)`` tuple form. Enums cross
as int (``routing_method_type``, ``gated_act_type`` / ``activation_type``,
``hidden_states_scale_layout``); ``nvfp4_4over6`` as -1 (omitted) or 0 (None). ``routing_metadata``
crosses only as None. Refused under compile with a clear error naming the argument: a
``NVFP44Over6Config`` and a ``routing_metadata`` slot (0.7.4 objects that cannot cross the schema).
MUTATES_ARGS comes from ``RELEASE["mutates"]``, since the mutated parameters differ between
releases.

Outputs: the wrapper returns a list. Tensors of that list that are the caller's own (``output=`` when
``do_finalize``; the weights of the ``(ids, weights)`` form when not) cannot be returned by a custom
op: ``output`` is declared mutated, the op returns the list without them and ``entry`` puts the
caller's tensors back in place. The op returns four tensors, the list padded with empty ones (``_four``,
as a mutable op returning ``List[Tensor]`` cannot be auto-functionalized for AOTAutograd / Inductor);
``entry`` keeps as many as the call returns.

Fake, read from ``flashinfer/fused_moe/core.py`` (``trtllm_fp4_block_scale_moe_op``),
``csrc/trtllm_fused_moe_kernel_launcher.cu`` (``FP4BlockScaleLauncher``) of 0.6.0 and 0.7.4 and
``flashinfer/fused_moe/shared/inputs.py`` of 0.7.4:

* ``do_finalize=True``: ``[output]`` ``[num_tokens, W]`` bf16 (W = ``valid_hidden_size`` or the unpacked
  hidden size); with ``gemm1_lora_delta`` (0.7.x) also ``expanded_idx_to_permuted_idx`` and the GEMM1
  output ``[R1, intermediate_size]`` bf16 (R1 routing-dependent: a new unbacked size; from the 0.7.4
  fake, not checked against C++).
* ``do_finalize=False``: ``[gemm2_output [R, hidden] bf16 (R: unbacked, from the tile chosen when the
  call runs; under torch.compile only with ``capture_dynamic_output_shape_ops``, as R1 above, see
  ``_launcher_rows``), expert_weights [num_tokens, top_k'] bf16, expanded_idx_to_permuted_idx
  [num_tokens * top_k'] int32]`` with top_k' = top_k + num_fused_shared_experts.

Rejected like the wrapper (same class and message): an ``output`` of the wrong dtype, row count or
width; ``valid_hidden_size`` out of range. Checks the kernel makes in C++ are not mirrored.
"""
from typing import List, Optional, Tuple

import torch

from ._moe_helpers import _as_int, _check_trtllm_fp4_moe, _four, _int_or_none, _launcher_rows, _trtllm_fp4_moe_params
from ._nvfp4_4over6 import _nvfp4_4over6_argument, _nvfp4_4over6_code
from ._refusal import _check_nvfp4_4over6, _first_line

# Release data (defaults: FlashInfer 0.7.4; each spec target overrides what differs).
RELEASE = {
    # the tensor parameters the real call writes into (those this release has)
    "mutates": ["output", "workspace_buffer"],
    # an output= tensor is checked also when do_finalize=False (before 0.6.15)
    "output_checked_unfinalized": False,
    # do_finalize=False with 0 tokens fails in the wrapper (from 0.6.18: the launcher hands back no
    # expert-weights slot for an empty buffer and the wrapper passes None to torch.from_dlpack); the
    # fake rejects it with the same error
    "unfinalized_needs_tokens": True,
    # topk_ids may be an (ids, weights) pair (from 0.6.12; 0.6.11 annotates it but reads .dtype)
    "tuple_topk_ids": True,
}
MUTATES_ARGS = tuple(RELEASE["mutates"])


def _caller_weights(topk_ids):
    # the (ids, weights) form (0.7.x): unfinalized, the wrapper hands the caller's weights back
    # (FlashInfer 0.7.4 fused_moe/shared/inputs.py unpack_trtllm_moe_output; an empty weights tensor,
    # which the kernel launcher cannot borrow, is not supported by the real call either)
    return topk_ids[1] if len(topk_ids) == 2 else None


def entry(**OP_PARAMS):
    """Called while compiling with every wrapper parameter by keyword; enums and the tuple form to schema types, then OP.

    ``tune_max_num_tokens`` stops here: OP gets its default, never the caller's value, so Dynamo never specialises on it.
    """
    if routing_metadata is not None:
        raise TypeError(
            "fp4patch: trtllm_fp4_block_scale_routed_moe(routing_metadata=...) cannot be traced by torch.compile: "
            "a TrtllmMoERoutingMetadataSlot cannot cross the custom-op schema; omit it under torch.compile, "
            "or call it outside the compiled region"
        )
    lora = 2 if gemm1_lora_delta is not None else 0  # expanded_idx_to_permuted_idx and the GEMM1 output, or none
    if do_finalize:
        count = (0 if output is not None else 1) + lora
    else:
        count = (3 if isinstance(topk_ids, torch.Tensor) else 2) + lora // 2
    fresh = list(OP(
        **OP_PARAMS,
        topk_ids=[topk_ids] if isinstance(topk_ids, torch.Tensor) else list(topk_ids),
        routing_method_type=_as_int(routing_method_type),
        gated_act_type=_as_int(gated_act_type),
        activation_type=_as_int(activation_type),
        hidden_states_scale_layout=_int_or_none(hidden_states_scale_layout),
        nvfp4_4over6=_nvfp4_4over6_code(nvfp4_4over6, "trtllm_fp4_block_scale_routed_moe"),
        tune_max_num_tokens=OMIT,  # never the caller's value: Dynamo would specialise on it (see the module docstring)
        routing_metadata=OMIT,  # only None gets here (refused above otherwise); the wrapper's default
    ))[:count]
    if do_finalize and output is not None:
        return [output] + fresh
    if not do_finalize and not isinstance(topk_ids, torch.Tensor):
        return [fresh[0], topk_ids[1]] + fresh[1:]
    return fresh


def op(
    topk_ids: List[torch.Tensor],
    _trtllm_fp4_moe_params: SPLICE,  # routing_bias … tune_max_num_tokens, declared once in _moe_helpers.py
    gemm1_lora_delta: Optional[torch.Tensor] = None,
    valid_hidden_size: Optional[int] = None,
    valid_intermediate_size: Optional[int] = None,
    num_fused_shared_experts: Optional[int] = None,
    hidden_states_scale_layout: Optional[int] = None,
    workspace_buffer: Optional[torch.Tensor] = None,
    nvfp4_4over6: int = -1,
    routing_metadata: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eager body: the wrapper by keyword (enums and the tuple form back); the caller's tensors left out, four tensors."""
    result = list(WRAPPER(
        **OP_PARAMS,
        topk_ids=topk_ids[0] if len(topk_ids) == 1 else (topk_ids[0], topk_ids[1]),
        hidden_states_scale_layout=None if hidden_states_scale_layout is None else SfLayout(hidden_states_scale_layout),
        nvfp4_4over6=_nvfp4_4over6_argument(nvfp4_4over6),
        tune_max_num_tokens=OMIT,  # never the caller's value: Dynamo would specialise on it (see the module docstring)
        routing_metadata=OMIT,  # only None gets here (refused above otherwise); the wrapper's default
    ))
    if do_finalize and output is not None:
        return _four(result[1:], hidden_states)
    if not do_finalize and _caller_weights(topk_ids) is not None:
        return _four([result[0]] + result[2:], hidden_states)
    return _four(result, hidden_states)


def fake(**OP_PARAMS):
    """The wrapper's outputs without the caller's tensors (see the module docstring)."""
    if nvfp4_4over6 == -3:  # resolve_nvfp4_4over6's TypeError comes first
        _check_nvfp4_4over6(nvfp4_4over6, "trtllm_fp4_block_scale_routed_moe")
    if nvfp4_4over6 == -2 and (per_token_scale is None or hidden_states.dtype != torch.uint8):
        _first_line(  # _trtllm_fp4_nvfp4_4over6_code's refusal of a recipe off the per-token NVFP4 path
            ValueError,
            "nvfp4_4over6 requires per_token_scale with NVFP4 (uint8) hidden_states; no other path has a 4over6 "
            "requantization. Pass None to turn 4over6 off, or omit it to read the environment.",
        )
    _check_nvfp4_4over6(nvfp4_4over6, "trtllm_fp4_block_scale_routed_moe")  # a config or a bad value: the compile error's first line
    if len(topk_ids) == 2 and not RELEASE["tuple_topk_ids"]:
        raise AttributeError("'tuple' object has no attribute 'dtype'")
    num_tokens, hidden, width = _check_trtllm_fp4_moe(hidden_states, output, valid_hidden_size, do_finalize, RELEASE)
    experts_per_token = top_k + (num_fused_shared_experts or 0)
    expanded = hidden_states.new_empty((num_tokens * experts_per_token,), dtype=torch.int32)
    lora = []
    if gemm1_lora_delta is not None:
        rows = _launcher_rows("trtllm_fp4_block_scale_routed_moe(gemm1_lora_delta=...)", "the GEMM1 output")
        lora = [hidden_states.new_empty((rows, intermediate_size), dtype=torch.bfloat16)]
    if do_finalize:
        finalized = [] if output is not None else [hidden_states.new_empty((num_tokens, width), dtype=torch.bfloat16)]
        return _four(finalized + ([expanded] + lora if lora else []), hidden_states)
    rows = _launcher_rows("trtllm_fp4_block_scale_routed_moe(do_finalize=False)", "gemm2_output")
    gemm2 = hidden_states.new_empty((rows, hidden), dtype=torch.bfloat16)
    if _caller_weights(topk_ids) is not None:
        return _four([gemm2, expanded] + lora, hidden_states)
    weights = hidden_states.new_empty((num_tokens, experts_per_token), dtype=torch.bfloat16)
    return _four([gemm2, weights, expanded] + lora, hidden_states)
