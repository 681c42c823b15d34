"""The TRT-LLM-Gen FP8 MoE op sources against FlashInfer's own wrappers, on CPU, on the real 0.6.0 and 0.7.4 wheels.

For ``trtllm_fp8_block_scale_moe`` and ``trtllm_fp8_per_tensor_scale_moe`` (``patches/flashinfer-python/ops/``),
``tests/moe_op_child.py`` (shared with ``tests/test_op_moe.py``) runs in a fresh interpreter on the release's
sources:

* the product's case grid (``grids/<function>.py``: M in {0, 1, 8, 127, 129}, ``do_finalize`` where the release
  has it, FP8 / bf16 (/ MXFP8) activations, float32 / bf16 routing logits, a caller ``output=`` where it exists,
  the refusals) through ``fp4patch/probes/fake_check_probe.py``: the real wrapper under ``FakeTensorMode`` with the
  kernel side replaced, against the op block fp4patch renders for the release. On top of the product's stubs the
  child gives the kernel a model of the C++ launcher's return (``fp8_launcher_outputs``): the finalized output
  before 0.6.5, the unfinalized three after, which the product itself reports as not visible on CPU;
* the fake with a backed-symbolic and an unbacked token count under a ``ShapeEnv``, no guard.

After ``fp4patch apply``: each public function under ``torch.compile(fullgraph=True)`` is one graph with one op
node (unpatched: the cubin loader's ``logger.debug``), an eager call never enters the op, the op body forwards
every argument by name but ``tune_max_num_tokens``; with the token dimension ``mark_dynamic`` (also under
``backed_size_oblivious``, and through AOTAutograd), or ``mark_unbacked``: one compile over M = 1/8/127/129/300
(backed: 8/127/129/300), each call's outputs shaped for its count. The call forms are the engines': SGLang's
``flashinfer_trtllm`` FP8 runner (block scales ``[H/128, M]``, float32 DeepSeekV3 logits with a routing bias,
``tune_max_num_tokens=next_power_of_2(M)``; per-tensor with bf16 logits) and vLLM's FlashInfer TRT-LLM FP8
per-tensor experts (Llama 4: top-1 routing, ``use_routing_scales_on_input=True``), all by keyword.

These kernels are TRT-LLM-Gen (SM100): there is no GPU opcheck on an H200, and none here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

import pytest

from fp4patch.target.environment import from_site_packages
from fp4patch.checks.fake_check import requests_for, run_fake_check
from fp4patch.ops.render import release_data
from fp4patch.catalog.spec import load_specs

from . import op_grids
from .conftest import SPECS_DIR, release_site, run_cli
from .python_forkserver import child_json
from .test_op_moe import CHILD, MARK, PATHS, TOKEN_COUNTS, _is_unbacked, _same_outputs

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

SPECS = load_specs(SPECS_DIR)
FUNCTIONS = ("trtllm_fp8_block_scale_moe", "trtllm_fp8_per_tensor_scale_moe")
VERSIONS = ["0.6.0", "0.7.4"]
E, H, TOP_K = 8, 256, 2


def rendered(function: str, version: str):
    spec = next(s for s in SPECS if s.id == f"{function.replace('_', '-')}-fullgraph")
    targets = [t for t in spec.targets_for(version) if not t.status]
    assert len(targets) == 1, f"{spec.id}: {len(targets)} patching targets for {version}"
    return targets[0].custom_ops[0]


def op_target(function: str, version: str):
    """The :class:`~fp4patch.ops.source.CustomOpTarget` of ``function``'s spec for ``version``."""
    spec = next(s for s in SPECS if s.id == f"{function.replace('_', '-')}-fullgraph")
    (target,) = [t for t in spec.targets_for(version) if not t.status]
    return next(kw["target"] for kind, kw in target.operation_specs if kind == "custom-op")


def has(function: str, version: str, param: str) -> bool:
    """Whether the wrapper of ``version`` has ``param`` (its spec target's ``params``)."""
    return param in op_target(function, version).params


def symbolic_cases(function: str, version: str) -> list[dict]:
    finalize = (True, False) if has(function, version, "do_finalize") else (True,)
    outputs = (None, "given") if has(function, version, "output") else (None,)
    return [dict(act="fp8", logits_dtype="float32", do_finalize=d, output=o) for d in finalize for o in outputs]


