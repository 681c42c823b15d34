"""Case grid of ``flashinfer.trtllm_fp4_block_scale_routed_moe`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The routed wrapper (``flashinfer/fused_moe/core.py``, 0.6.0 - 0.7.4) takes precomputed routing instead of
logits: ``topk_ids`` ``[M, top_k]`` int32 (the packed form: ids and weight bits) or, where the release data
says so (``tuple_topk_ids``, 0.6.12+), the ``(ids, weights)`` tuple, whose weights the unfinalized call
hands back; then it runs the same inner op as ``trtllm_fp4_block_scale_moe`` (see that grid's docstring
for the outputs, and for why every accepted ``do_finalize=False`` call comes out ``not_visible``).

Cases: the grid of ``trtllm_fp4_block_scale_moe.py`` (M in {0, 1, 8, 127, 129} x ``do_finalize`` x NVFP4 /
bf16 / MXFP8 x ``output=``, the ``output=`` and ``valid_hidden_size`` refusals, ``tune_max_num_tokens``) with
the packed ``topk_ids``, and the tuple form for every M and ``do_finalize`` (refused by the wrapper's
``topk_ids.dtype`` where the release does not take it, and by the fake with the same message).

:func:`stubs`: ``_moe.py`` (through the ``trtllm_fp4_block_scale_moe`` grid's loader).
"""

import contextlib

FUNCTION = "trtllm_fp4_block_scale_routed_moe"
#: the wrapper's outputs, in order (named in the fake check's messages): finalized ``[output]``
OUTPUTS = ("output", "expert_weights", "expanded_idx_to_permuted_idx")
#: the fake gives the unfinalized GEMM2 row count as a new unbacked size (``get_ctx().new_dynamic_size()``)
DYNAMIC_OUTPUT_SIZES = True


def _base():
    """The ``trtllm_fp4_block_scale_moe`` grid beside this file (its M grid and reasons)."""
    return sibling("trtllm_fp4_block_scale_moe")  # noqa: F821 - sibling: given by fp4patch.probes.oracle.load_grid


def cases(params, release):
    """The cases for a release whose wrapper takes ``params``; ``release``: the op source's RELEASE
    (``unfinalized_needs_tokens``, ``output_checked_unfinalized``)."""
    base = _base()
    moe = base._moe()

    def packed(m):
        return [("topk_ids", {"topk_ids": moe.t(m, moe.TOP_K, dtype="int32")})]

    out = base.trtllm_cases(params, release, packed)
    for m in base.M_GRID:
        for do_finalize in (True, False):
            ids = {"tuple": [moe.t(m, moe.TOP_K, dtype="int32"), moe.t(m, moe.TOP_K)]}
            case = {"name": f"M={m} do_finalize={do_finalize} nvfp4 (ids, weights)", "args": [],
                    "kwargs": {"topk_ids": ids, **moe.trtllm_kwargs(m, do_finalize=do_finalize)}}
            if not do_finalize:
                case["kernel_outputs"] = base.EMPTY if m == 0 and release.get("unfinalized_needs_tokens") else base.UNFINALIZED
            out.append(case)
    return out


@contextlib.contextmanager
def stubs(oracle, recorder, flashinfer):
    """The MoE grids' shared stand-ins (``_moe.py``) for ``flashinfer.fused_moe.core``."""
    import inspect
    import sys

    core = sys.modules[inspect.unwrap(flashinfer.trtllm_fp4_block_scale_routed_moe).__module__]
    with _base()._moe().moe_stubs(oracle, recorder, core):
        yield
