"""Shared helpers of the MoE op sources (``trtllm_fp4_block_scale_moe``, ``trtllm_fp4_block_scale_routed_moe``,
``trtllm_fp8_block_scale_moe``, ``trtllm_fp8_per_tensor_scale_moe``,
``cutlass_fused_moe``).

Not an op source: the renderer (``fp4patch/ops/render.py``) copies the functions an op source imports from
here into its rendered block, and splices the signature-only ``_trtllm_fp4_moe_params`` into ``op``'s
parameter list where it stands as ``_trtllm_fp4_moe_params: SPLICE``, so nothing installed imports this file.
"""
import enum
from typing import Optional

import torch


def _trtllm_fp4_moe_params(
    routing_bias: Optional[torch.Tensor],
    hidden_states: torch.Tensor,
    hidden_states_scale: Optional[torch.Tensor],
    gemm1_weights: torch.Tensor,
    gemm1_weights_scale: torch.Tensor,
    gemm1_bias: Optional[torch.Tensor],
    gemm1_alpha: Optional[torch.Tensor],
    gemm1_beta: Optional[torch.Tensor],
    gemm1_clamp_limit: Optional[torch.Tensor],
    gemm2_weights: torch.Tensor,
    gemm2_weights_scale: torch.Tensor,
    gemm2_bias: Optional[torch.Tensor],
    output1_scale_scalar: Optional[torch.Tensor],
    output1_scale_gate_scalar: Optional[torch.Tensor],
    output2_scale_scalar: Optional[torch.Tensor],
    num_experts: int,
    top_k: int,
    n_group: Optional[int],
    topk_group: Optional[int],
    intermediate_size: int,
    local_expert_offset: int,
    local_num_experts: int,
    routed_scaling_factor: Optional[float],
    routing_method_type: int = 0,
    do_finalize: bool = True,
    enable_pdl: Optional[bool] = None,
    gated_act_type: int = 0,
    activation_type: int = 3,
    per_token_scale: Optional[torch.Tensor] = None,
    output: Optional[torch.Tensor] = None,
    tune_max_num_tokens: int = 8192,
):
    """Signature only: the parameters both TRT-LLM-Gen FP4 MoE wrappers declare alike, ``routing_bias`` to
    ``tune_max_num_tokens``, right after their first (``routing_logits`` / ``topk_ids``) and in this order
    on every release (FlashInfer 0.6.0 – 0.7.4, ``flashinfer/fused_moe/core.py``: ``gated_act_type`` before
    0.6.3, ``activation_type`` from 0.6.3, ``per_token_scale`` from 0.6.11; the parameters after these
    differ between the two). Their op sources splice it into ``op`` (``_trtllm_fp4_moe_params: SPLICE``),
    schema annotations and defaults included; a parameter absent in a release is trimmed there as any other.
    Never called, never inlined."""


def _as_int(value):
    # An enum member (IntEnum on 0.6.x/0.7.x, or a plain Enum an engine defines) or an int, as int.
    return int(value.value if isinstance(value, enum.Enum) else value)


def _int_or_none(value):
    return None if value is None else _as_int(value)


def _unpacked_hidden(hidden_states):
    return hidden_states.shape[-1] * 2 if hidden_states.dtype == torch.uint8 else hidden_states.shape[-1]


def _four(tensors, like):
    """The op's outputs as its schema returns them: four tensors, the wrapper's (at most four) then empty
    ones of ``like``. A mutable custom op returning ``List[Tensor]`` cannot be auto-functionalized (torch's
    ``can_auto_functionalize``: "Not yet supported: List[Tensor] return"), so AOTAutograd and Inductor
    refused these ops; a fixed tuple can be. ``entry`` keeps the first ones, as many as the call returns."""
    tensors = list(tensors)
    return tuple(tensors + [like.new_empty((0,)) for _ in range(4 - len(tensors))])