def run_child(site: Path, version: str) -> dict:
    functions = {}
    for fn in FUNCTIONS:
        op = rendered(fn, version)
        functions[fn] = {"block": op.block, "op_name": op.op_name, "request": op_grids.as_json(op_grids.request(fn, version)),
                         "symbolic_cases": symbolic_cases(fn, version)}
    return child_json(site, CHILD, {"version": version, **PATHS, "functions": functions}, mark=MARK)


_results: dict[str, dict] = {}


@pytest.fixture
def child_result(tmp_path_factory):
    def get(version: str) -> dict:
        if version not in _results:
            _results[version] = run_child(release_site(version, tmp_path_factory, sources_only=True), version)
        return _results[version]

    return get


def _listed(outputs: list) -> list:
    """The probe's record of a call's outputs as a list of ``[shape, stride, dtype(, argument)]``: the FP8
    wrappers return one tensor when finalized, which the probe records as that one entry."""
    return [outputs] if outputs and not isinstance(outputs[0][0], list) else outputs


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_fake_matches_the_wrapper_allocation(child_result, function: str, version: str) -> None:
    """Every grid case: the wrapper's outputs (with the launcher model) and the fake's agree in shape, stride,
    dtype and which output is the caller's, or both raise the same class and first line; the unfinalized
    GEMM2 rows are the one unbacked dimension, and the grid declares each case whose outputs the launcher makes."""
    grid = child_result(version)[function]["grid"]
    cases = op_grids.cases(function, version)
    assert not grid["error"], grid["error"]
    assert [r["name"] for r in grid["records"]] == [c["name"] for c in cases]
    assert {0, 1, 8, 127, 129} <= {c["kwargs"]["hidden_states"]["t"][0] for c in cases}
    accepted = [(c, r) for c, r in zip(cases, grid["records"]) if "ok" in r["real"]]
    rejected = [(c, r) for c, r in zip(cases, grid["records"]) if "error" in r["real"]]
    assert len(accepted) >= 20
    for case, r in rejected:
        assert r["fake"] == r["real"], (case["name"], r["real"], r["fake"])
    for case, r in accepted:
        assert "ok" in r["fake"], (case["name"], r["fake"])
        assert r["kernels"] and not r["fake_kernels"], f"the wrapper did not reach the kernel stub, or the fake did: {case['name']} {r}"
        real, fake = _listed(r["real"]["ok"]), _listed(r["fake"]["ok"])
        assert _same_outputs(real, fake), (case["name"], r["real"], r["fake"])
        assert r["status"] == "passed" or case.get("kernel_outputs"), (case["name"], r["status"])
        finalized = case["kwargs"].get("do_finalize", True)
        m = case["kwargs"]["hidden_states"]["t"][0]
        if finalized:  # one tensor, [M, W] bf16: the wrapper's own (W = hidden, or valid_hidden_size) or the caller's
            (shape, _stride, dtype, *_mine), = fake
            own = "output" not in case["kwargs"] and "valid_hidden_size" not in case["kwargs"]
            assert shape[0] == m and dtype == "torch.bfloat16" and (shape[1] == H or not own), (case["name"], r["fake"])
        else:
            (rows, width), weights, index = fake[0][0], fake[1], fake[2]
            assert _is_unbacked(rows) and width == H, r["fake"]
            assert weights[0] == [m, TOP_K] and weights[2] == "torch.bfloat16" == real[1][2], r
            assert index[0] == [m * TOP_K] and index[2] == "torch.int32", r
    if version == "0.6.0":  # no do_finalize, no output=: the launcher allocates what the wrapper returns
        assert not rejected and all(c.get("kernel_outputs") for c in cases)
    else:  # the refusals of a bad output= are compared: an exact shape for per-tensor, 0.7.x's bounds for block-scale
        refused = {c["name"] for c, _ in rejected}
        assert {"M=8 do_finalize=True output=bad_rows", "M=8 do_finalize=True output=bad_dtype"} <= refused
        assert ("M=8 do_finalize=True output=narrow" in refused) == (function == "trtllm_fp8_per_tensor_scale_moe")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_schema_is_the_release_signature_with_its_mutations(child_result, function: str, version: str) -> None:
    result = child_result(version)[function]
    assert result["entry_params"] == result["release_params"]
    assert sorted(result["schema_params"]) == sorted(result["release_params"])
    mutated = [p for p in ("output", "routing_replay_out", "workspace_buffer") if p in result["release_params"]]
    assert sorted(result["schema_mutated"]) == sorted(mutated)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_fake_under_backed_and_unbacked_token_counts(child_result, function: str, version: str) -> None:
    runs = child_result(version)[function]["symbolic"]
    assert {r["kind"] for r in runs} == {"backed", "unbacked"}
    for rec in runs:
        assert "error" not in rec, (rec["case"], rec["kind"], rec.get("tb"))
        assert rec["guards"] == [], (rec["case"], rec["kind"], rec["guards"])
        first = rec["fake"][0][0][0]
        assert isinstance(first, str) and first.startswith("sym:"), rec["fake"]
        if rec["kind"] == "unbacked" and rec["case"]["do_finalize"]:
            assert _is_unbacked(first), rec["fake"]
        if not rec["case"]["do_finalize"]:  # the weights and the index map follow the token count
            assert rec["fake"][1][0][0].startswith("sym:") and rec["fake"][2][0][0].startswith("sym:"), rec["fake"]


