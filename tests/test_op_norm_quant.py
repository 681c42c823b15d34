"""``rmsnorm_quant`` and ``fused_add_rmsnorm_quant`` (FP8-out RMSNorm, issue 19) as fp4patch custom ops, on CPU.

Specs ``rmsnorm-quant-fullgraph`` / ``fused-add-rmsnorm-quant-fullgraph`` (op sources
``patches/flashinfer-python/ops/<function>.py``, grids ``grids/<function>.py``), checked on the real wheels of
the first release that exports the functions (0.6.7) and of 0.7.4, with the default specs applied:

* one graph under ``torch.compile(fullgraph=True)`` on fake CUDA tensors, one fp4patch op node, no graph break;
  the tensors returned are the caller's ``out`` (and ``residual``), shaped and typed as given; a float ``scale``
  (the wrapper's deprecated form) compiles the same way;
* the token dimension marked dynamic (also under ``backed_size_oblivious``), unbacked, or dynamic through
  AOTAutograd (the op's mutations functionalized, as Inductor takes them): one graph and one frame over several
  token counts, the token size a symbol in the traced graph (``tests/norm_quant_child.py``);
* the product's fake check (``fp4patch.checks.fake_check.run_fake_check``: the fake against the wrapper on CPU over
  the grid, M in {0, 1, 8, 127, 129}) passes every case;
* the op's eager body (the custom op called on CPU tensors, the JIT module replaced by the oracle's recorder)
  runs the real wrapper, which launches its kernel on the caller's tensors, a float ``scale`` made a tensor;
* on 0.6.0 (the functions exist in ``flashinfer/norm.py`` but are not exported) the specs say ``not-needed``
  with their reason.
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

FUNCTIONS = ["rmsnorm_quant", "fused_add_rmsnorm_quant"]
VERSIONS = ["0.6.7", "0.7.4"]
CHILD = REPO / "tests" / "norm_quant_child.py"
MARK = "FP4PATCH-NORM-RESULT "
HIDDEN = 256
#: token counts per kind of symbolic M (a backed size is specialised at 0/1 by torch itself, except under
#: backed_size_oblivious; an unbacked one covers 0 and 1 too)
TOKEN_COUNTS = {"backed": [8, 127, 129, 300], "oblivious": [8, 1, 127, 129, 300], "unbacked": [0, 1, 8, 127, 129, 300], "aot": [8, 129]}
#: what each function returns in the test's caller: the tensors it writes into (dtype as the caller made them)
WRITTEN = {"rmsnorm_quant": ["torch.float8_e4m3fn"], "fused_add_rmsnorm_quant": ["torch.float8_e4m3fn", "torch.bfloat16"]}

_results: dict[str, dict] = {}


@pytest.fixture
def child_result(tmp_path_factory):
    """Call with a version: the child's result on the default-applied copy of that release."""

    def get(version: str) -> dict:
        if version not in _results:
            site = applied_site(version, tmp_path_factory)
            params = {"scan_probe": str(REPO / "fp4patch" / "probes" / "scan_probe.py"), "hidden": HIDDEN, "runs": TOKEN_COUNTS}
            _results[version] = child_json(site, CHILD, params, mark=MARK, timeout=600)
        return _results[version]

    return get


def _op(function: str, ops: list[str]) -> bool:
    return len(ops) == 1 and re.fullmatch(rf"fp4patch::{function}_[0-9a-f]{{8}}", ops[0]) is not None


@pytest.mark.parametrize("version", VERSIONS)
def test_patched_call_is_one_graph_with_one_op_node(child_result, version: str) -> None:
    graphs = child_result(version)["graph"]
    assert sorted({r["function"] for r in graphs}) == sorted(FUNCTIONS) and len(graphs) == 4
    for r in graphs:
        where = (version, r["function"], r["scale"])
        assert "error" not in r, (where, r["error"], r.get("tb"))
        assert r["graphs"] == 1 and r["breaks"] == 0 and _op(r["function"], r["ops"]), (where, r)
        assert all(r["returned_callers"]), where  # the caller's own out (and residual), written in place
        assert r["outputs"] == [[[8, HIDDEN], [HIDDEN, 1], dtype] for dtype in WRITTEN[r["function"]]], where


