"""``nvfp4_quantize`` (per token and per tensor) as the fp4patch custom op of ``nvfp4-quantize-fullgraph``, on CPU.

Op source ``patches/flashinfer-python/ops/nvfp4_quantize.py``, grid ``grids/nvfp4_quantize.py``; checked on the real
wheels of the first release with ``per_token_activation`` (0.6.11) and of 0.7.4, with the default specs applied
(``fp4-quantize-fullgraph`` too, which keeps ``nvfp4_quantize`` among its callers):

* the engines' call forms (vLLM's ``nvfp4_quantize(h, global_scale, sfLayout=SfLayout.layout_linear,
  per_token_activation=True)``; SGLang's with the float ``1 / (448 * 6)`` and, 0.6.13+, ``backend="cute-dsl"``; the
  explicit ``backend="cuda"`` 128x4 form; the default per-tensor call and a linear per-tensor one) each compile to one
  graph with one ``fp4patch::nvfp4_quantize_<8 hex>`` node on fake CUDA tensors, and return three (per token) or two
  outputs with the fake's shape, stride and dtype (x_q ``[M, K/2]``, the scale factors in the layout, the float32
  per-token scales ``[M]``), computed here from the layout rules;
* the calls fp4patch refuses (``do_shuffle=True``, per-tensor CuTe-DSL; on 0.7.4 ``backend="cake"`` and
  ``batch_invariant=True``) fail with fp4patch's one-line message, naming the call and the release, as the first line;
* the token dimension marked dynamic or unbacked (M = 0 included): one graph and one frame over several token counts,
  the token size a symbol (``tests/nvfp4_quantize_child.py``);
* the product's fake check passes every case of the grid;
* the op's eager body runs the real wrapper with the caller's scale (a float stays the same float);
* the default spec set applies and reverts byte-identically, and before 0.6.11 the spec is not-needed.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from fp4patch.target.environment import from_site_packages
from fp4patch.checks.fake_check import run_fake_check

from . import op_grids
from .conftest import REPO, applied_site, release_site, run_cli
from .python_forkserver import child_json

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

VERSIONS = ["0.6.11", "0.7.4"]
SPEC = "nvfp4-quantize-fullgraph"
CHILD = REPO / "tests" / "nvfp4_quantize_child.py"
MARK = "FP4PATCH-NVFP4-RESULT "
HIDDEN = 7168  # 448 scale columns (a multiple of 4); M = 8 tokens
M = 8
PER_TOKEN_SCALE = 1.0 / (448.0 * 6.0)
VLLM = {"scale": "tensor", "sfLayout": "layout_linear", "per_token_activation": True}
CALLS = {
    "vllm per-token": VLLM,
    "sglang per-token float": {**VLLM, "scale": PER_TOKEN_SCALE},
    "per-token cuda 128x4": {"scale": "tensor", "sfLayout": "layout_128x4", "do_shuffle": False, "enable_pdl": None, "backend": "cuda",
                             "per_token_activation": True},
    "per-token 8x4": {"scale": "tensor", "sfLayout": "layout_8x4", "per_token_activation": True},
    "default": {"scale": "tensor"},
    "per-tensor linear": {"scale": "tensor", "sfLayout": "layout_linear", "do_shuffle": False, "sf_vec_size": 16, "enable_pdl": False},
}
CUTE_DSL = {"sglang per-token cute-dsl": {**VLLM, "backend": "cute-dsl"}}
REFUSALS = {
    "do_shuffle": ("nvfp4_quantize(per_token_activation=True, do_shuffle=True)", {**VLLM, "sfLayout": "layout_128x4", "do_shuffle": True}),
    "per-tensor cute-dsl": ("nvfp4_quantize(backend='cute-dsl')", {"scale": "tensor", "backend": "cute-dsl"}),
}
REFUSALS_074 = {
    "cake": ("nvfp4_quantize(per_token_activation=True, backend='cake')", {**VLLM, "sfLayout": "layout_128x4", "backend": "cake"}),
    "batch_invariant": ("nvfp4_quantize(batch_invariant=True)", {"scale": "tensor", "batch_invariant": True}),
}
RUNS = {
    "backed": {"call": VLLM, "token_counts": [8, 127, 129, 300]},
    "unbacked": {"call": VLLM, "token_counts": [0, 1, 8, 127, 129, 300]},
    "unbacked 128x4": {"call": CALLS["per-token cuda 128x4"], "token_counts": [0, 1, 129, 300]},
    "unbacked default": {"call": CALLS["default"], "token_counts": [0, 1, 129, 300]},
}

_results: dict[str, dict] = {}


def _round_up(x: int, y: int) -> int:
    return (x + y - 1) // y * y


def expected(call: dict, m: int) -> list:
    """The outputs' [shape, stride, dtype] by the layout rules: x_q [M, K/2]; sf linear [M, K/16], 128x4 / 8x4 rows
    padded to 128 / 8 and columns to 4; per token, the float32 scales [M]."""
    layout = call.get("sfLayout", "layout_128x4")
    cols = HIDDEN // 16
    rows = {"layout_linear": m, "layout_128x4": _round_up(m, 128), "layout_8x4": _round_up(m, 8)}[layout]
    cols = cols if layout == "layout_linear" else _round_up(cols, 4)
    out = [[[m, HIDDEN // 2], [HIDDEN // 2, 1], "torch.uint8"], [[rows, cols], [cols, 1], "torch.uint8"]]
    if call.get("per_token_activation"):
        out.append([[m], [1], "torch.float32"])
    return out


@pytest.fixture
def child_result(tmp_path_factory):
    """Call with a version: the child's result on the default-applied copy of that release."""

    def get(version: str) -> dict:
        if version not in _results:
            site = applied_site(version, tmp_path_factory)
            calls = {**CALLS, **CUTE_DSL}
            refusals = {n: kw for n, (_, kw) in {**REFUSALS, **(REFUSALS_074 if version == "0.7.4" else {})}.items()}
            params = {"scan_probe": str(REPO / "fp4patch" / "probes" / "scan_probe.py"), "hidden": HIDDEN, "calls": calls, "refusals": refusals, "runs": RUNS}
            _results[version] = child_json(site, CHILD, params, mark=MARK, timeout=900)
        return _results[version]

    return get


