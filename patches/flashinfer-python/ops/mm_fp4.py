"""fp4patch op source for flashinfer.mm_fp4.

Read from FlashInfer 0.6.0 and 0.7.4, flashinfer/gemm/gemm_base.py: ``mm_fp4`` (decorated by
``@backend_requirement`` and ``@flashinfer_api``), ``_check_mm_fp4_problem_size``,
``_trtllm_gemm_fp4_requirement``, ``_cutlass_gemm_fp4_requirement``, ``_cudnn_gemm_fp4_requirement``;
flashinfer/utils.py: ``backend_requirement``.

Schema: the wrapper's parameters; ``out_dtype`` crosses as a ScalarType, ``backend`` as a str,
``alpha`` as an optional tensor (engines pass a 0-dim one). The custom op always writes into
``out`` (declared in MUTATES_ARGS) and returns nothing: the wrapper returns its ``out=`` argument,
and a custom op may neither return an alias of an input nor (as of torch 2.13) be
auto-functionalized when it mutates and returns a list. So ``entry`` allocates ``out`` when the
caller passed none, exactly as the wrapper does (``torch.empty((a.shape[0], b.shape[1]),
device=a.device, dtype=out_dtype)``: contiguous), hands it to the op and returns it.

Every backend goes through the op, ``backend="auto"`` included: the op body calls the decorated
wrapper, so ``@backend_requirement`` (capability and problem-size checks, the auto heuristic with
its ``setattr`` of ``suitable_auto_backends`` / ``dropped_experimental_backends`` on the function
object), the workspace cache (stream-keyed from 0.7.x), the runner factories (JIT loads) and the
autotuner all run eagerly inside the op, never under Dynamo.

The fake raises, at trace time, what the wrapper raises for the arguments alone, in the same
order and with the same class and message: a backend the device's compute capability does not
support (``BackendSupportedError``, asked of the wrapper's own ``is_backend_supported``), the common
problem-size checks (2-D operands, K match, operand / scale / alpha / output dtypes, alpha size,
block size), and the argument checks of an explicitly chosen ``trtllm``, ``cutlass`` or ``cudnn``
backend. Size conditions go through ``torch._check_value`` (a ValueError with the wrapper's message
on concrete sizes, a runtime assertion on unbacked ones), so a symbolic M never guards.
Refusals that depend on installed libraries (cuDNN, CuTe-DSL, CUDA version), ``backend="auto"``
finding no backend, the size checks of ``cute-dsl`` / ``cutedsl_low_latency`` / ``b12x`` / ``cake``
and the ``batch_invariant`` class's own refusals surface when the op runs.
"""

from typing import Optional

import torch

from ._out_gemm import _check_backend_supported, _copy_into_out, _require_out

# Release data (defaults: 0.6.0 .. 0.6.15.post1), read from _check_mm_fp4_problem_size and
# _cutlass_gemm_fp4_requirement of each release:
#   per_token_alpha_backends: the backends that take an alpha of one scale per row of a (m elements);
#     empty: alpha must have one element (before 0.7.1). 0.7.1: auto, cute-dsl; 0.7.2+: auto, cute-dsl, cake.
#   per_token_alpha_only: how the wrapper's refusal names those backends (0.7.1: "the 'cute-dsl' backend";
#     0.7.2+: "the 'cute-dsl' and 'cake' backends").
#   cutlass_contiguous_out: the cutlass backend refuses a non-contiguous out (0.6.16+).
RELEASE = {"per_token_alpha_backends": [], "per_token_alpha_only": "", "cutlass_contiguous_out": False}
# The wrapper writes its result into `out` (always given to the op: `entry` allocates it).
MUTATES_ARGS = ("out",)


def entry(**OP_PARAMS):
    """Called while compiling with every parameter of the installed ``mm_fp4`` by keyword.

    Allocates ``out`` as the wrapper would when it is None, calls the op (which writes into it)
    and returns it, as the wrapper returns ``out``.
    """
    if out is None:
        out = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=out_dtype)
    OP(
        **OP_PARAMS,
    )
    return out