@pytest.mark.parametrize("version", VERSIONS)
def test_patched_compiles_once_over_token_counts(child_result, version: str) -> None:
    runs = child_result(version)["dynamic"]
    assert {(r["function"], r["kind"]) for r in runs} == {(f, k) for f in FUNCTIONS for k in TOKEN_COUNTS}
    for r in runs:
        where = (version, r["function"], r["kind"])
        assert "error" not in r, (where, r["error"], r.get("tb"))
        assert r["graphs"] == 1 and r["frames"] == 1 and _op(r["function"], r["ops"]), (where, r["graphs"], r["frames"], r["ops"])
        (token,) = [v[0][0] for k, v in r["inputs"].items() if k.endswith("_input_")]
        assert isinstance(token, str) and re.fullmatch(r"sym:[su]\d+", token), (where, r["inputs"])
        assert token.startswith("sym:u") == (r["kind"] == "unbacked"), (where, token)
        assert [[o[0] for o in call] for call in r["outputs"]] == [[[m, HIDDEN]] * len(WRITTEN[r["function"]]) for m in r["token_counts"]], where
        assert all([o[2] for o in call] == WRITTEN[r["function"]] for call in r["outputs"]), where


@pytest.mark.parametrize("version", VERSIONS)
def test_fake_check_passes(version: str, tmp_path_factory) -> None:
    site = applied_site(version, tmp_path_factory)
    requests = [op_grids.request(f, version) for f in FUNCTIONS]
    results = run_fake_check(from_site_packages(site), site, requests)
    for request in requests:
        r = results[request.function]
        grid = op_grids.grid_module(request.grid).cases(frozenset(request.params), request.release)
        assert r.ok and r.cases == len(grid) and r.compared == r.cases and not r.failures, f"{version} {request.function}: {r}"
        # M in {0, 1, 8, 127, 129} and the refused scale shapes are among the compared cases
        names = {c["name"] for c in grid}
        assert {f"M={m} bf16 -> e4m3" for m in (0, 1, 8, 127, 129)} <= names and "scale of shape (2,)" in names


OP_BODY_CHILD = r"""
import importlib.util, json, sys
import torch
P = json.loads(sys.argv[1])
spec = importlib.util.spec_from_file_location("_oracle", P["oracle"])
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)
out = {}
with oracle.device_stubs(), oracle.jit_modules_replaced() as kernels:
    import flashinfer.norm as norm
    for function, names in P["functions"].items():
        assert getattr(norm, "_fp4patch_%s_ready" % function)()
        (name,) = [n for n in dir(torch.ops.fp4patch) if n.startswith(function + "_")]
        op = getattr(torch.ops.fp4patch, name).default
        for scale in ("tensor", 0.5):
            kw = {n: torch.zeros((8, 64), dtype=torch.float8_e4m3fn if n == "out" else torch.bfloat16) for n in names}
            kw["weight"] = torch.zeros((64,), dtype=torch.bfloat16)
            kw["scale"] = torch.ones((1,), dtype=torch.float32) if scale == "tensor" else scale
            before = len(kernels.calls)
            if scale == "tensor":
                result = op(**kw)
            else:  # the redirect's entry makes the tensor; the op then runs eagerly
                entry = getattr(norm, "_fp4patch_%s_entry" % function)
                result = entry(**kw)
            calls = kernels.calls[before:]
            kernel, args, _ = calls[-1]
            out["%s %s" % (function, scale)] = {
                "result": repr(result), "kernels": [c[0] for c in calls],
                "same": [any(a is kw[n] for a in args) for n in names],
                "scale": [list(a.shape) for a in args if isinstance(a, torch.Tensor) and a.dtype == torch.float32],
            }
print("FP4PATCH-OPBODY " + json.dumps(out))
"""


@pytest.mark.parametrize("version", VERSIONS)
def test_op_body_runs_the_wrapper_on_the_callers_tensors(version: str, tmp_path_factory) -> None:
    site = applied_site(version, tmp_path_factory)
    names = {"rmsnorm_quant": ["out", "input"], "fused_add_rmsnorm_quant": ["out", "input", "residual"]}
    params = {"oracle": str(REPO / "fp4patch" / "probes" / "oracle.py"), "functions": names}
    result = child_json(site, OP_BODY_CHILD, params, mark="FP4PATCH-OPBODY ", timeout=600)
    assert len(result) == 4
    for key, r in result.items():
        function = key.split()[0]
        assert r["result"] == "None" and r["kernels"] == [function], (version, key, r)
        assert all(r["same"]) and r["scale"] == [[1]], (version, key, r)


def test_not_public_before_0_6_7_is_not_needed(tmp_path_factory) -> None:
    site = release_site("0.6.0", tmp_path_factory, sources_only=True)
    states = {s["id"]: s for s in json.loads(run_cli("status", "--site-packages", str(site), "--json", check=True).stdout)["specs"]}
    for function in FUNCTIONS:
        spec = states[op_grids.spec_id(function)]
        assert spec["state"] == "not-needed" and "not public before 0.6.7" in spec["detail"], spec
