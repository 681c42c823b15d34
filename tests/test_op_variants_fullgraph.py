"""The call forms engines use, compiled with ``fullgraph=True`` after the default ``apply`` (issue 19).

Each call runs in a child interpreter importing a real, patched FlashInfer release, on fake CUDA tensors
(``FakeTensorMode``, the device queries stubbed: :mod:`fp4patch.probes.oracle`), through ``torch.compile(fullgraph=True)``
with a backend that records the graphs. A call the fakes mirror must give one graph holding one fp4patch op
and outputs of the shape, stride and dtype the release's own code allocates (written out below from its
wrapper); a call a fake refuses must fail with fp4patch's own message as the first line of what
``torch.compile`` raises (``fp4patch: ...``, naming the value and the release), not inside Dynamo's
explanation.

* ``mxfp8_quantize(x, is_sf_swizzled_layout=True, alignment=32, backend="cute-dsl",
  sf_swizzle_layout=SfLayout.layout_128x4)``: SGLang's call on SM100. 0.7.4's CuTe-DSL driver
  (``kernels/mxfp8_quantize.py:mxfp8_quantize_cute_dsl``) flattens the input to 2-D: x_q float8_e4m3fn
  ``[m, round_up(K, 32)]``, sf uint8 ``[round_up(m, 128) * round_up(K // 32, 4)]``; the same on 0.6.18.post1
  (every release with the backend: tests/test_op_mxfp8_cute_dsl.py).
* ``mxfp8_quantize(batch_invariant=True)`` and ``fp4_quantize(batch_invariant=True)`` (0.7.4): refused, first line.
"""

from __future__ import annotations

import importlib.util

import pytest

from .conftest import REPO, applied_site
from .python_forkserver import child_json

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

MARK = "FP4PATCH-VARIANTS-RESULT "

# Each call: the tensors ({"t": shape, "dtype": name}) and the keyword arguments ({"enum": "SfLayout.x"}
# is a member of the wrapper module's class), the function of flashinfer called.
CHILD = r"""
import inspect, json, re, sys, warnings
P = json.loads(sys.argv[1])
sys.path.insert(0, P["repo"])
import torch
import torch._dynamo
from fp4patch.probes import oracle as ko

warnings.simplefilter("ignore")
with ko.device_stubs():
    import flashinfer
out = {}
with ko.device_stubs(cuda_available=False):
    for name, (fn, args, kwargs) in P["calls"].items():
        public = getattr(flashinfer, fn)
        mod = sys.modules[inspect.unwrap(public).__module__]

        def build(v):
            if isinstance(v, dict) and "t" in v:
                return ko.cuda_tensor(tuple(v["t"]), getattr(torch, v["dtype"]))
            if isinstance(v, dict) and "enum" in v:
                cls, member = v["enum"].split(".")
                return getattr(getattr(mod, cls), member)
            return v

        kw = {k: build(v) for k, v in kwargs.items()}
        torch._dynamo.reset()
        graphs = []

        def record(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        def f(*tensors, public=public, kw=kw):
            return public(*tensors, **kw)

        res = {"error": None}
        try:
            with ko.fake_mode():
                result = torch.compile(f, fullgraph=True, backend=record)(*[build(a) for a in args])
            res["outputs"] = [[list(t.shape), list(t.stride()), str(t.dtype)] for t in result]
        except Exception as e:
            lines = str(e).strip().splitlines()
            res["error"] = lines[0] if lines else ""
            res["type"] = type(e).__name__
        res["graphs"] = len(graphs)
        res["ops"] = [str(n.target) for g in graphs for n in g.graph.nodes
                      if n.op == "call_function" and str(n.target).startswith(("fp4patch.", "flashinfer."))]
        out[name] = res
print(__MARK__ + json.dumps(out))
""".replace("__MARK__", repr(MARK))


def T(*shape, dtype="bfloat16"):
    """A fake CUDA tensor as the child builds it."""
    return {"t": list(shape), "dtype": dtype}


