"""``examples/nvfp4_decoder_layer.py`` compiles with ``fullgraph=True`` to exactly one graph once patched.

The layer calls ``fp4_quantize``, ``mm_fp4`` and ``trtllm_fp4_block_scale_moe`` as serving engines do.
It is compiled on CPU, on fake CUDA tensors with the device queries stubbed (the scan probe's stubs),
in a fresh interpreter per FlashInfer copy, for the real 0.6.0 and 0.7.4 wheels.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from .conftest import applied_site, release_site
from .test_trace_fullgraph import _child

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

REPO = Path(__file__).resolve().parent.parent
MARK = "FP4PATCH-CHILD-RESULT "

CHILD = r"""
import importlib.util, json, sys

P = json.loads(sys.argv[1])
spec = importlib.util.spec_from_file_location("nvfp4_decoder_layer", P["example"])
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
print("MARK" + json.dumps(example.compile_on_fake_cuda()))
""".replace("MARK", MARK)


def _compile(site: Path) -> dict:
    params = {"example": str(REPO / "examples" / "nvfp4_decoder_layer.py")}
    return _child(site, CHILD, params)


@pytest.mark.parametrize("version", ["0.6.0", "0.7.4"])
def test_decoder_layer_is_one_graph_after_apply(tmp_path_factory, version: str) -> None:
    unpatched = _compile(release_site(version, tmp_path_factory, bytecode=True))
    assert unpatched["error"] and unpatched["error"].startswith("Unsupported"), unpatched

    site = applied_site(version, tmp_path_factory)
    patched = _compile(site)
    assert patched["error"] is None, patched
    assert patched["graphs"] == 1 and patched["shape"] == [8, 1024], patched
    kinds = [re.sub(r"_[0-9a-f]{8}\.default$", "", op) for op in patched["ops"]]
    assert kinds == [
        "fp4patch.fp4_quantize", "fp4patch.mm_fp4", "fp4patch.fp4_quantize", "fp4patch.mm_fp4",
        "fp4patch.fp4_quantize", "fp4patch.trtllm_fp4_block_scale_moe",
    ], patched["ops"]


def test_running_the_example_on_a_cpu_machine_says_so_and_shows_the_op_nodes(tmp_path_factory) -> None:
    """`python examples/nvfp4_decoder_layer.py`, as the README says, on this CPU-only machine."""
    import os

    from .python_forkserver import run_python

    site = applied_site("0.7.4", tmp_path_factory)
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = run_python([str(REPO / "examples" / "nvfp4_decoder_layer.py")], env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.startswith("no CUDA device: compiled on CPU with fake CUDA tensors (no kernel runs)"), done.stdout
    assert "1 graph, output [8, 1024]; fp4patch op nodes:" in done.stdout and "fp4patch.trtllm_fp4_block_scale_moe_" in done.stdout