def _launcher_rows(function, output):
    """A new unbacked size: the row count of ``output``, a permuted-layout tensor the TRT-LLM-Gen launcher
    allocates in C++ (``csrc/trtllm_fused_moe_kernel_launcher.cu`` of 0.6.0 and 0.7.4: ``gemm2_output`` is
    ``max(tile * getMaxNumCtasInBatchDim(M, top_k', E', tile), maybeGetMinTokenCount(...))`` rows, with
    ``tile`` the autotuner's tactic, or ``selectDefaultTileN`` when it has none). The tile is chosen when
    the call runs, so no formula of the input sizes gives the count.

    Under torch.compile this needs ``torch._dynamo.config.capture_dynamic_output_shape_ops``: without it
    fp4patch's own one-line error is raised (``torch._dynamo.exc.Unsupported``, so that its message is the
    first line of the compile error under ``fullgraph=True``, and ``fullgraph=False`` breaks the graph
    there), as it is where the fake runs without a ShapeEnv that allows such sizes (where torch would
    raise a bare ``DynamicOutputShapeException``)."""
    ctx = torch.library.get_ctx()
    env = getattr(ctx, "_shape_env", None)
    dynamo = getattr(torch, "_dynamo", None)
    allowed = env is not None and env.allow_dynamic_output_shape_ops
    if allowed and torch.compiler.is_compiling() and dynamo is not None:
        allowed = bool(dynamo.config.capture_dynamic_output_shape_ops)
    if not allowed:
        error = getattr(getattr(dynamo, "exc", None), "Unsupported", RuntimeError)
        raise error(
            f"fp4patch: {function} returns {output} with a row count the C++ launcher picks when it runs "
            "(from the tile the autotuner chose), so it compiles only with "
            "torch._dynamo.config.capture_dynamic_output_shape_ops = True, and CUDA-graph capture cannot hold the call; "
            "set that option, or call it outside the compiled region"
        )
    return ctx.new_dynamic_size()


def _check_trtllm_fp4_moe(hidden_states, output, valid_hidden_size, do_finalize, release):
    """The TRT-LLM-Gen FP4 MoE wrappers' checks on output / valid_hidden_size; (num_tokens, hidden, width)."""
    # Same class and message as flashinfer/fused_moe/core.py (trtllm_fp4_block_scale_moe_op) of 0.6.0 and
    # 0.7.4 and flashinfer/fused_moe/shared/inputs.py of 0.7.4. release: the op source's RELEASE
    # (unfinalized_needs_tokens, output_checked_unfinalized). hidden: the unpacked hidden size; width: the
    # finalized output's (valid_hidden_size when given).
    num_tokens = hidden_states.shape[0]
    hidden = _unpacked_hidden(hidden_states)
    if valid_hidden_size is not None:
        torch._check_with(ValueError, valid_hidden_size > 0, lambda: f"valid_hidden_size must be positive, got {valid_hidden_size}")
        padded = (valid_hidden_size + 127) // 128 * 128
        torch._check_with(
            ValueError, padded <= hidden, lambda: f"roundUp(valid_hidden_size, 128) must be <= padded hidden_size, got {padded} > {hidden}"
        )
        if not do_finalize:
            torch._check_with(
                ValueError,
                padded == hidden,
                lambda: "valid_hidden_size is not supported with do_finalize=False unless "
                f"roundUp(valid_hidden_size, 128) == hidden_size; got valid_hidden_size={valid_hidden_size}, "
                f"roundUp={padded}, hidden_size={hidden}",
            )
    if not do_finalize and release["unfinalized_needs_tokens"]:
        torch._check_with(
            RuntimeError,
            num_tokens != 0,
            lambda: "from_dlpack received an invalid capsule. Note that DLTensor capsules can be consumed only once, "
            "so you might have already constructed a tensor from it once.",
        )
    if output is not None and (do_finalize or release["output_checked_unfinalized"]):
        if output.dtype != torch.bfloat16:
            raise ValueError(f"Invalid dtype of output: expected {torch.bfloat16}, got {output.dtype}")
        rows, width = output.shape[0], output.shape[1]
        torch._check_with(AssertionError, rows == num_tokens, lambda: f"output.shape[0]={rows} must be equal to {num_tokens}")
        torch._check_with(AssertionError, width <= hidden, lambda: f"output.shape[1]={width} must be less than or equal to {hidden}")
        if valid_hidden_size is not None:
            torch._check_with(
                ValueError,
                width == valid_hidden_size,
                lambda: f"output.shape[1] must equal valid_hidden_size={valid_hidden_size} when valid_hidden_size is provided, got {width}",
            )
    return num_tokens, hidden, hidden if valid_hidden_size is None else valid_hidden_size


