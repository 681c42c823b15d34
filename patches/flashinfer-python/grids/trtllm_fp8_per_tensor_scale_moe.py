"""Case grid of ``flashinfer.trtllm_fp8_per_tensor_scale_moe`` for fp4patch's fake check (format: docs/spec-format.md, "Case grids").

The wrapper (``flashinfer/fused_moe/core.py``, 0.6.0 - 0.7.4) hands its arguments to the inner op
``trtllm_fp8_per_tensor_scale_moe_op``, which launches ``moe_op.trtllm_fp8_per_tensor_scale_moe``. As for
the block-scale wrapper (``trtllm_fp8_block_scale_moe.py`` beside this file, whose grid this one is):
before 0.6.5 the C++ launcher allocates and returns the output, and every ``do_finalize=False`` output
comes from the launcher (``kernel_outputs``); from 0.6.5 the finalized ``output`` is the wrapper's own
buffer (or the caller's, checked by ``check_shape_dtype_device`` from 0.6.14).

Cases: M in {0, 1, 8, 127, 129} x ``do_finalize`` (where it exists) x FP8 / bf16 activations x float32 /
bf16 routing logits x ``output=`` absent or given (where it exists); the ``output`` refusals;
``tune_max_num_tokens=16``.
"""

import contextlib

FUNCTION = "trtllm_fp8_per_tensor_scale_moe"
OUTPUTS = ("output", "expert_weights", "expanded_idx_to_permuted_idx")
DYNAMIC_OUTPUT_SIZES = True
M_GRID = (0, 1, 8, 127, 129)


def _block():
    """``trtllm_fp8_block_scale_moe.py`` beside this file (``fp4patch.probes.oracle.load_grid`` gives ``sibling``)."""
    return sibling("trtllm_fp8_block_scale_moe")  # noqa: F821


def cases(params, release):
    """The cases for a release whose wrapper takes ``params`` (see the module docstring)."""
    return _block().fp8_cases(params, False, ("fp8", "bf16"))


@contextlib.contextmanager
def stubs(oracle, recorder, flashinfer):
    """The MoE grids' shared stand-ins (``_moe.py``) for ``flashinfer.fused_moe.core``."""
    import inspect
    import sys

    core = sys.modules[inspect.unwrap(flashinfer.trtllm_fp8_per_tensor_scale_moe).__module__]
    with sibling("_moe").moe_stubs(oracle, recorder, core):  # noqa: F821
        yield
