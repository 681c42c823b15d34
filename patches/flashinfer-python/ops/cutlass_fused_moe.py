"""fp4patch op source for flashinfer.cutlass_fused_moe (CUTLASS fused MoE; the NVFP4 path is what engines compile).

Schema: every parameter of the installed wrapper. ``tune_max_num_tokens`` (a tuning-only max-token
hint) is in the schema, since entry/op/fake share one signature, but ``entry`` never passes the caller's value (OP gets the default):
engines pass ``next_power_of_2(num_tokens)``, and an int argument of the op would make Dynamo
specialise on it, so each new batch size would recompile. Under compile the eager body therefore
tunes with the release default, 8192 (SGLang's own wrappers of these entry points keep it out of
their schema too). ``activation_type`` (``ActivationType``) crosses as int, ``quant_scales=None``
(unquantized paths) as an empty list and back; ``nvfp4_4over6`` (0.7.4) as -1 (argument omitted) or
0 (None); a ``NVFP44Over6Config`` is refused under compile, and so is ``backend="cake"`` (another
kernel family, whose outputs are not mirrored). MUTATES_ARGS comes from ``RELEASE["mutates"]``,
since the mutated parameters differ between releases.

Outputs: the wrapper writes into ``output=`` when given and returns a list. The op declares ``output``
(and 0.7.x's ``workspace_buffer``) mutated; as a custom op cannot return its own input, it returns the
list without the caller's ``output`` (padded to four tensors with an empty one, ``_four``: a mutable op
returning ``List[Tensor]`` cannot be auto-functionalized for AOTAutograd / Inductor) and ``entry`` puts it
back in front.

Fake, read from ``flashinfer/fused_moe/core.py`` of 0.6.0 and 0.7.4 (the public ``cutlass_fused_moe``
and the inner op of ``get_cutlass_fused_moe_module``): without ``min_latency_mode`` (which the wrapper
refuses) the list is ``[output [num_tokens, hidden] output_dtype, num_active_experts_per_node [1]
int32, experts_to_token_score [E, num_tokens] float32, active_expert_global_ids [E] int32]`` with
hidden = ``fc2_expert_weights.shape[1]`` and E = ``fc2_expert_weights.shape[0]``.

Rejected like the wrapper (same class and message): ``min_latency_mode=True``, an unknown ``backend``,
an ``output`` of the wrong shape or dtype. Checks that depend on the GPU (FP8 block scaling, SM90-only
paths) or that the kernel makes in C++ are not mirrored; the eager body still makes them at run time.
"""
from typing import List, Optional, Tuple

import torch

from ._moe_helpers import _as_int, _four
from ._nvfp4_4over6 import _nvfp4_4over6_argument, _nvfp4_4over6_code
from ._refusal import _check_nvfp4_4over6

# Release data (defaults: FlashInfer 0.7.4). The fake is the same from 0.6.0 to 0.7.4.
RELEASE = {
    # the tensor parameters the real call writes into (those this release has)
    "mutates": ["output", "workspace_buffer"],
}
MUTATES_ARGS = tuple(RELEASE["mutates"])


def entry(**OP_PARAMS):
    """Called while compiling with every wrapper parameter by keyword; enums to int, then OP.

    ``tune_max_num_tokens`` stops here: OP gets its default, never the caller's value, so Dynamo never specialises on it.
    """
    if backend == "cake":
        raise NotImplementedError(
            "fp4patch: cutlass_fused_moe(backend='cake') is not supported under torch.compile "
            "(its outputs are not mirrored by the fp4patch fake); call it outside the compiled region"
        )
    fresh = list(OP(
        **OP_PARAMS,
        quant_scales=[] if quant_scales is None else list(quant_scales),
        activation_type=_as_int(activation_type),
        profile_ids=None if profile_ids is None else list(profile_ids),
        nvfp4_4over6=_nvfp4_4over6_code(nvfp4_4over6, "cutlass_fused_moe"),
        tune_max_num_tokens=OMIT,  # never the caller's value: Dynamo would specialise on it (see the module docstring)
    ))
    if output is not None:
        return [output] + fresh[:3]
    return fresh


