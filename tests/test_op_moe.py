"""The MoE op sources' fakes against FlashInfer's own wrappers, on CPU, on real wheels.

For ``trtllm_fp4_block_scale_moe``, ``trtllm_fp4_block_scale_routed_moe`` and ``cutlass_fused_moe``
(op sources in ``patches/flashinfer-python/ops/``), on 0.6.0, 0.7.4 and each release in between
where the wrapper's signature or output allocation changes, ``tests/moe_op_child.py`` runs in a
fresh interpreter on the release's sources, over the product's case grid
(``patches/flashinfer-python/grids/<function>.py``, given each spec target's params and release data,
run by ``fp4patch/probes/fake_check_probe.py``'s ``run_function``: token count M in {0, 1, 8, 127, 129},
``do_finalize`` True/False, NVFP4 / bf16 / MxFP8 activations, float32 / bf16 routing logits, with and
without a caller ``output=``, the ``(ids, weights)`` form, the refusals):

* the real public wrapper under ``FakeTensorMode`` on fake CUDA tensors with only the kernel side
  replaced (the grid's ``stubs``; the wrappers allocate their outputs in Python), and the op block
  fp4patch renders from the spec target for that release (``entry`` calling the registered custom op,
  whose fake then runs);
* the same outputs (shape, stride, dtype, and which output is the caller's own tensor), or the same
  error class and first line. The unfinalized TRT-LLM-Gen outputs come from the C++ launcher: the product
  reports those cases as not visible; here a model of the launcher's return (``launcher_outputs`` of the
  child) stands in, and the one deliberate difference is the GEMM2 row count, which depends on the tile
  the autotuner picks, so the fake gives a new unbacked size there;
* the fake with a backed-symbolic and an unbacked token count under a ``ShapeEnv``.

After ``fp4patch apply`` on 0.6.0 and 0.7.4: the public functions under ``torch.compile(fullgraph=True)``
(one graph, one op node, the unpatched wall), and with the token dimension left free, as piecewise CUDA
graphs and vLLM's compiled runner leave it (``mark_dynamic``, also under ``backed_size_oblivious``, and
``mark_unbacked``): one compile over the token counts 1 (where torch does not specialise it), 8, 127, 129,
300, each call's outputs shaped for its count; ``do_finalize=False`` only with
``capture_dynamic_output_shape_ops``, otherwise fp4patch's one-line refusal.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

import pytest
from packaging.version import Version

from fp4patch.catalog.spec import load_specs

from . import op_grids
from .conftest import REPO, SPECS_DIR, release_params, release_site, run_cli
from .python_forkserver import child_json

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

SPECS = load_specs(SPECS_DIR)
CHILD = Path(__file__).with_name("moe_op_child.py")
MARK = "FP4PATCH-CHILD-RESULT "
FUNCTIONS = ("trtllm_fp4_block_scale_moe", "trtllm_fp4_block_scale_routed_moe", "cutlass_fused_moe")
# 0.6.0, 0.7.4 and every release where one of the three wrappers changes its parameters or the way it
# allocates / returns outputs (found by reading each wheel's flashinfer/fused_moe/core.py).
VERSIONS = ["0.6.0", "0.6.3", "0.6.5", "0.6.8", "0.6.11", "0.6.12", "0.6.15", "0.6.18", "0.7.0", "0.7.4"]
SHAPE = {"experts": 8, "hidden": 256, "intermediate": 256, "top_k": 2}
M_GRID = [0, 1, 8, 127, 129]


def rendered(function: str, version: str):
    """The op fp4patch renders for ``function`` on ``version``: its spec's one patching target."""
    spec = next(s for s in SPECS if s.id == f"{function.replace('_', '-')}-fullgraph")
    targets = [t for t in spec.targets_for(version) if not t.status]
    assert len(targets) == 1, f"{spec.id}: {len(targets)} patching targets for {version}"
    return targets[0].custom_ops[0]


def symbolic_cases(function: str, version: str) -> list[dict]:
    if function == "cutlass_fused_moe":
        return [dict(SHAPE, act="nvfp4", out_dtype="bfloat16"), dict(SHAPE, act="bf16", out_dtype="bfloat16", output="given")]
    return [
        dict(SHAPE, do_finalize=do_finalize, act="nvfp4", logits_dtype="bfloat16", output=output)
        for do_finalize in (True, False)
        for output in (None, "given")
    ]