SGLANG_MXFP8 = {"is_sf_swizzled_layout": True, "alignment": 32, "backend": "cute-dsl", "sf_swizzle_layout": {"enum": "SfLayout.layout_128x4"}}


def _compile(version: str, tmp_path_factory, calls: dict) -> dict:
    site = applied_site(version, tmp_path_factory)
    return child_json(site, CHILD, {"repo": str(REPO), "calls": calls}, mark=MARK, timeout=900)


def _one_op(result: dict, function: str) -> None:
    assert result["error"] is None, result
    assert result["graphs"] == 1, result
    assert len(result["ops"]) == 1 and result["ops"][0].startswith(f"fp4patch.{function}_"), result


def test_mxfp8_cute_dsl_traces_on_0_7_4_with_the_drivers_layout(tmp_path_factory) -> None:
    calls = {
        "sglang": ("mxfp8_quantize", [T(129, 7168)], SGLANG_MXFP8),
        "3-D 8x4": ("mxfp8_quantize", [T(2, 65, 128)], {"backend": "cute-dsl", "sf_swizzle_layout": {"enum": "SfLayout.layout_8x4"}}),
        "linear, K padded": ("mxfp8_quantize", [T(8, 96, dtype="float32")], {"backend": "cute-dsl", "alignment": 128, "is_sf_swizzled_layout": False}),
        "batch_invariant": ("mxfp8_quantize", [T(8, 128)], {"batch_invariant": True}),
        "fp4 batch_invariant": ("fp4_quantize", [T(8, 128), T(1, dtype="float32")], {"batch_invariant": True}),
    }
    got = _compile("0.7.4", tmp_path_factory, calls)
    _one_op(got["sglang"], "mxfp8_quantize")
    # x_q [m, round_up(7168, 32)]; sf round_up(129, 128) * round_up(7168 // 32, 4) = 256 * 224
    assert got["sglang"]["outputs"] == [[[129, 7168], [7168, 1], "torch.float8_e4m3fn"], [[256 * 224], [1], "torch.uint8"]]
    _one_op(got["3-D 8x4"], "mxfp8_quantize")
    # flattened to [130, 128] (the CUDA kernel keeps [2, 65, 128]); sf round_up(130, 8) * round_up(4, 4)
    assert got["3-D 8x4"]["outputs"] == [[[130, 128], [128, 1], "torch.float8_e4m3fn"], [[136 * 4], [1], "torch.uint8"]]
    _one_op(got["linear, K padded"], "mxfp8_quantize")
    assert got["linear, K padded"]["outputs"] == [[[8, 128], [128, 1], "torch.float8_e4m3fn"], [[8 * 128 // 32], [1], "torch.uint8"]]
    refused = got["batch_invariant"]
    assert refused["type"] == "Unsupported", refused
    assert refused["error"].startswith("fp4patch: mxfp8_quantize(batch_invariant=True) is not supported under torch.compile on FlashInfer 0.7.4 ("), refused
    refused = got["fp4 batch_invariant"]
    assert refused["type"] == "Unsupported", refused
    assert refused["error"].startswith("fp4patch: fp4_quantize(batch_invariant=True) is not supported under torch.compile on FlashInfer 0.7.4 ("), refused


@pytest.mark.eras
def test_mxfp8_cute_dsl_traces_on_0_6_18_post1(tmp_path_factory) -> None:
    """0.6.18.post1 (refused before issue 19's eras were mirrored): SGLang's call is one graph with the driver's layout."""
    got = _compile("0.6.18.post1", tmp_path_factory, {"sglang": ("mxfp8_quantize", [T(129, 7168)], SGLANG_MXFP8)})["sglang"]
    _one_op(got, "mxfp8_quantize")
    assert got["outputs"] == [[[129, 7168], [7168, 1], "torch.float8_e4m3fn"], [[256 * 224], [1], "torch.uint8"]]