def test_the_product_fake_check_sees_every_finalized_call_of_0_7_4(tmp_path_factory) -> None:
    """fp4patch's own fake check (run_fake_check on a patched 0.7.4): every case compared, no failure; what it
    cannot see is exactly the declared do_finalize=False calls (the launcher's outputs), so it does not pass."""
    site = trace_site("0.7.4", True, tmp_path_factory)
    specs = {s.id: s for s in SPECS}
    requests = [r for fn in FUNCTIONS for t in specs[f"{fn.replace('_', '-')}-fullgraph"].targets_for("0.7.4") if not t.status
                for r in requests_for(specs[f"{fn.replace('_', '-')}-fullgraph"], t)]
    results = run_fake_check(from_site_packages(site), site, requests)
    for request in requests:
        r = results[request.function]
        grid = op_grids.grid_module(request.grid).cases(frozenset(request.params), request.release)
        assert not r.error and not r.failures and not r.unchecked, r
        assert r.cases == len(grid) == r.compared, r
        declared = {c["name"] for c in grid if c.get("kernel_outputs")}
        assert declared == {c["name"] for c in grid if not c["kwargs"]["do_finalize"]}
        # 0.7.4 refuses none of the grid's unfinalized calls in Python (no unfinalized output= check; the
        # valid_hidden_size ones round up to the hidden size): every one reaches the launcher
        assert set(r.not_visible) == declared, declared - set(r.not_visible)
        assert not r.ok and set(r.reasons) == set(r.not_visible)


# --------------------------------------------------------------------------- #
# After `fp4patch apply`: the public functions under torch.compile(fullgraph=True)
# --------------------------------------------------------------------------- #
NOT_FORWARDED = {"tune_max_num_tokens"}


def trace_cases(function: str, version: str) -> list[dict]:
    cases = [dict(m=8, act="fp8", logits_dtype="float32" if function == "trtllm_fp8_block_scale_moe" else "bfloat16", do_finalize=True)]
    if has(function, version, "output"):
        cases.append(dict(cases[0], output="given"))
    if has(function, version, "do_finalize"):
        cases.append(dict(cases[0], do_finalize=False))
    return cases


_sites: dict[tuple[str, bool], Path] = {}
_traces: dict[tuple[str, bool], dict] = {}


def trace_site(version: str, patched: bool, tmp_path_factory) -> Path:
    """A private copy of the release (made once per worker), the two FP8 MoE specs applied when ``patched``."""
    key = (version, patched)
    if key not in _sites:
        site = tmp_path_factory.mktemp(f"fp8moe-{version}-{'patched' if patched else 'unpatched'}") / "site-packages"
        shutil.copytree(release_site(version, tmp_path_factory, sources_only=True), site, copy_function=os.link)
        if patched:
            specs = [a for fn in FUNCTIONS for a in ("--spec", f"{fn.replace('_', '-')}-fullgraph")]
            run_cli("apply", "--site-packages", str(site), *specs, check=True)
        _sites[key] = site
    return _sites[key]