GRIDS = REPO / "patches" / "flashinfer-python" / "grids"
#: what every child needs: the probe, the oracle and the MoE grids' shared builders, by path
PATHS = {"probe": str(op_grids.PROBE), "oracle": str(op_grids.ORACLE), "moe": str(GRIDS / "_moe.py")}


def run_child(site: Path, version: str) -> dict:
    functions = {}
    for fn in FUNCTIONS:
        op = rendered(fn, version)
        functions[fn] = {
            "block": op.block,
            "op_name": op.op_name,
            "request": op_grids.as_json(op_grids.request(fn, version)),
            "symbolic_cases": symbolic_cases(fn, version),
        }
    params = {"version": version, **PATHS, "functions": functions}
    return child_json(site, CHILD, params, mark=MARK)


_results: dict[str, dict] = {}


@pytest.fixture
def child_result(tmp_path_factory):
    def get(version: str) -> dict:
        if version not in _results:
            _results[version] = run_child(release_site(version, tmp_path_factory, sources_only=True), version)
        return _results[version]

    return get


def _is_unbacked(dim) -> bool:
    return isinstance(dim, str) and dim.startswith(("sym:u", "u"))


def _same_outputs(real: list, fake: list) -> bool:
    """Equal ``[shape, stride, dtype(, argument)]`` of each output, except a fake dimension that is a fresh
    unbacked size (real: any int)."""
    if len(real) != len(fake):
        return False
    for r, f in zip(real, fake):
        (rs, rst, rdt, *ralias), (fs, fst, fdt, *falias) = r, f
        if rdt != fdt or len(rs) != len(fs) or rst != fst or ralias != falias:
            return False
        for a, b in zip(rs, fs):
            if not (a == b or (_is_unbacked(b) and isinstance(a, int))):
                return False
    return True


@pytest.mark.parametrize("version", release_params(VERSIONS))
@pytest.mark.parametrize("function", FUNCTIONS)
def test_fake_matches_the_wrapper_allocation(child_result, function: str, version: str) -> None:
    grid = child_result(version)[function]["grid"]
    cases = op_grids.cases(function, version)
    assert not grid["error"], grid["error"]
    assert [r["name"] for r in grid["records"]] == [c["name"] for c in cases]
    assert not [c for c in cases if c.get("unchecked") or c.get("kernel") is not None]
    accepted = [(c, r) for c, r in zip(cases, grid["records"]) if "ok" in r["real"]]
    rejected = [(c, r) for c, r in zip(cases, grid["records"]) if "error" in r["real"]]
    assert accepted and rejected, "the grid must hold calls the wrapper accepts and calls it rejects"
    for case, r in rejected:
        assert r["fake"] == r["real"], (case["name"], r["real"], r["fake"])
    for case, r in accepted:
        assert "ok" in r["fake"], (case["name"], r["fake"])
        assert r["kernels"] and not r["fake_kernels"], f"the wrapper did not reach the kernel stub, or the fake did: {case['name']} {r}"
        assert _same_outputs(r["real"]["ok"], r["fake"]["ok"]), (case["name"], r["real"], r["fake"])
        # only the outputs of the C++ launcher (modelled here) differ, and the grid says so
        assert (r["status"] == "passed") == (r["real"] == r["fake"]), (case["name"], r["status"])
        assert r["status"] == "passed" or case.get("kernel_outputs"), (case["name"], r["status"])
    # the unfinalized trtllm outputs: the row count is the one unbacked dimension, their dtypes follow the inputs
    if function != "cutlass_fused_moe":
        unfinalized = [(c, r) for c, r in accepted if not c["kwargs"]["do_finalize"] and c["kwargs"].get("routing_logits", {}).get("dtype") != "bfloat16"]
        assert unfinalized
        for case, r in unfinalized:
            assert _is_unbacked(r["fake"]["ok"][0][0][0]), r["fake"]
            assert r["status"] == "not-visible" and r["reason"] == case["kernel_outputs"], r
            if function == "trtllm_fp4_block_scale_moe":
                weights_dtype = "torch.float32" if Version(version) < Version("0.6.15") else "torch.bfloat16"
                assert r["real"]["ok"][1][2] == weights_dtype


