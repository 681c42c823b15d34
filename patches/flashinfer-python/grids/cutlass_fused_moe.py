"""Case grid of ``flashinfer.cutlass_fused_moe`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/fused_moe/core.py``, 0.6.0 - 0.7.4) checks its arguments (``min_latency_mode``
refused on Blackwell, an unknown ``backend`` where it has one), allocates ``output`` in Python
(``[M, fc2_expert_weights.shape[1]]`` of ``output_dtype``; a caller's ``output`` is checked with
``check_shape_dtype_device``) and calls the inner op of ``get_cutlass_fused_moe_module``, whose runner
(``module.init(...)``, a C++ object) writes into it (``run_moe``) and which returns the list ``[output,
num_active_experts_per_node, experts_to_token_score, active_expert_global_ids]``, the last three allocated
in Python there.

Cases (NVFP4 weights, E = 8, hidden 256, top-k 2): M in {0, 1, 8, 127, 129} x NVFP4 / bf16 input x bf16 /
fp16 output x ``output=`` absent or given; weights packed as int64 (eight FP4 values an element, as 0.7.x
engines pass them); the refusals of an ``output`` with a row too many or of fp32, ``min_latency_mode=True``
and, where the release has ``backend``, an unknown one; ``tune_max_num_tokens=16``.

:func:`stubs`: ``_moe.py`` beside this file (the JIT module generators, the autotuner, ``torch.cuda.device``),
and the kernel module's ``init`` returns the recorder, so that ``run_moe`` is the recorded launch.
"""

import contextlib

FUNCTION = "cutlass_fused_moe"
#: the wrapper's outputs, in order (named in the fake check's messages)
OUTPUTS = ("output", "num_active_experts_per_node", "experts_to_token_score", "active_expert_global_ids")
M_GRID = (0, 1, 8, 127, 129)


def _moe():
    """``_moe.py`` beside this file (``fp4patch.probes.oracle.load_grid`` gives ``sibling``)."""
    return sibling("_moe")  # noqa: F821


def cases(params, release):
    """The cases for a release whose wrapper takes ``params`` (``release``: no data is read for the outputs)."""
    moe = _moe()
    out = []

    def add(name, m, **kw):
        out.append({"name": name, "args": [], "kwargs": moe.cutlass_kwargs(m, **kw)})

    for m in M_GRID:
        for act in ("nvfp4", "bf16"):
            for out_dtype in ("bfloat16", "float16"):
                for output in (None, "given"):
                    add(f"M={m} {act} -> {out_dtype} output={output or 'none'}", m, act=act, out_dtype=out_dtype, output=output)
        add(f"M={m} nvfp4 int64-packed weights", m, weights="int64")
    for output in ("bad_rows", "bad_dtype"):
        add(f"M=8 output={output}", 8, output=output)
    add("M=8 min_latency_mode", 8, min_latency_mode=True)
    add("M=8 tune_max_num_tokens=16", 8, tune_max_num_tokens=16)
    if "backend" in params:
        add("M=8 backend=cutlass", 8, backend="cutlass")
        add("M=8 backend=bogus", 8, backend="bogus")
    return out


@contextlib.contextmanager
def stubs(oracle, recorder, flashinfer):
    """The MoE grids' shared stand-ins (``_moe.py``) for ``flashinfer.fused_moe.core``; ``init`` gives the runner."""
    import inspect
    import sys

    core = sys.modules[inspect.unwrap(flashinfer.cutlass_fused_moe).__module__]
    with _moe().moe_stubs(oracle, recorder, core, returns={"init": lambda *a, **k: recorder}):
        yield
