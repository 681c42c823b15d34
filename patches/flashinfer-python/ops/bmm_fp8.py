"""fp4patch op source for flashinfer.bmm_fp8.

Read from FlashInfer 0.5.0 (flashinfer/gemm.py), 0.5.3, 0.6.0 and 0.7.4 (flashinfer/gemm/gemm_base.py): ``bmm_fp8`` (decorated by
``@backend_requirement`` and ``@flashinfer_api``), ``_check_bmm_fp8_problem_size``,
``_validate_fp8_output_dtype``, ``_cutlass_bmm_fp8_requirement``; flashinfer/utils.py:
``backend_requirement``.

Schema: the wrapper's parameters; ``dtype`` crosses as a ScalarType, ``backend`` as a str.
The custom op always writes into ``out`` (declared in MUTATES_ARGS) and returns nothing: the
wrapper returns its ``out=`` argument, and a custom op may neither return an alias of an input
nor (as of torch 2.13) be auto-functionalized when it mutates and returns a list. So ``entry``
allocates ``out`` when the caller passed none, exactly as the wrapper does
(``torch.empty((A.shape[0], A.shape[1], B.shape[2]), device=A.device, dtype=dtype)``: contiguous),
hands it to the op and returns it; the eager body passes it to the wrapper, which writes into it.

The op body calls the decorated wrapper, so ``@backend_requirement`` (capability and problem-size
checks, the ``backend="auto"`` heuristic and its ``setattr`` on the function object), the
workspace cache (stream-keyed from 0.7.x) and the autotuner all run eagerly inside the op.

The fake raises, at trace time, what the wrapper raises for the arguments alone, in the same
order and with the same class and message: an unknown backend or one the device's compute
capability does not support (``BackendSupportedError``, asked of the wrapper's own
``is_backend_supported``), an output dtype other than bf16/fp16 (``ValueError``), e5m2 with
``backend="cutlass"`` (``ValueError``). Refusals that depend on installed libraries (cuDNN,
CuTe-DSL), ``backend="auto"`` finding no backend, and the ``cute-dsl`` (sm107) size checks surface
when the op runs. No check reads a size, so symbolic (backed or unbacked) batch and M never guard.
"""

from typing import Optional

import torch

from ._out_gemm import _check_backend_supported, _copy_into_out, _require_out

# Release data. inline_checks: the wrapper checks its arguments itself, without @backend_requirement
# (0.5.0 .. 0.5.2, flashinfer/gemm.py: output dtype first, then "e5m2 is not supported for cutlass
# backend" and "Unsupported backend: ..."); from 0.5.3 @backend_requirement does (the default).
RELEASE = {"inline_checks": False}
# The wrapper writes its result into `out` (always given to the op: `entry` allocates it).
MUTATES_ARGS = ("out",)


def entry(**OP_PARAMS):
    """Called while compiling with every parameter of the installed ``bmm_fp8`` by keyword.

    Allocates ``out`` as the wrapper would when it is None, calls the op (which writes into it)
    and returns it, as the wrapper returns ``out``.
    """
    if out is None:
        out = torch.empty((A.shape[0], A.shape[1], B.shape[2]), device=A.device, dtype=dtype)
    OP(
        **OP_PARAMS,
    )
    return out


def op(
    A: torch.Tensor,
    B: torch.Tensor,
    A_scale: torch.Tensor,
    B_scale: torch.Tensor,
    dtype: torch.dtype,
    out: Optional[torch.Tensor] = None,
    backend: str = "cublas",
    batch_invariant: bool = False,
) -> None:
    """The custom op's eager body: the real ``bmm_fp8`` writing into ``out``."""
    _require_out(out, "bmm_fp8")
    result = WRAPPER(
        **OP_PARAMS,
    )
    _copy_into_out(result, out)


def fake(**OP_PARAMS):
    """Checks what the wrapper checks on the arguments alone; the op returns nothing."""
    _require_out(out, "bmm_fp8")
    inline = RELEASE["inline_checks"]
    if backend != "auto" and not inline:
        _check_backend_supported(WRAPPER, "bmm_fp8", backend, A.device)
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(
            f"Unsupported output dtype: {dtype}. "
            f"Only torch.bfloat16 and torch.float16 are supported for FP8 GEMM operations."
        )
    if backend == "cutlass" and (A.dtype == torch.float8_e5m2 or B.dtype == torch.float8_e5m2):
        raise ValueError("e5m2 is not supported for cutlass backend" if inline else "e5m2 is not supported for bmm_fp8 with cutlass backend")
    if inline and backend not in ("cudnn", "cublas", "cutlass", "auto"):
        raise ValueError(f"Unsupported backend: {backend}")
    return None