@pytest.mark.parametrize("version", release_params(VERSIONS))
@pytest.mark.parametrize("function", FUNCTIONS)
def test_schema_is_the_release_signature_with_its_mutations(child_result, function: str, version: str) -> None:
    result = child_result(version)[function]
    assert result["entry_params"] == result["release_params"]
    assert result["schema_params"] == result["release_params"]
    # what the wrapper writes into, of what this release has (never a parameter it lacks)
    mutated = [p for p in ("output", "routing_replay_out", "workspace_buffer") if p in result["release_params"]]
    if function == "trtllm_fp4_block_scale_routed_moe":
        mutated = [p for p in mutated if p != "routing_replay_out"]
    assert result["schema_mutated"] == mutated


@pytest.mark.parametrize("function", FUNCTIONS[:2])
def test_the_spliced_parameter_list_is_each_release_s_own_run_after_the_first(function: str) -> None:
    """Both trtllm op sources splice ``_trtllm_fp4_moe_params`` (ops/_moe_helpers.py) after their first
    parameter: in every release target of their specs (the wrapper's parameters, checked against each
    wheel for drift) the present ones of that list stand right there, in that order."""
    import ast

    spec = next(s for s in SPECS if s.id == f"{function.replace('_', '-')}-fullgraph")
    targets = [op for t in spec.targets for kind, op in t.operation_specs if kind == "custom-op"]
    assert len(targets) >= 7
    helpers = targets[0]["target"].helpers["_moe_helpers"]
    shared = next(n for n in ast.parse(helpers).body if isinstance(n, ast.FunctionDef) and n.name == "_trtllm_fp4_moe_params")
    names = [a.arg for a in shared.args.args]
    for op in targets:
        params = list(op["target"].params)
        present = [p for p in names if p in params]
        assert len(present) >= len(names) - 2, (op["target"].versions, set(names) - set(present))
        assert params[1 : 1 + len(present)] == present, op["target"].versions


@pytest.mark.parametrize("version", ["0.6.0", "0.7.4"])
@pytest.mark.parametrize("function", FUNCTIONS)
def test_fake_under_backed_and_unbacked_token_counts(child_result, function: str, version: str) -> None:
    runs = child_result(version)[function]["symbolic"]
    assert {r["kind"] for r in runs} == {"backed", "unbacked"}
    for rec in runs:
        assert "error" not in rec, (rec["case"], rec["kind"], rec.get("tb"))
        assert rec["guards"] == [], (rec["case"], rec["kind"], rec["guards"])
        first = rec["fake"][0][0][0]
        assert isinstance(first, str) and first.startswith("sym:"), rec["fake"]
        if rec["kind"] == "unbacked" and not (function != "cutlass_fused_moe" and not rec["case"]["do_finalize"]):
            assert _is_unbacked(first), rec["fake"]


# --------------------------------------------------------------------------- #
# After `fp4patch apply`: the public functions under torch.compile(fullgraph=True)
# --------------------------------------------------------------------------- #
TRACE_VERSIONS = ["0.6.0", "0.7.4"]
# The wall Dynamo meets in each unpatched function with this test's CPU stand-ins, as the last
# FlashInfer frame it names. trtllm: the cubin loader's logger.debug (as in the FP4-path scan of
# 2026-11-30). cutlass: 0.6.0 the JIT build's nvcc flags (compilation_context.get_nvcc_flags_list),
# 0.7.4 the wrapper's torch.cuda.device context (with an installed CUDA torch the scan met
# cutlass_supports_sm107's read_text() first; both are before the kernel).
UNPATCHED_WALL = {
    "trtllm_fp4_block_scale_moe": "load_cubin",
    "trtllm_fp4_block_scale_routed_moe": "load_cubin",
    "cutlass_fused_moe": {"0.6.0": "get_nvcc_flags_list", "0.7.4": "in cutlass_fused_moe"},
}
# Parameters the op receives but does not forward: the tuning-only hint (the wrapper's default is
# used under compile) and routing_metadata (refused by entry unless None).
NOT_FORWARDED = {"tune_max_num_tokens", "routing_metadata"}