def _op(ops: list[str]) -> bool:
    return len(ops) == 1 and re.fullmatch(r"fp4patch::nvfp4_quantize_[0-9a-f]{8}", ops[0]) is not None


@pytest.mark.parametrize("version", VERSIONS)
def test_engine_calls_are_one_graph_with_one_op_node_and_the_fakes_outputs(child_result, version: str) -> None:
    graphs = {r["name"]: r for r in child_result(version)["graph"]}
    assert set(graphs) == set(CALLS) | set(CUTE_DSL)
    for name, call in CALLS.items():
        r = graphs[name]
        assert "error" not in r, (version, name, r["error"], r.get("tb"))
        assert r["graphs"] == 1 and r["breaks"] == 0 and _op(r["ops"]), (version, name, r)
        assert r["outputs"] == expected(call, M), (version, name, r["outputs"])
    (name,) = CUTE_DSL
    r = graphs[name]
    if version == "0.6.11":  # the per-token CuTe-DSL driver is 0.6.13+: the wrapper's ValueError (raised by the fake) at trace time
        assert r["graphs"] == 0 and "Per-token NVFP4 quantization only supports backend='cuda'" in r["text"], (version, r)
    else:
        assert "error" not in r and r["graphs"] == 1 and _op(r["ops"]), (version, r)
        assert r["outputs"] == expected(CUTE_DSL[name], M), (version, r["outputs"])


@pytest.mark.parametrize("version", VERSIONS)
def test_refusals_first_line_is_fp4patchs(child_result, version: str) -> None:
    refusals = {r["name"]: r for r in child_result(version)["refusals"]}
    wanted = {**REFUSALS, **(REFUSALS_074 if version == "0.7.4" else {})}
    assert set(refusals) == set(wanted)
    for name, (call, _) in wanted.items():
        first = refusals[name].get("error", "")
        assert first.startswith(f"Unsupported: fp4patch: {call} is not supported under torch.compile on FlashInfer {version} ("), (version, name, first)


@pytest.mark.parametrize("version", VERSIONS)
def test_compiles_once_over_token_counts(child_result, version: str) -> None:
    runs = {r["kind"]: r for r in child_result(version)["dynamic"]}
    assert set(runs) == set(RUNS)
    for kind, run in RUNS.items():
        r = runs[kind]
        assert "error" not in r, (version, kind, r["error"], r.get("tb"))
        assert r["graphs"] == 1 and r["frames"] == 1 and _op(r["ops"]), (version, kind, r["graphs"], r["frames"], r["ops"])
        (token,) = [i[0][0] for i in r["inputs"] if i[2] == "torch.bfloat16"]  # the input h [M, K]: M a symbol
        assert isinstance(token, str) and re.fullmatch(r"sym:[su]\d+", token) and token.startswith("sym:u") == kind.startswith("unbacked"), (version, kind, r["inputs"])
        assert r["outputs"] == [expected(run["call"], m) for m in run["token_counts"]], (version, kind)


