"""The weight-preparation helpers (issue 19): ``block_scale_interleave`` as an fp4patch custom op,
``e2m1_and_ufp8sf_scale_to_float`` declared not-needed (a host op), on the real 0.6.0 and 0.7.4 wheels.

Specs ``block-scale-interleave-fullgraph`` (op source ``patches/flashinfer-python/ops/block_scale_interleave.py``,
grid ``grids/block_scale_interleave.py``) and ``e2m1-and-ufp8sf-scale-to-float-fullgraph`` (declarations only):

* the product's fake check (the fake against the wrapper's own allocation on CPU, rows in {0, 1, 8, 127, 129})
  passes every case;
* the engines' call forms (``tests/weight_prep_child.py``: vLLM's / SGLang's MoE weight loading, one expert's
  permuted scales reshaped; vLLM's FlashInfer A2A prepare, ``nvfp4_block_scale_interleave`` on the received e4m3
  scales viewed uint8; a 3-D experts buffer; bfloat16; 0.7.4's ``out=``) compile as one graph with one fp4patch
  op node, the output the wrapper's flat ``experts * round_up(rows, 128) * round_up(cols, 4)`` (``out=``: the
  caller's own tensor); a bad ``out=`` and float32 scales fail with the wrapper's own message as the first line,
  still catchable as ``ValueError`` / ``AssertionError``;
* the row dimension marked dynamic or unbacked (0 and 1 included): one graph and one frame over several row counts;
* the op's eager body runs the real wrapper (JIT module replaced by the oracle's recorder, CPU tensors, the
  wrapper's capability query answered SM100), which launches its kernel into its own fresh buffer and returns it;
  with ``out=`` (0.7.4) ``entry`` copies that result into the caller's buffer and returns it;
* ``e2m1_and_ufp8sf_scale_to_float``: the wheel's code really allocates its output on the CPU and copies the
  inputs there (the declaration's reason), ``fp4patch status`` says ``not-needed`` and ``fp4patch scan`` reports
  it as not needed with that reason, counted apart from the functions that compile.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re

import pytest

from fp4patch.cli.render import scan_summary
from fp4patch.target.environment import from_site_packages
from fp4patch.checks.fake_check import run_fake_check
from fp4patch.probes.scan_probe import describe
from fp4patch.checks.trace import declare_not_needed

from . import op_grids
from .conftest import REPO, applied_site, release_site, run_cli
from .python_forkserver import child_json

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)")

VERSIONS = ["0.6.0", "0.7.4"]
CHILD = REPO / "tests" / "weight_prep_child.py"
MARK = "FP4PATCH-WEIGHTPREP-RESULT "
COLS = 448  # 7168 // 16: the block scales of one DeepSeek-V3 hidden row
E2M1_SPEC = "e2m1-and-ufp8sf-scale-to-float-fullgraph"


def _flat(rows: int, cols: int = COLS, experts: int = 1) -> int:
    """The wrapper's allocation: experts * round_up(rows, 128) * round_up(cols, 4) (``_compute_swizzled_layout_sf_size``)."""
    return experts * -(-rows // 128) * 128 * -(-cols // 4) * 4


def _one_op(r: dict) -> bool:
    return r["graphs"] == 1 and r["breaks"] == 0 and len(r["ops"]) == 1 and re.fullmatch(r"fp4patch::block_scale_interleave_[0-9a-f]{8}", r["ops"][0]) is not None


def _child(version: str, tmp_path_factory, calls: dict, runs: dict | None = None) -> dict:
    site = applied_site(version, tmp_path_factory)
    params = {"scan_probe": str(REPO / "fp4patch" / "probes" / "scan_probe.py"), "calls": calls, "runs": runs or {}}
    return child_json(site, CHILD, params, mark=MARK, timeout=600)


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("version", VERSIONS)
def test_fake_check_passes(version: str, tmp_path_factory) -> None:
    site = applied_site(version, tmp_path_factory)
    request = op_grids.request("block_scale_interleave", version)
    r = run_fake_check(from_site_packages(site), site, [request])["block_scale_interleave"]
    grid = op_grids.grid_module(request.grid).cases(frozenset(request.params), request.release)
    assert r.ok and r.cases == len(grid) and not r.failures, f"{version}: {r}"
    assert r.compared + r.skipped_kernel == r.cases and r.skipped_kernel == 2, r
    names = {c["name"] for c in grid}
    assert {f"M={m} uint8 [M, 448]" for m in (0, 1, 8, 127, 129)} <= names
    assert ("out= of the wrong size" in names) == (version == "0.7.4")  # out= from 0.7.2.post1


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("version", VERSIONS)
def test_engine_call_forms_are_one_graph(version: str, tmp_path_factory) -> None:
    calls = {
        "weight_load": {"form": "weight_load", "rows": 256},
        "a2a": {"form": "a2a"},
        "experts": {"form": "experts"},
        "bf16": {"form": "bf16"},
        "float32": {"form": "f32"},
    }
    if version == "0.7.4":
        calls.update({
            "out": {"form": "out"},
            "out of the wrong size": {"form": "out", "out_size": 129 * COLS},
            "out of the wrong dtype": {"form": "out", "out_dtype": "bfloat16"},
        })
    got = _child(version, tmp_path_factory, calls)["calls"]
    for name in ("weight_load", "a2a", "experts", "bf16"):
        assert "error" not in got[name] and _one_op(got[name]), (version, name, got[name])
    # one expert's [256, 448] scales come back flat and are reshaped [256, 448] (256 rows: no padding)
    assert got["weight_load"]["output"] == [[256, COLS], [COLS, 1], "torch.uint8"]
    # the A2A's [2, 129, 448] e4m3 scales viewed [258, 448] uint8: padded to 384 rows, viewed [-1, 448]
    assert got["a2a"]["output"] == [[_flat(258) // COLS, COLS], [COLS, 1], "torch.uint8"]
    assert got["experts"]["output"] == [[4, _flat(129)], [_flat(129), 1], "torch.uint8"]
    assert got["bf16"]["output"] == [[_flat(129)], [1], "torch.bfloat16"]  # the input's dtype from 0.6.0
    r = got["float32"]  # the wrapper's assertion, its message first
    assert r["is_assertion_error"] and r["graphs"] == 0 and r["error"] == "Input dtype must be uint8 or bfloat16, got torch.float32", r
    if version == "0.7.4":
        assert "error" not in got["out"] and _one_op(got["out"]), got["out"]
        assert got["out"]["is_out"] and got["out"]["output"] == [[_flat(129)], [1], "torch.uint8"], got["out"]
        for name, dtype in (("out of the wrong size", "torch.uint8"), ("out of the wrong dtype", "torch.uint8")):
            r = got[name]
            assert r["is_value_error"] and r["graphs"] == 0, (name, r)
            assert r["error"] == f"block_scale_interleave out must be a contiguous flat tensor of shape ({_flat(129)},), dtype {dtype}, on cuda:0", r


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("version", VERSIONS)
def test_compiles_once_over_row_counts(version: str, tmp_path_factory) -> None:
    runs = {"backed": [8, 127, 129, 300], "unbacked": [0, 1, 8, 127, 129, 300]}
    got = _child(version, tmp_path_factory, {}, runs)["dynamic"]
    assert [r["kind"] for r in got] == list(runs)
    for r in got:
        assert "error" not in r, (version, r["kind"], r["error"], r.get("tb"))
        assert r["graphs"] == 1 and r["frames"] == 1 and len(r["ops"]) == 1, (version, r)
        rows = r["input"][0][0]
        assert isinstance(rows, str) and rows.startswith("sym:u" if r["kind"] == "unbacked" else "sym:s"), r["input"]
        assert [o[0] for o in r["outputs"]] == [[_flat(m)] for m in r["row_counts"]], r["outputs"]


OP_BODY_CHILD = r"""
import importlib.util, inspect, json, sys
import torch
P = json.loads(sys.argv[1])
spec = importlib.util.spec_from_file_location("_oracle", P["oracle"])
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)
out = {}
with oracle.device_stubs(), oracle.jit_modules_replaced() as kernels:
    import flashinfer
    module = sys.modules[inspect.unwrap(flashinfer.block_scale_interleave).__module__]
    # CPU tensors: the wrapper's device query (flashinfer.utils.get_compute_capability) refuses a CPU device
    module.get_compute_capability = lambda device: (10, 0)
    assert module._fp4patch_block_scale_interleave_ready()
    (name,) = [n for n in dir(torch.ops.fp4patch) if n.startswith("block_scale_interleave_")]
    op = getattr(torch.ops.fp4patch, name).default
    s = torch.zeros((129, 448), dtype=torch.uint8)
    result = op(s)
    kernel, args, _ = kernels.calls[-1]
    out["op"] = {"kernels": [c[0] for c in kernels.calls], "shape": list(result.shape), "dtype": str(result.dtype),
                 "input_passed": args[0] is s, "result_is_kernel_output": args[1] is result}
    if "out" in inspect.signature(flashinfer.block_scale_interleave).parameters:
        buf = torch.empty((result.numel(),), dtype=torch.uint8)
        before = len(kernels.calls)
        returned = module._fp4patch_block_scale_interleave_entry(unswizzled_sf=s, out=buf)
        out["entry_out"] = {"kernels": [c[0] for c in kernels.calls[before:]], "is_out": returned is buf}
print("FP4PATCH-OPBODY " + json.dumps(out))
"""


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("version", VERSIONS)
def test_op_body_runs_the_wrapper(version: str, tmp_path_factory) -> None:
    site = applied_site(version, tmp_path_factory)
    got = child_json(site, OP_BODY_CHILD, {"oracle": str(REPO / "fp4patch" / "probes" / "oracle.py")}, mark="FP4PATCH-OPBODY ", timeout=600)
    r = got["op"]
    # the wrapper's own allocation (torch.empty: the recorder writes nothing into it) handed to the kernel
    assert r["kernels"] == ["block_scale_interleave_sm100"] and r["input_passed"] and r["result_is_kernel_output"], r
    assert r["shape"] == [_flat(129)] and r["dtype"] == "torch.uint8", r
    if version == "0.7.4":
        # out=: the op runs the wrapper's own allocating path, entry copies its result into the caller's buffer
        e = got["entry_out"]
        assert e["kernels"] == ["block_scale_interleave_sm100"] and e["is_out"], e
    else:
        assert "entry_out" not in got


# --------------------------------------------------------------------------- #
# e2m1_and_ufp8sf_scale_to_float: declared not-needed (a host op)
# --------------------------------------------------------------------------- #
def _inner_source(site, version: str) -> str:
    """The source of get_fp4_quantization_module's e2m1_and_ufp8sf_scale_to_float_sm100 in the wheel."""
    relative = "flashinfer/fp4_quantization.py" if version < "0.6.7" else "flashinfer/quantization/fp4_quantization.py"
    text = (site / relative).read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == "e2m1_and_ufp8sf_scale_to_float_sm100":
            return ast.get_source_segment(text, node)
    raise AssertionError(f"{version}: no e2m1_and_ufp8sf_scale_to_float_sm100 in {relative}")


@pytest.mark.parametrize("version", VERSIONS)
def test_e2m1_is_a_host_op_and_declared_not_needed(version: str, tmp_path_factory) -> None:
    site = release_site(version, tmp_path_factory, sources_only=True)
    inner = _inner_source(site, version)
    # the reason of the declaration, in the wheel's own code: a CPU output and host copies of the inputs
    assert 'device="cpu"' in inner and "e2m1_tensor.cpu()" in inner and "ufp8_scale_tensor.cpu()" in inner, inner
    states = {s["id"]: s for s in json.loads(run_cli("status", "--site-packages", str(site), "--json", check=True).stdout)["specs"]}
    spec = states[E2M1_SPEC]
    assert spec["state"] == "not-needed" and "host op" in spec["detail"] and "device sync" in spec["detail"], spec


def test_declared_results_are_counted_apart() -> None:
    results = [
        {"name": "block_scale_interleave", "spec": "block-scale-interleave-fullgraph", "status": "compiles", "passed": True, "ops": ["fp4patch::x"]},
        {"name": "e2m1_and_ufp8sf_scale_to_float", "spec": E2M1_SPEC, "status": "fails", "passed": False, "error": "Unsupported: ..."},
        {"name": "rmsnorm_quant", "spec": "rmsnorm-quant-fullgraph", "status": "not-present", "passed": False, "error": None},
    ]
    declared = declare_not_needed(results, "0.7.4")
    assert [r["status"] for r in declared] == ["compiles", "not-needed", "not-present"]
    assert declared[1]["scanned"] == "fails" and "host op" in declared[1]["declared"]
    assert describe(declared[1]).startswith("not needed: a host op")
    assert scan_summary(declared) == "1/1 present functions compile as one graph; 1 declared not needed, not counted (e2m1_and_ufp8sf_scale_to_float)"
    # on 0.6.0 rmsnorm_quant's spec says not-needed too, but a function the release lacks stays not-present
    assert declare_not_needed(results, "0.6.0")[2]["status"] == "not-present"
    # before 0.5.0 the spec declares the release unsupported, not not-needed: the scan's own result stays
    assert declare_not_needed(results, "0.4.1")[1]["status"] == "fails"


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("version", VERSIONS)
def test_scan_after_apply_compiles_both_and_declares_e2m1(version: str, tmp_path_factory) -> None:
    site = applied_site(version, tmp_path_factory)
    names = ["block_scale_interleave", "e2m1_and_ufp8sf_scale_to_float"]
    done = run_cli("scan", "--site-packages", str(site), "--json", *(a for n in names for a in ("--function", n)), check=True)
    got = {r["name"]: r for r in json.loads(done.stdout)["functions"]}
    assert got["block_scale_interleave"]["status"] == "compiles", got["block_scale_interleave"]
    variant = got["block_scale_interleave[out]"]
    assert variant["status"] == ("compiles" if version == "0.7.4" else "not-present"), variant
    e2m1 = got["e2m1_and_ufp8sf_scale_to_float"]
    assert e2m1["status"] == "not-needed" and "host op" in e2m1["declared"], e2m1


OPCHECK_CASES_CHILD = r"""
import json, sys
P = json.loads(sys.argv[1])
sys.path.insert(0, P["probe_dir"])
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
import opcheck_probe as p
op = p.patched_op("block_scale_interleave")
out = {"op": str(op._schema.name), "cases": {}}
with FakeTensorMode(allow_non_fake_inputs=True):
    for name, kwargs in p.CASES["block_scale_interleave"](torch, torch.device("meta")):
        r = op(**kwargs)
        s = kwargs["unswizzled_sf"]
        out["cases"][name] = {"input": [list(s.shape), str(s.dtype)], "output": [list(r.shape), list(r.stride()), str(r.dtype)]}
print("FP4PATCH-OPCHECK-CASES " + json.dumps(out))
"""


@needs_torch
@pytest.mark.torch
def test_opcheck_cases_reach_the_op_and_its_fake(tmp_path_factory) -> None:
    """The GPU probe's block_scale_interleave cases (``fp4patch/probes/opcheck_probe.py``; run on an H200 by
    ``verify --opcheck``) find the patched op and are accepted by its fake: rows 1..129, cols 6 / 16 / 448, bfloat16,
    3-D, each giving the wrapper's flat size."""
    site = applied_site("0.7.4", tmp_path_factory)
    got = child_json(site, OPCHECK_CASES_CHILD, {"probe_dir": str(REPO / "fp4patch" / "probes")}, mark="FP4PATCH-OPCHECK-CASES ", timeout=600)
    assert got["op"].startswith("fp4patch::block_scale_interleave_"), got
    assert len(got["cases"]) >= 14, got["cases"]
    for name, r in got["cases"].items():
        shape, dtype = r["input"]
        experts = shape[0] if len(shape) == 3 else 1
        assert r["output"] == [[_flat(shape[-2], shape[-1], experts)], [1], dtype], (name, r)