def op(
    input: torch.Tensor,
    token_selected_experts: torch.Tensor,
    token_final_scales: torch.Tensor,
    fc1_expert_weights: torch.Tensor,
    fc2_expert_weights: torch.Tensor,
    output_dtype: torch.dtype,
    quant_scales: List[torch.Tensor],
    fc1_expert_biases: Optional[torch.Tensor] = None,
    fc2_expert_biases: Optional[torch.Tensor] = None,
    input_sf: Optional[torch.Tensor] = None,
    swiglu_alpha: Optional[torch.Tensor] = None,
    swiglu_beta: Optional[torch.Tensor] = None,
    swiglu_limit: Optional[torch.Tensor] = None,
    tp_size: int = 1,
    tp_rank: int = 0,
    ep_size: int = 1,
    ep_rank: int = 0,
    cluster_size: int = 1,
    cluster_rank: int = 0,
    output: Optional[torch.Tensor] = None,
    enable_alltoall: bool = False,
    use_deepseek_fp8_block_scale: bool = False,
    use_w4_group_scaling: bool = False,
    use_mxfp8_act_scaling: bool = False,
    min_latency_mode: bool = False,
    use_packed_weights: bool = False,
    use_wfp4afp8_humming: bool = False,
    tune_max_num_tokens: int = 8192,
    enable_pdl: Optional[bool] = None,
    activation_type: int = 3,
    swizzled_input_sf: bool = True,
    use_fused_finalize: Optional[bool] = None,
    profile_ids: Optional[List[int]] = None,
    workspace_buffer: Optional[torch.Tensor] = None,
    clamped_relu2_limit: Optional[torch.Tensor] = None,
    situ_beta: Optional[torch.Tensor] = None,
    situ_linear_beta: Optional[torch.Tensor] = None,
    backend: str = 'cutlass',
    nvfp4_4over6: int = -1,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eager body: the wrapper by keyword (enum back from int); the caller's ``output`` left out, four tensors."""
    result = list(WRAPPER(
        **OP_PARAMS,
        quant_scales=quant_scales if len(quant_scales) else None,
        activation_type=ActivationType(activation_type),
        nvfp4_4over6=_nvfp4_4over6_argument(nvfp4_4over6),
        tune_max_num_tokens=OMIT,  # never the caller's value: Dynamo would specialise on it (see the module docstring)
    ))
    if output is not None:
        return _four(result[1:], input)
    return _four(result, input)


def fake(**OP_PARAMS):
    """The wrapper's list without the caller's ``output`` (see the module docstring)."""
    _check_nvfp4_4over6(nvfp4_4over6, "cutlass_fused_moe")  # a config or a bad value: the compile error's first line
    if min_latency_mode:
        raise NotImplementedError("min latency mode not yet implemented for Blackwell.")
    if backend != "cutlass":
        raise ValueError(f"unsupported fused MoE backend: {backend!r}")
    num_rows = input.shape[0]
    experts = fc2_expert_weights.shape[0]
    hidden = fc2_expert_weights.shape[1]
    fresh = []
    if output is None:
        fresh.append(input.new_empty((num_rows, hidden), dtype=output_dtype))
    else:
        expected = (num_rows, hidden)
        if output.dim() != 2:
            raise ValueError(f"Invalid shape of output: expected {expected}, got {output.shape}")
        for got, want in zip(output.shape, expected):
            torch._check_with(ValueError, got == want, lambda: f"Invalid shape of output: expected {expected}, got {output.shape}")
        if output.dtype != output_dtype:
            raise ValueError(f"Invalid dtype of output: expected {output_dtype}, got {output.dtype}")
    return _four(fresh + [
        input.new_empty((1,), dtype=torch.int32),
        input.new_empty((experts, num_rows), dtype=torch.float32),
        input.new_empty((experts,), dtype=torch.int32),
    ], input)