def trace_cases(function: str) -> list[dict]:
    if function == "cutlass_fused_moe":
        return [dict(SHAPE, m=8, act="nvfp4", out_dtype="bfloat16"), dict(SHAPE, m=8, act="bf16", out_dtype="bfloat16", output="given")]
    cases = [dict(SHAPE, m=8, do_finalize=True, act="nvfp4", logits_dtype="bfloat16", output="given")]
    cases.append(dict(SHAPE, m=8, do_finalize=False, act="nvfp4", logits_dtype="float32"))
    return cases


def run_trace_child(site: Path, version: str, patched: bool) -> dict:
    functions = {}
    for fn in FUNCTIONS:
        functions[fn] = {"cases": trace_cases(fn), "m2": 24}
        if patched:
            functions[fn]["op_name"] = rendered(fn, version).op_name
    params = {"version": version, **PATHS, "mode": "trace", "stub_kernel": patched, "functions": functions}
    return child_json(site, CHILD, params, mark=MARK)


_traces: dict[tuple[str, bool], dict] = {}
_sites: dict[tuple[str, bool], Path] = {}


def trace_site(version: str, patched: bool, tmp_path_factory) -> Path:
    """A private copy of the release (made once per worker), the three MoE specs applied when ``patched``."""
    key = (version, patched)
    if key not in _sites:
        site = tmp_path_factory.mktemp(f"moe-{version}-{'patched' if patched else 'unpatched'}") / "site-packages"
        shutil.copytree(release_site(version, tmp_path_factory, sources_only=True), site, copy_function=os.link)
        if patched:
            specs = [a for fn in FUNCTIONS for a in ("--spec", f"{fn.replace('_', '-')}-fullgraph")]
            run_cli("apply", "--site-packages", str(site), *specs, check=True)
        _sites[key] = site
    return _sites[key]


@pytest.fixture
def trace_result(tmp_path_factory):
    """Call with (version, patched): the trace child's result on a private copy of the release."""

    def get(version: str, patched: bool) -> dict:
        key = (version, patched)
        if key not in _traces:
            _traces[key] = run_trace_child(trace_site(version, patched, tmp_path_factory), version, patched)
        return _traces[key]

    return get


