"""fp4patch op source for flashinfer.fused_add_rmsnorm_quant (fused residual add + RMSNorm, FP8 output).

Read from FlashInfer 0.6.7, 0.6.8, 0.6.10, 0.6.16 and 0.7.4 (``flashinfer/norm/__init__.py``):
``fused_add_rmsnorm_quant(out, input, residual, weight, scale, eps=1e-6, enable_pdl=None) -> None`` and
``_normalize_scale_tensor``. The wrapper (wrapped by ``@flashinfer_api``; its ``register_custom_op`` is a
no-op) adds ``input`` into ``residual`` in place, then writes ``RMSNorm(residual) * weight / scale`` in
``out``'s dtype (float8_e4m3fn / e5m2) into the caller's ``out``, and returns nothing; ``input`` is only
read. Under compile Dynamo stopped in the JIT module loader (the JIT spec's ``datetime.now()``).

Schema: the wrapper's parameters, ``scale`` as a Tensor. The wrapper takes a float too (deprecated: it
warns and makes ``torch.tensor([scale], dtype=torch.float32, device=input.device)``); ``entry`` makes that
same tensor while compiling (without the warning) so the op's schema has one type. ``out`` and
``residual`` are declared mutated (MUTATES_ARGS, as upstream's own declaration) and the op returns None,
as the wrapper does.

The fake raises what the wrapper raises in Python for the arguments alone: ``_normalize_scale_tensor``'s
ValueError for a ``scale`` that is neither 0-d nor of shape (1,). The kernel's own checks (2-D shapes,
devices, last dimension contiguous) run when the op runs. No check reads the token count, so a backed or
unbacked M never guards.
"""

from typing import Optional

import torch

# The wrapper writes its result into the caller's `out` and `input + residual` into `residual`.
MUTATES_ARGS = ("out", "residual")


def entry(**OP_PARAMS):
    """Called while compiling with every parameter of the installed ``fused_add_rmsnorm_quant`` by keyword: a
    float ``scale`` becomes the float32 (1,) tensor the wrapper would make; returns None, as the wrapper does."""
    if not isinstance(scale, torch.Tensor):
        scale = torch.tensor([scale], dtype=torch.float32, device=input.device)
    OP(
        **OP_PARAMS,
    )
    return None


def op(
    out: torch.Tensor,
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    eps: float = 1e-6,
    enable_pdl: Optional[bool] = None,
) -> None:
    """The custom op's eager body: the real ``fused_add_rmsnorm_quant`` writing into ``out`` and ``residual``."""
    WRAPPER(
        **OP_PARAMS,
    )


def fake(**OP_PARAMS):
    """``_normalize_scale_tensor``'s refusal of a ``scale`` of another shape; the op returns nothing."""
    if not (scale.dim() == 0 or (scale.dim() == 1 and scale.numel() == 1)):
        raise ValueError(f"scale must be a scalar tensor or shape (1,), got shape {tuple(scale.shape)}")
    return None
