"""Case grid of ``flashinfer.trtllm_fp4_block_scale_moe`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/fused_moe/core.py``, 0.6.0 - 0.7.4) hands its arguments to the inner op
``trtllm_fp4_block_scale_moe_op`` of ``get_trtllm_moe_sm100_module``, which checks ``output`` and
``valid_hidden_size``, allocates in Python the routing buffers and the finalized ``output`` (``[M, H]``
bf16, or ``valid_hidden_size`` wide; 0.7.x ``fused_moe/shared/inputs.py`` ``alloc_trtllm_moe_output``) and
launches ``moe_op.trtllm_fp4_block_scale_moe``. With ``do_finalize=True`` it returns ``[output]``. With
``do_finalize=False`` it returns the kernel's own outputs: ``gemm2_output`` and
``expanded_idx_to_permuted_idx`` are allocated in C++ (``csrc/trtllm_fused_moe_kernel_launcher.cu``), their
row count depends on the tile the autotuner picks; the expert weights are the Python buffer (before 0.6.5
the launcher returns the pair, from 0.6.5 an ``Array<Optional<Tensor>>``).

Cases: M in {0, 1, 8, 127, 129} x ``do_finalize`` True / False x NVFP4 / bf16 / MXFP8 activations x float32 /
bf16 routing logits x ``output=`` absent or given; the wrapper's refusals of an ``output`` too narrow, with
a row too many or of fp16 (finalized and not); where the release has it, ``valid_hidden_size`` in and out
of range with both ``do_finalize``; ``tune_max_num_tokens=16``. Every ``do_finalize=False`` call carries
``kernel_outputs`` (the reason): the recorder returns nothing for the kernel, so where the wrapper accepts
the call its result cannot be formed on CPU and the case comes out ``not_visible`` (the function then does
not pass: fp4patch refuses rather than trusts an op whose outputs it cannot see); where the wrapper refuses
it in Python first (an ``output=`` checked unfinalized, ``valid_hidden_size``) the outcomes are compared.

:func:`stubs`: ``_moe.py`` beside this file (the JIT module generators, the cubin loader, the autotuner,
``torch.cuda.device``, ``torch.from_dlpack``).
"""

import contextlib

FUNCTION = "trtllm_fp4_block_scale_moe"
#: the wrapper's outputs, in order (named in the fake check's messages): finalized ``[output]``
OUTPUTS = ("output", "expert_weights", "expanded_idx_to_permuted_idx")
#: the fake gives the unfinalized GEMM2 row count as a new unbacked size (``get_ctx().new_dynamic_size()``)
DYNAMIC_OUTPUT_SIZES = True
M_GRID = (0, 1, 8, 127, 129)
#: why an accepted do_finalize=False call cannot be checked on CPU
UNFINALIZED = ("do_finalize=False: gemm2_output and expanded_idx_to_permuted_idx are allocated by the C++ launcher "
               "(csrc/trtllm_fused_moe_kernel_launcher.cu), gemm2_output's rows by the tile the autotuner picks")
EMPTY = ("do_finalize=False with no tokens: the C++ launcher hands back no expert-weights slot for an empty buffer, "
         "which the wrapper passes to torch.from_dlpack (release data unfinalized_needs_tokens)")


def _moe():
    """``_moe.py`` beside this file (``fp4patch.probes.oracle.load_grid`` gives ``sibling``)."""
    return sibling("_moe")  # noqa: F821


def trtllm_cases(params, release, routings):
    """The grid of both TRT-LLM-Gen FP4 MoE wrappers; ``routings(m)`` gives the routing argument(s) of a call
    with M tokens as ``[(label, kwargs)]`` (``routing_logits`` of each dtype, or the ``topk_ids`` forms): the
    first for the refusals, all of them for the M grid."""
    moe = _moe()
    empty_unfinalized = bool(release.get("unfinalized_needs_tokens"))
    out = []

    def add(name, m, routing, **kw):
        case = {"name": name, "args": [], "kwargs": {**routing, **moe.trtllm_kwargs(m, **kw)}}
        if not kw.get("do_finalize", True):
            case["kernel_outputs"] = EMPTY if m == 0 and empty_unfinalized else UNFINALIZED
        out.append(case)

    for m in M_GRID:
        for do_finalize in (True, False):
            for act in ("nvfp4", "bf16", "mxfp8"):
                for label, routing in routings(m):
                    for output in (None, "given"):
                        add(f"M={m} do_finalize={do_finalize} {act} {label} output={output or 'none'}", m, routing, act=act,
                            do_finalize=do_finalize, output=output)
    routing = routings(8)[0][1]
    for do_finalize in (True, False):  # output= refused (unfinalized: where the release checks it there too)
        for output in ("narrow", "bad_rows", "bad_dtype"):
            add(f"M=8 do_finalize={do_finalize} output={output}", 8, routing, do_finalize=do_finalize, output=output)
    if "valid_hidden_size" in params:
        for valid, do_finalize in ((200, True), (256, False), (200, False), (0, True), (384, True)):
            add(f"M=8 valid_hidden_size={valid} do_finalize={do_finalize}", 8, routing, do_finalize=do_finalize, valid_hidden_size=valid)
    add("M=8 tune_max_num_tokens=16", 8, routing, tune_max_num_tokens=16)
    return out


def cases(params, release):
    """The cases for a release whose wrapper takes ``params``; ``release``: the op source's RELEASE
    (``unfinalized_needs_tokens``, ``output_checked_unfinalized``: which unfinalized calls the wrapper
    refuses before the kernel)."""
    moe = _moe()

    def routings(m):
        return [(f"logits={dtype}", {"routing_logits": moe.t(m, moe.E, dtype=dtype)}) for dtype in ("float32", "bfloat16")]

    return trtllm_cases(params, release, routings)


@contextlib.contextmanager
def stubs(oracle, recorder, flashinfer):
    """The MoE grids' shared stand-ins (``_moe.py``) for ``flashinfer.fused_moe.core``."""
    import inspect
    import sys

    core = sys.modules[inspect.unwrap(flashinfer.trtllm_fp4_block_scale_moe).__module__]
    with _moe().moe_stubs(oracle, recorder, core):
        yield
