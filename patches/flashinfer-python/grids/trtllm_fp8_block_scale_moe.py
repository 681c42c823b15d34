"""Case grid of ``flashinfer.trtllm_fp8_block_scale_moe`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/fused_moe/core.py``, 0.6.0 - 0.7.4) hands its arguments to the inner op
``trtllm_fp8_block_scale_moe_op`` of ``get_trtllm_moe_sm100_module``, which launches
``moe_op.trtllm_fp8_block_scale_moe``. Before 0.6.5 (no ``do_finalize``) the C++ launcher allocates the
output it returns (``csrc/trtllm_fused_moe_kernel_launcher.cu``), so those calls carry ``kernel_outputs``.
From 0.6.5 the finalized ``output`` is allocated (or checked, 0.6.14+) in Python and returned as
``result[0]``; ``do_finalize=False`` returns the launcher's ``gemm2_output`` (rows from the tile the
autotuner picks), ``expert_weights`` and ``expanded_idx_to_permuted_idx``: ``kernel_outputs``.

Cases: M in {0, 1, 8, 127, 129} x ``do_finalize`` True / False (where the release has it) x FP8 / bf16
activations (+ MXFP8 where ``fp8_quantization_type`` exists) x float32 (DeepSeekV3) / bf16 (Renormalize)
routing logits x ``output=`` absent or given (where it exists); the wrapper's refusals of an ``output`` too
narrow, with a row too many or of fp16 (finalized and not); where the release has it, ``valid_hidden_size``
in and out of range with both ``do_finalize``; ``tune_max_num_tokens=16``.

:func:`stubs`: ``_moe.py`` beside this file (the JIT module generators, the cubin loader, the autotuner,
``torch.cuda.device``, ``torch.from_dlpack``).
"""

import contextlib

FUNCTION = "trtllm_fp8_block_scale_moe"
#: the wrapper's outputs, in order (named in the fake check's messages): finalized ``output``
OUTPUTS = ("output", "expert_weights", "expanded_idx_to_permuted_idx")
#: the fake gives the unfinalized GEMM2 row count as a new unbacked size (``get_ctx().new_dynamic_size()``)
DYNAMIC_OUTPUT_SIZES = True
M_GRID = (0, 1, 8, 127, 129)
#: why an accepted call cannot be checked on CPU
LAUNCHER = ("no do_finalize on this release: the output is allocated and returned by the C++ launcher "
            "(csrc/trtllm_fused_moe_kernel_launcher.cu), not by the Python wrapper")
UNFINALIZED = ("do_finalize=False: gemm2_output, expert_weights and expanded_idx_to_permuted_idx are allocated by the C++ launcher "
               "(csrc/trtllm_fused_moe_kernel_launcher.cu), gemm2_output's rows by the tile the autotuner picks")


def _moe():
    """``_moe.py`` beside this file (``fp4patch.probes.oracle.load_grid`` gives ``sibling``)."""
    return sibling("_moe")  # noqa: F821


def fp8_cases(params, block, acts):
    """The grid of both TRT-LLM-Gen FP8 MoE wrappers (``block``: the block-scale one), activations ``acts``."""
    moe = _moe()
    finalize_param = "do_finalize" in params
    out = []

    def add(name, m, **kw):
        case = {"name": name, "args": [], "kwargs": moe.trtllm_fp8_kwargs(params, m, block, **kw)}
        if not finalize_param:
            case["kernel_outputs"] = LAUNCHER
        elif not kw.get("do_finalize", True):
            case["kernel_outputs"] = UNFINALIZED
        out.append(case)

    for m in M_GRID:
        for do_finalize in (True, False) if finalize_param else (True,):
            for act in acts:
                for logits in ("float32", "bfloat16"):
                    for output in (None, "given") if "output" in params else (None,):
                        add(f"M={m} do_finalize={do_finalize} {act} logits={logits} output={output or 'none'}", m, act=act,
                            logits=logits, do_finalize=do_finalize, output=output)
    if "output" in params:
        for do_finalize in (True, False):  # output= refused (unfinalized: where the release checks it there too)
            for output in ("narrow", "bad_rows", "bad_dtype"):
                add(f"M=8 do_finalize={do_finalize} output={output}", 8, do_finalize=do_finalize, output=output)
    if "valid_hidden_size" in params:
        for valid, do_finalize in ((200, True), (256, False), (200, False), (0, True), (384, True)):
            add(f"M=8 valid_hidden_size={valid} do_finalize={do_finalize}", 8, do_finalize=do_finalize, valid_hidden_size=valid)
    add("M=8 tune_max_num_tokens=16", 8, tune_max_num_tokens=16)
    return out


def cases(params, release):
    """The cases for a release whose wrapper takes ``params`` (``release``: the op source's RELEASE; the
    grid decides from ``params`` alone which calls the CPU can see)."""
    acts = ("fp8", "bf16", "mxfp8") if "fp8_quantization_type" in params else ("fp8", "bf16")
    return fp8_cases(params, True, acts)


@contextlib.contextmanager
def stubs(oracle, recorder, flashinfer):
    """The MoE grids' shared stand-ins (``_moe.py``) for ``flashinfer.fused_moe.core``."""
    import inspect
    import sys

    core = sys.modules[inspect.unwrap(flashinfer.trtllm_fp8_block_scale_moe).__module__]
    with _moe().moe_stubs(oracle, recorder, core):
        yield