@pytest.fixture
def trace_result(tmp_path_factory):
    def get(version: str, patched: bool) -> dict:
        key = (version, patched)
        if key not in _traces:
            functions = {}
            for fn in FUNCTIONS:
                functions[fn] = {"cases": trace_cases(fn, version), "m2": 24}
                if patched:
                    functions[fn]["op_name"] = rendered(fn, version).op_name
                    functions[fn]["activation_enum"] = bool(release_data(op_target(fn, version)).get("activation_enum"))
            params = {"version": version, **PATHS, "mode": "trace", "stub_kernel": patched, "functions": functions}
            _traces[key] = child_json(trace_site(version, patched, tmp_path_factory), CHILD, params, mark=MARK)
        return _traces[key]

    return get


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_unpatched_stops_at_the_jit_loader(trace_result, function: str, version: str) -> None:
    for rec in trace_result(version, False)[function]["trace"]:
        assert "error" in rec and rec["graphs"] == 0, rec
        assert rec["where"] and "load_cubin" in rec["where"], (rec["error"], rec["where"])


@pytest.mark.torch_matrix  # make test-torch runs it under each torch of the matrix
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_patched_is_one_graph_with_one_op_and_no_recompile(trace_result, function: str, version: str) -> None:
    op_name = rendered(function, version).op_name
    for rec in trace_result(version, True)[function]["trace"]:
        assert "error" not in rec, rec
        assert rec["graphs"] == 1 and rec["ops"] == [op_name], rec  # M=8 then 24, each with its own tune_max_num_tokens
        first, second = rec["outputs"]
        assert len(first) == len(second) == (1 if rec["case"]["do_finalize"] else 3), rec["outputs"]
        if rec["case"]["do_finalize"]:  # one tensor, as the wrapper returns it: [M, hidden] bf16
            assert [first[0][0], first[0][2]] == [[8, H], "torch.bfloat16"] and second[0][0] == [24, H], rec["outputs"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_patched_eager_call_does_not_go_through_the_op(trace_result, function: str, version: str) -> None:
    for rec in trace_result(version, True)[function]["eager"]:
        assert rec["entry_calls"] == 0 and rec["kernel"] >= 1, rec


@pytest.mark.parametrize("version", [*VERSIONS, pytest.param("0.6.3", marks=pytest.mark.eras)])
@pytest.mark.parametrize("function", FUNCTIONS)
def test_op_body_forwards_every_argument_by_name(trace_result, function: str, version: str) -> None:
    """Each parameter, set alone to a non-default value, reaches the wrapper the op body calls under its own
    name (``tune_max_num_tokens`` never does); on 0.6.3 the per-tensor ``activation_type`` as an ``ActivationType``,
    since that release's inner op reads ``.value`` (``eras``: not in ``make test``)."""
    forwarding = trace_result(version, True)[function]["forwarding"]
    results = forwarding["results"]
    if version == "0.6.3" and function == "trtllm_fp8_per_tensor_scale_moe":
        assert results["activation_type"]["expected"].startswith("<ActivationType."), results["activation_type"]
    assert sorted(results) == sorted(forwarding["entry_params"])
    for name, r in results.items():
        if name in NOT_FORWARDED:
            assert r["got"] == "<not passed>", (name, r)
        else:
            assert r["got"] == r["expected"], (name, r)


# --------------------------------------------------------------------------- #
# After `fp4patch apply`: the token count left free (piecewise CUDA graphs, vLLM's compiled runner)
# --------------------------------------------------------------------------- #
def dynamic_cases(function: str, version: str) -> list[dict]:
    """The engines' call forms (module docstring): SGLang's, with ``tune_max_num_tokens`` the next power of two
    of M (a new int per bucket); a caller ``output=`` and SGLang's deferred finalize (``do_finalize=False``)
    where the release has them; vLLM's Llama 4 per-tensor call."""
    block = function == "trtllm_fp8_block_scale_moe"
    cases = [dict(act="fp8", logits_dtype="float32" if block else "bfloat16", do_finalize=True, tune="pow2")]
    if not block:
        cases.append(dict(act="fp8", logits_dtype="bfloat16", do_finalize=True, llama4=True))
    if has(function, version, "output"):
        cases.append(dict(cases[0], tune=None, output="given"))
    if has(function, version, "do_finalize"):
        cases.append(dict(cases[0], tune=None, do_finalize=False))
    return cases


_dynamic: dict[str, dict] = {}


@pytest.fixture
def dynamic_result(tmp_path_factory):
    def get(version: str) -> dict:
        if version not in _dynamic:
            functions = {}
            for fn in FUNCTIONS:
                runs = []
                for case in dynamic_cases(fn, version):
                    unfinalized = case["do_finalize"] is False
                    for kind, counts in TOKEN_COUNTS.items():
                        runs.append({"case": case, "kind": kind, "token_counts": counts, "capture": unfinalized})
                    if unfinalized:  # without torch's option: fp4patch's one-line refusal
                        runs.append({"case": case, "kind": "backed", "token_counts": TOKEN_COUNTS["backed"][:1], "capture": False})
                functions[fn] = {"runs": runs}
            params = {"version": version, **PATHS, "mode": "dynamic", "functions": functions}
            _dynamic[version] = child_json(trace_site(version, True, tmp_path_factory), CHILD, params, mark=MARK)
        return _dynamic[version]

    return get


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_patched_compiles_once_over_token_counts(dynamic_result, function: str, version: str) -> None:
    """mark_dynamic (plain, backed_size_oblivious, through AOTAutograd) and mark_unbacked on the token dimension
    of every token-indexed input (the block scales' last): one graph, one frame, one op node for all token
    counts, the token dimension symbolic in the graph and the op's outputs, each call shaped for its count."""
    op_name = rendered(function, version).op_name
    runs = [r for r in dynamic_result(version)[function] if r["capture"] or r["case"]["do_finalize"]]
    assert {r["kind"] for r in runs} == set(TOKEN_COUNTS) and 1 in TOKEN_COUNTS["unbacked"] and 300 in TOKEN_COUNTS["unbacked"]
    for r in runs:
        where = (r["case"], r["kind"])
        assert "error" not in r, (where, r["error"], r.get("tb"))
        assert r["graphs"] == 1 and r["frames"] == 1 and r["ops"] == [op_name], (where, r["graphs"], r["frames"], r["ops"])
        (hidden,) = [v for k, v in r["inputs"].items() if k.endswith("_hidden_states_")]
        token = hidden[0][0]
        assert isinstance(token, str) and re.fullmatch(r"sym:[su]\d+", token), (where, r["inputs"])
        assert token.startswith("sym:u") == (r["kind"] == "unbacked"), (where, token)
        symbol = token[len("sym:"):]
        for d in [d for shape, _stride, _dtype in r["op_outputs"] for d in shape if isinstance(d, str)]:
            assert re.search(rf"\b{symbol}\b", d) or (not r["case"]["do_finalize"] and re.fullmatch(r"sym:u\d+", d)), (where, d)
        top_k = 1 if r["case"].get("llama4") else TOP_K
        for m, outs in zip(r["token_counts"], r["outputs"]):
            got = [(shape, dtype) for shape, _stride, dtype in outs]
            if r["case"]["do_finalize"]:
                assert got == [([m, H], "torch.bfloat16")], (where, m, got)
            else:
                (rows, width), rest = got[0][0], got[1:]
                assert str(rows).startswith("sym:u") and width == H and got[0][1] == "torch.bfloat16", (where, m, got)
                assert rest == [([m, top_k], "torch.bfloat16"), ([m * top_k], "torch.int32")], (where, m, got)


@pytest.mark.parametrize("function", FUNCTIONS)
def test_unfinalized_needs_capture_dynamic_output_shape_ops(dynamic_result, function: str) -> None:
    """do_finalize=False (0.6.5+): without capture_dynamic_output_shape_ops, fp4patch's own one-line refusal."""
    refused = [r for r in dynamic_result("0.7.4")[function] if not r["capture"] and not r["case"]["do_finalize"]]
    assert refused
    for r in refused:
        assert r["graphs"] == 0 and "error" in r, r
        cls, first = r["error"]
        assert cls == "Unsupported" and first.startswith(f"fp4patch: {function}(do_finalize=False) returns gemm2_output "), r["error"]


def test_before_0_6_0_the_specs_claim_nothing() -> None:
    """0.5.x takes tile_tokens_dim (unsupported, with the reason); before 0.2.9 the functions do not exist (not-needed)."""
    for fn in FUNCTIONS:
        spec = next(s for s in SPECS if s.id == f"{fn.replace('_', '-')}-fullgraph")
        assert [t.status for t in spec.targets_for("0.5.3")] == ["unsupported"]
        assert [t.status for t in spec.targets_for("0.2.8")] == ["not-needed"]
        assert "tile_tokens_dim" in spec.targets_for("0.5.3")[0].reason