@pytest.mark.parametrize("version", VERSIONS)
def test_fake_check_passes(version: str, tmp_path_factory) -> None:
    site = applied_site(version, tmp_path_factory)
    request = op_grids.request("nvfp4_quantize", version)
    r = run_fake_check(from_site_packages(site), site, [request])["nvfp4_quantize"]
    grid = op_grids.grid_module(request.grid).cases(frozenset(request.params), request.release)
    assert r.ok and r.cases == len(grid) and r.compared == r.cases and not r.failures, f"{version}: {r}"
    names = {c["name"] for c in grid}
    for m in (0, 1, 8, 127, 129):
        for layout in ("layout_128x4", "layout_8x4", "layout_linear"):
            assert {f"per-token cuda M={m} K=64 {layout}", f"per-tensor cuda M={m} K=64 {layout}"} <= names


OP_BODY_CHILD = r"""
import importlib.util, json, sys
import torch
P = json.loads(sys.argv[1])
spec = importlib.util.spec_from_file_location("_oracle", P["oracle"])
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)
out = {}
with oracle.device_stubs(), oracle.jit_modules_replaced() as kernels:
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # CPU tensors stand in for the CUDA ones
    import flashinfer
    import flashinfer.quantization.fp4_quantization as module
    module.get_compute_capability = lambda device: (10, 0)
    assert module._fp4patch_nvfp4_quantize_ready()
    entry = module._fp4patch_nvfp4_quantize_entry  # what the redirect calls while compiling: the op, run eagerly here
    linear = flashinfer.SfLayout.layout_linear
    for name, scale, per_token in (("float", P["scale"], True), ("tensor", 0.25, True), ("per-tensor", 0.25, False)):
        before = len(kernels.calls)
        s = scale if name == "float" else torch.full((1,), scale)
        result = entry(a=torch.zeros((8, 64), dtype=torch.bfloat16), a_global_sf=s, sfLayout=linear, per_token_activation=per_token)
        calls = kernels.calls[before:]
        out[name] = {"kernels": [c[0] for c in calls], "floats": [a for c in calls for a in c[1] if isinstance(a, float)],
                     "outputs": [[list(t.shape), str(t.dtype)] for t in result]}
print("FP4PATCH-OPBODY " + json.dumps(out))
"""


@pytest.mark.parametrize("version", VERSIONS)
def test_op_body_runs_the_wrapper_with_the_callers_scale(version: str, tmp_path_factory) -> None:
    """The op's eager body (the custom op on CPU tensors, the JIT module replaced by the oracle's recorder) runs the
    real wrapper: a float scale crossed the schema as a 0-d float64 tensor and reaches the kernel as the caller's
    float, a tensor scale as its value (the wrapper's own .item()); per tensor, the two outputs of fp4_quantize."""
    site = applied_site(version, tmp_path_factory)
    params = {"oracle": str(REPO / "fp4patch" / "probes" / "oracle.py"), "scale": PER_TOKEN_SCALE}
    result = child_json(site, OP_BODY_CHILD, params, mark="FP4PATCH-OPBODY ", timeout=600)
    for name, scale in (("float", PER_TOKEN_SCALE), ("tensor", 0.25)):
        r = result[name]
        assert r["kernels"] == ["nvfp4_quant_and_per_token_scale"] and r["floats"] == [scale], (version, name, r)
        assert r["outputs"] == [[[M, 32], "torch.uint8"], [[M, 4], "torch.uint8"], [[M], "torch.float32"]], (version, name, r)
    r = result["per-tensor"]
    assert r["kernels"] and "nvfp4_quant_and_per_token_scale" not in r["kernels"], (version, r)
    assert r["outputs"] == [[[M, 32], "torch.uint8"], [[M, 4], "torch.uint8"]], (version, r)


@pytest.mark.parametrize("version", VERSIONS)
def test_default_specs_apply_and_revert_byte_identically(linked_site, tmp_path_factory, version: str) -> None:
    site = linked_site(version)
    relative = "flashinfer/quantization/fp4_quantization.py"
    pristine = (release_site(version, tmp_path_factory, sources_only=True) / relative).read_bytes()
    run_cli("apply", "--site-packages", str(site), check=True)
    states = {s["id"]: s for s in json.loads(run_cli("status", "--site-packages", str(site), "--json", check=True).stdout)["specs"]}
    assert states[SPEC]["state"] == "applied" and states["fp4-quantize-fullgraph"]["state"] == "applied", (states[SPEC], states["fp4-quantize-fullgraph"])
    patched = (site / relative).read_bytes()
    assert patched != pristine and patched.count(b"_fp4patch_nvfp4_quantize_entry(") == 1
    run_cli("revert", "--site-packages", str(site), check=True)
    assert (site / relative).read_bytes() == pristine


def test_not_needed_before_per_token_activation(tmp_path_factory) -> None:
    site = release_site("0.6.10", tmp_path_factory, sources_only=True)
    states = {s["id"]: s for s in json.loads(run_cli("status", "--site-packages", str(site), "--json", check=True).stdout)["specs"]}
    spec = states[SPEC]
    assert spec["state"] == "not-needed" and "no per_token_activation before 0.6.11" in spec["detail"], spec