def _check_trtllm_fp8_moe(hidden_states, output, valid_hidden_size, do_finalize, release):
    """The TRT-LLM-Gen FP8 MoE wrappers' checks on output / valid_hidden_size; (num_tokens, hidden, width).

    ``release``: the op source's RELEASE. ``release["output_check"]`` is ``"bounded"`` where the wrapper
    checks ``output`` as the FP4 ones do (``trtllm_fp8_block_scale_moe`` from 0.7.0: dtype, then
    ``output.shape[0] == num_tokens`` and ``output.shape[1] <= hidden``, ``valid_hidden_size``): those checks
    are :func:`_check_trtllm_fp4_moe`'s. ``"exact"`` where it calls
    ``check_shape_dtype_device(output, (num_tokens, hidden_size), torch.bfloat16, ...)`` (both FP8 wrappers
    0.6.14 - 0.6.18, ``trtllm_fp8_per_tensor_scale_moe`` through 0.7.4; ``flashinfer/utils.py``): shape,
    then dtype, each a ``ValueError``; ``"none"`` before 0.6.14, where the wrappers take no ``output``.
    An output is checked when ``do_finalize`` or ``release["output_checked_unfinalized"]`` (0.6.14)."""
    if release["output_check"] == "bounded":
        return _check_trtllm_fp4_moe(hidden_states, output, valid_hidden_size, do_finalize, release)
    num_tokens, hidden = hidden_states.shape[0], hidden_states.shape[-1]
    if output is not None and (do_finalize or release["output_checked_unfinalized"]):
        expected = (num_tokens, hidden)
        for got, want in zip(output.shape, expected):
            torch._check_with(ValueError, got == want, lambda: f"Invalid shape of output: expected {expected}, got {output.shape}")
        torch._check_with(ValueError, output.dim() == 2, lambda: f"Invalid shape of output: expected {expected}, got {output.shape}")
        if output.dtype != torch.bfloat16:
            raise ValueError(f"Invalid dtype of output: expected {torch.bfloat16}, got {output.dtype}")
    _check_trtllm_fp4_moe(hidden_states, None, None, do_finalize, release)  # the unfinalized 0-token refusal
    return num_tokens, hidden, hidden


def _trtllm_fp8_moe_outputs(hidden_states, num_tokens, hidden, width, do_finalize, output, experts_per_token, function):
    """The fake outputs of both TRT-LLM-Gen FP8 MoE wrappers, as the op returns them (``_four``).

    Read from ``flashinfer/fused_moe/core.py`` (``trtllm_fp8_*_moe_op``) and
    ``csrc/trtllm_fused_moe_kernel_launcher.cu`` (``Fp8PerTensorLauncher`` / ``Fp8BlockScaleLauncher``) of 0.6.0
    and 0.7.4: finalized, ``[num_tokens, width]`` bf16 (allocated by the launcher before 0.6.5, by the
    wrapper after), nothing when the caller's ``output`` is filled; unfinalized (from 0.6.5),
    ``gemm2_output`` ``[R, hidden]`` bf16 with R the launcher's padded row count (:func:`_launcher_rows`),
    the launcher's ``expert_weights`` ``[num_tokens, experts_per_token]`` bf16 and
    ``expanded_idx_to_permuted_idx`` ``[num_tokens * experts_per_token]`` int32."""
    if do_finalize:
        if output is not None:
            return _four([], hidden_states)
        return _four([hidden_states.new_empty((num_tokens, width), dtype=torch.bfloat16)], hidden_states)
    rows = _launcher_rows(f"{function}(do_finalize=False)", "gemm2_output")
    return _four([
        hidden_states.new_empty((rows, hidden), dtype=torch.bfloat16),
        hidden_states.new_empty((num_tokens, experts_per_token), dtype=torch.bfloat16),
        hidden_states.new_empty((num_tokens * experts_per_token,), dtype=torch.int32),
    ], hidden_states)