def op(
    a: torch.Tensor,
    b: torch.Tensor,
    a_descale: torch.Tensor,
    b_descale: torch.Tensor,
    alpha: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
    out: Optional[torch.Tensor] = None,
    block_size: int = 16,
    use_8x4_sf_layout: bool = False,
    backend: str = "auto",
    use_nvfp4: bool = True,
    enable_pdl: bool = True,
    batch_invariant: bool = False,
) -> None:
    """The custom op's eager body: the real ``mm_fp4`` writing into ``out``."""
    _require_out(out, "mm_fp4")
    result = WRAPPER(
        **OP_PARAMS,
    )
    _copy_into_out(result, out)


def fake(**OP_PARAMS):
    """Checks what the wrapper checks on the arguments alone; the op returns nothing."""
    _require_out(out, "mm_fp4")
    if backend != "auto":
        _check_backend_supported(WRAPPER, "mm_fp4", backend, a.device)
    # _check_mm_fp4_problem_size
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"mm_fp4 accepts 2d tensors, got {a.shape} and {b.shape}")
    torch._check_value(
        a.shape[1] == b.shape[0],
        lambda: f"K dimension mismatch in mm_fp4. got a.shape[1] = {a.shape[1]}, b.shape[0] = {b.shape[0]}",
    )
    fp4 = (torch.uint8, getattr(torch, "float4_e2m1fn_x2", torch.uint8))
    if a.dtype not in fp4 or b.dtype not in fp4:
        raise ValueError(f"a and b must have float4_e2m1fn_x2 packed into uint8. Got {a.dtype} and {b.dtype}.")
    scale_dtypes = (torch.float8_e4m3fn, torch.uint8)
    if a_descale.dtype not in scale_dtypes or b_descale.dtype not in scale_dtypes:
        raise ValueError(
            f"a_descale and b_descale must have float8_e4m3fnx2 packed into uint8. Got {a_descale.dtype} and {b_descale.dtype}."
        )
    if alpha is not None and alpha.dtype != torch.float:
        raise ValueError(f"alpha must be a float tensor, got {alpha.dtype}")
    if alpha is not None:
        n = alpha.numel()
        if RELEASE["per_token_alpha_backends"]:
            # `|` keeps a SymBool symbolic (`or` would guard): what symbolic_shapes.sym_or (torch >= 2.8) does
            torch._check_value(
                (n == 1) | (n == a.shape[0]),
                lambda: f"alpha must be a scalar, or one scale per row of a for the per-token path. Got {n} for m={a.shape[0]}.",
            )
            if backend not in RELEASE["per_token_alpha_backends"]:
                only = RELEASE["per_token_alpha_only"]
                torch._check_value(
                    n == 1,
                    lambda: f"per-token alpha is only implemented by {only} (SM100/SM103), got backend={backend!r}.",
                )
        else:
            torch._check_value(n == 1, lambda: f"alpha must be a scalar, got {n}")
    if out_dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(
            f"Unsupported output dtype: {out_dtype}. "
            f"Only torch.bfloat16 and torch.float16 are supported for FP4 GEMM operations."
        )
    if use_nvfp4 and block_size != 16:
        raise ValueError("nvfp4 only supports block_size = 16.")
    if not use_nvfp4 and block_size != 32:
        raise ValueError("mxfp4 only supports block_size = 32.")
    # the explicitly chosen backend's own argument checks
    if backend == "trtllm":
        if not use_nvfp4:
            raise ValueError("Only cudnn and auto FP4 GEMM supports mxfp4 quantization.")
        if out_dtype != torch.bfloat16:
            raise ValueError(
                f"Unsupported output dtype: {out_dtype}. Only torch.bfloat16 is supported for TRTLLM FP4 GEMM operations."
            )
    if backend in ("cutlass", "cudnn") and use_8x4_sf_layout:
        raise ValueError("Only TRTLLM FP4 GEMM supports 8x4 scale factor layout.")
    if backend == "cutlass":
        if not use_nvfp4:
            raise ValueError("Only cudnn and auto FP4 GEMM supports mxfp4 quantization.")
        if RELEASE["cutlass_contiguous_out"] and not out.is_contiguous():
            raise ValueError("The CUTLASS FP4 GEMM backend requires a contiguous output tensor.")
    return None