@pytest.mark.parametrize("version", TRACE_VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_unpatched_stops_at_the_jit_loader(trace_result, function: str, version: str) -> None:
    wall = UNPATCHED_WALL[function]
    wall = wall[version] if isinstance(wall, dict) else wall
    for rec in trace_result(version, False)[function]["trace"]:
        assert "error" in rec and rec["graphs"] == 0, rec
        assert rec["where"] and wall in rec["where"], (rec["error"], rec["where"])


@pytest.mark.torch_matrix  # make test-torch runs it under each torch of the matrix
@pytest.mark.parametrize("version", TRACE_VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_patched_is_one_graph_with_one_op_and_no_recompile(trace_result, function: str, version: str) -> None:
    op_name = rendered(function, version).op_name
    for rec in trace_result(version, True)[function]["trace"]:
        assert "error" not in rec, rec
        # two token counts (M=8, then 24 with a new tune_max_num_tokens): one graph, compiled once
        assert rec["graphs"] == 1, rec
        assert rec["ops"] == [op_name], rec
        first, second = rec["outputs"]
        assert len(first) == len(second)


@pytest.mark.parametrize("version", TRACE_VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_patched_eager_call_does_not_go_through_the_op(trace_result, function: str, version: str) -> None:
    before = trace_result(version, True)[function]["eager"]
    for rec in before:
        assert rec["entry_calls"] == 0 and rec["kernel"] >= 1, rec


@pytest.mark.parametrize("version", TRACE_VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_op_body_forwards_every_argument_by_name(trace_result, function: str, version: str) -> None:
    forwarding = trace_result(version, True)[function]["forwarding"]
    results = forwarding["results"]
    assert list(results) == forwarding["entry_params"]
    for name, r in results.items():
        if name in NOT_FORWARDED:
            assert r["got"] == "<not passed>", (name, r)
        else:
            assert r["got"] == r["expected"], (name, r)


# --------------------------------------------------------------------------- #
# After `fp4patch apply`: the token count left free (piecewise CUDA graphs, vLLM's compiled runner)
# --------------------------------------------------------------------------- #
#: the token counts of each kind of symbolic M: a backed size is specialised at 0/1 by torch itself
#: (M=1 would be a second graph), except under backed_size_oblivious (vLLM's backed-size-oblivious
#: mode); an unbacked one covers M=1 too
TOKEN_COUNTS = {"backed": [8, 127, 129, 300], "oblivious": [8, 1, 127, 129, 300], "unbacked": [1, 8, 127, 129, 300],
                # backed, the graph through AOTAutograd as Inductor takes it: the op's mutations functionalized
                "aot": [8, 129]}


def dynamic_cases(function: str) -> list[dict]:
    """The engines' call forms: vLLM's FlashInfer TRT-LLM-Gen NVFP4 MoE (bf16 routing logits, NVFP4
    activations with their linear block scales, the finalized ``[0]``), a caller ``output=`` (SGLang),
    SGLang's and TensorRT-LLM's deferred finalize (``do_finalize=False``, float32 DeepSeek-style logits),
    the routed form with packed ids and with the 0.7.x ``(ids, weights)`` pair; vLLM's CUTLASS NVFP4 MoE
    (``cutlass_fused_moe`` with packed FP4 weights and a bf16 or caller-given output). ``tune="pow2"``: the
    call also passes ``tune_max_num_tokens`` = the next power of two of M, a new int per bucket."""
    if function == "cutlass_fused_moe":
        return [dict(SHAPE, act="nvfp4", out_dtype="bfloat16", tune="pow2"), dict(SHAPE, act="nvfp4", out_dtype="bfloat16", output="given")]
    cases = [
        dict(SHAPE, do_finalize=True, act="nvfp4", logits_dtype="bfloat16", tune="pow2"),
        dict(SHAPE, do_finalize=True, act="nvfp4", logits_dtype="bfloat16", output="given"),
        dict(SHAPE, do_finalize=False, act="nvfp4", logits_dtype="float32"),
    ]
    if function == "trtllm_fp4_block_scale_routed_moe":
        cases.append(dict(SHAPE, do_finalize=False, act="nvfp4", logits_dtype="bfloat16", tuple_ids=True))
    return cases


def run_dynamic_child(site: Path, version: str) -> dict:
    functions = {}
    for fn in FUNCTIONS:
        runs = []
        for case in dynamic_cases(fn):
            if fn == "trtllm_fp4_block_scale_routed_moe" and case.get("tuple_ids") and version == "0.6.0":
                continue  # the (ids, weights) pair is from 0.6.12
            unfinalized = case.get("do_finalize") is False
            for kind, counts in TOKEN_COUNTS.items():
                runs.append({"case": case, "kind": kind, "token_counts": counts, "capture": unfinalized})
            if unfinalized:  # without torch's option: fp4patch's one-line refusal
                runs.append({"case": case, "kind": "backed", "token_counts": TOKEN_COUNTS["backed"][:1], "capture": False})
        functions[fn] = {"runs": runs}
    params = {"version": version, **PATHS, "mode": "dynamic", "functions": functions}
    return child_json(site, CHILD, params, mark=MARK)


_dynamic: dict[str, dict] = {}


@pytest.fixture
def dynamic_result(tmp_path_factory):
    """Call with a version: the dynamic child's result on the patched copy the trace tests use."""

    def get(version: str) -> dict:
        if version not in _dynamic:
            _dynamic[version] = run_dynamic_child(trace_site(version, True, tmp_path_factory), version)
        return _dynamic[version]

    return get


def _expected(function: str, version: str, case: dict, m: int) -> list:
    """The outputs of one call with ``m`` tokens, as (shape, dtype); ``None`` for the GEMM2 row count."""
    hidden, experts, top_k = SHAPE["hidden"], SHAPE["experts"], SHAPE["top_k"]
    if function == "cutlass_fused_moe":
        return [([m, hidden], "torch.bfloat16"), ([1], "torch.int32"), ([experts, m], "torch.float32"), ([experts], "torch.int32")]
    if case["do_finalize"]:
        return [([m, hidden], "torch.bfloat16")]
    follows = function == "trtllm_fp4_block_scale_moe" and Version(version) < Version("0.6.15")
    weights = "torch." + case["logits_dtype"] if follows else "torch.bfloat16"
    return [([None, hidden], "torch.bfloat16"), ([m, top_k], weights), ([m * top_k], "torch.int32")]


@pytest.mark.parametrize("version", TRACE_VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_patched_compiles_once_over_token_counts(dynamic_result, function: str, version: str) -> None:
    """mark_dynamic (plain, backed-size-oblivious, and through AOTAutograd, which Inductor runs: the op's
    mutations functionalized) and mark_unbacked on the token dimension of every token-indexed input: one
    graph, one frame, one op node for all token counts, the token dimension
    symbolic in the traced outputs, and each call's outputs shaped for its own count (the unfinalized
    GEMM2 row count a fresh unbacked size, capture_dynamic_output_shape_ops on)."""
    op_name = rendered(function, version).op_name
    runs = [r for r in dynamic_result(version)[function] if r["capture"] or r["case"].get("do_finalize") is not False]
    assert {r["kind"] for r in runs} == set(TOKEN_COUNTS) and len(runs) >= 2 * len(TOKEN_COUNTS)
    for r in runs:
        where = (r["case"], r["kind"])
        assert "error" not in r, (where, r["error"], r.get("tb"))
        assert r["graphs"] == 1 and r["frames"] == 1, (where, r["graphs"], r["frames"])
        assert r["ops"] == [op_name], (where, r["ops"])
        # the token count stays a symbol: the hidden states' first dimension in the graph, and every size of
        # the op's outputs that is not static is that symbol (times top_k) or a fresh unbacked GEMM2 row count
        (hidden,) = [v for k, v in r["inputs"].items() if k.endswith(("_hidden_states_", "_input_"))]
        token = hidden[0][0]
        assert isinstance(token, str) and re.fullmatch(r"sym:[su]\d+", token), (where, r["inputs"])
        assert token.startswith("sym:u") == (r["kind"] == "unbacked"), (where, token)
        symbol = token[len("sym:"):]
        sizes = [d for shape, _stride, _dtype in r["op_outputs"] for d in shape if isinstance(d, str)]
        assert sizes or r["case"].get("output"), (where, r["op_outputs"])
        unfinalized = function != "cutlass_fused_moe" and not r["case"]["do_finalize"]
        for d in sizes:
            assert re.search(rf"\b{symbol}\b", d) or (unfinalized and re.fullmatch(r"sym:u\d+", d)), (where, d, r["op_outputs"])
        assert len(r["outputs"]) == len(r["token_counts"])
        for m, outputs in zip(r["token_counts"], r["outputs"]):
            got = [(shape, dtype) for shape, _stride, dtype in outputs]
            want = _expected(function, version, r["case"], m)
            assert len(got) == len(want), (where, m, got)
            for (gs, gd), (ws, wd) in zip(got, want):
                assert gd == wd and len(gs) == len(ws), (where, m, got, want)
                for g, w in zip(gs, ws):
                    assert g == w if w is not None else str(g).startswith("sym:u"), (where, m, got, want)


@pytest.mark.parametrize("version", TRACE_VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS[:2])
def test_unfinalized_needs_capture_dynamic_output_shape_ops(dynamic_result, function: str, version: str) -> None:
    """do_finalize=False: gemm2_output's rows are the launcher's, from the tile chosen at run time (not a
    formula of the input sizes), so the fake gives an unbacked size; with
    capture_dynamic_output_shape_ops on it compiles (test above), off it fails with fp4patch's own one-line
    message first, naming the option and CUDA-graph capture."""
    refused = [r for r in dynamic_result(version)[function] if not r["capture"] and r["case"].get("do_finalize") is False]
    assert refused
    for r in refused:
        assert r["graphs"] == 0 and "error" in r, r
        cls, first = r["error"]
        assert cls == "Unsupported", r["error"]
        assert first.startswith(f"fp4patch: {function}(do_finalize=False) returns gemm2_output "), first
        assert "torch._dynamo.config.capture_dynamic_output_shape_ops = True" in first and "CUDA-graph capture cannot hold" in first, first
