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


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


P = json.loads(sys.argv[1])
import torch

load("_scan_probe", P["probe"]).install_device_stubs(torch)
import flashinfer  # noqa: E402

example = load("nvfp4_decoder_layer", P["example"])
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

H, I, E, TOP_K = 1024, 512, 8, 2
graphs = []


def record(gm, example_inputs):
    graphs.append(gm)
    return gm.forward


error = None
with FakeTensorMode(allow_non_fake_inputs=True):
    weights = {}
    for name, (shape, dtype) in example.weight_shapes(H, I, E).items():
        weights[name] = torch.empty(shape, dtype=torch.uint8 if dtype == torch.float8_e4m3fn else dtype, device="cuda").view(dtype)
    layer = example.NVFP4DecoderLayer(weights, H, I, E, TOP_K)
    x = torch.empty(8, H, dtype=torch.bfloat16, device="cuda")
    try:
        out = torch.compile(layer, fullgraph=True, backend=record)(x)
        shape = list(out.shape)
    except Exception as exc:
        error = "%s: %s" % (type(exc).__name__, (str(exc).strip().splitlines() or [""])[0])
        shape = None
ops = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function" and str(n.target).startswith("fp4patch.")]
print("MARK" + json.dumps({"graphs": len(graphs), "ops": ops, "error": error, "shape": shape}))
""".replace("MARK", MARK)


def _compile(site: Path) -> dict:
    params = {"probe": str(REPO / "fp4patch" / "scan_probe.py"), "example": str(REPO / "examples" / "nvfp4_decoder_layer.py")}
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
