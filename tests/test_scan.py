"""``fp4patch scan`` and the patched functions of ``verify --trace``, on the real 0.6.0 and 0.7.4 wheels.

Each scan runs ``fp4patch/probes/scan_probe.py`` in one fresh interpreter (``PYTHONPATH=<site>``), on CPU
with fake CUDA tensors. Checked:

* unpatched, every function of the FP4/FP8 path that the release has fails under
  ``fullgraph=True``, with the Dynamo error's first line and a ``flashinfer/...py:LINE`` whose
  reported source line is that line of the installed file; the functions the release lacks are
  ``not present``; exit 0 (the scan is a report);
* after ``fp4patch apply``, every function whose fullgraph spec is applied compiles as one graph
  with an fp4patch custom op in it (today: ``fp4_quantize``, ``nvfp4_quantize``, ``mxfp4_quantize``)
  and the others still fail with their wall named;
* the variants (``name[variant]``: the calls engines make, each backend of ``fp4_quantize`` /
  ``mxfp8_quantize``, per-token ``nvfp4_quantize``, the TRT-LLM-Gen MoE ops with ``do_finalize=False``)
  are entries of their own, ``not present`` where the release lacks their parameters, and left out of
  ``verify --trace``;
* ``--json`` is valid against ``docs/json-schema.json``; the plain log lines are aligned;
* ``verify --trace`` runs the scan's call of each function whose fullgraph spec is applied, and
  fails when one does not compile (a spec named ``mm-fp4-fullgraph`` that changes nothing).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import jsonschema
import pytest

from fp4patch.cli.render import failure_hint, scan_lines
from fp4patch.states import SATISFIED
from fp4patch.checks.trace import entries_for_specs, scan_entries

from .conftest import REPO, SPECS_DIR, applied_site, release_site, run_cli
from .test_trace_fullgraph import linked_site  # noqa: F401

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

SCHEMA = json.loads((REPO / "docs" / "json-schema.json").read_text())
LOCATION = re.compile(r"^(flashinfer/.+\.py):(\d+)$")
# Added after 0.6.0 (absent from its wheel), present in 0.7.4.
NEW_IN_07 = {"mxfp8_grouped_quantize", "silu_and_mul_mxfp8_experts_quantize", "rmsnorm_quant", "fused_add_rmsnorm_quant"}
# The variants of a function's default call, and those whose parameters 0.6.0 lacks (backend: 0.6.7 / 0.6.8,
# per_token_activation: 0.6.11).
VARIANTS = {
    "fp4_quantize[cuda]", "fp4_quantize[cute-dsl]", "nvfp4_quantize[per-token]", "nvfp4_quantize[per-token,cute-dsl]", "mxfp8_quantize[cuda]",
    "mxfp8_quantize[cute-dsl]", "trtllm_fp4_block_scale_moe[do_finalize=False]", "trtllm_fp4_block_scale_routed_moe[do_finalize=False]",
    "trtllm_fp8_block_scale_moe[do_finalize=False]", "trtllm_fp8_per_tensor_scale_moe[do_finalize=False]", "block_scale_interleave[out]",
    "mxfp8_grouped_quantize[cuda]",
}
# (do_finalize of the FP8 MoE wrappers: 0.6.5; out= of block_scale_interleave: 0.7.2.post1)
VARIANTS_NOT_IN_060 = {
    "fp4_quantize[cuda]", "fp4_quantize[cute-dsl]", "nvfp4_quantize[per-token]", "nvfp4_quantize[per-token,cute-dsl]", "mxfp8_quantize[cuda]",
    "mxfp8_quantize[cute-dsl]", "trtllm_fp8_block_scale_moe[do_finalize=False]", "trtllm_fp8_per_tensor_scale_moe[do_finalize=False]",
    "block_scale_interleave[out]", "mxfp8_grouped_quantize[cuda]",  # (the last: the function itself is new in 0.6.14)
}
# Declared not-needed by their spec on 0.6.0 and 0.7.4 (a host op): the scan reports them so, with the reason.
DECLARED = {"e2m1_and_ufp8sf_scale_to_float"}
# The FP4-path functions of the issue (and of ../shared/fp4-path-scan.md), each at least once in the scan.
FP4_PATH = {
    "fp4_quantize", "nvfp4_quantize", "mxfp4_quantize", "nvfp4_batched_quantize", "scaled_fp4_grouped_quantize",
    "silu_and_mul_scaled_nvfp4_experts_quantize", "block_scale_interleave", "e2m1_and_ufp8sf_scale_to_float", "mxfp8_quantize",
    "mxfp8_grouped_quantize", "silu_and_mul_mxfp8_experts_quantize", "mm_fp4", "bmm_fp8", "trtllm_fp4_block_scale_moe",
    "trtllm_fp4_block_scale_routed_moe", "trtllm_fp8_block_scale_moe", "trtllm_fp8_per_tensor_scale_moe", "cutlass_fused_moe", "rmsnorm_quant",
    "fused_add_rmsnorm_quant",
}


def validate(kind: str, payload: dict) -> None:
    jsonschema.validate(payload, {**SCHEMA, "$ref": f"#/$defs/{kind}"})


def scan(site: Path) -> dict:
    done = run_cli("scan", "--site-packages", str(site), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    payload = json.loads(done.stdout)
    validate("scan", payload)
    return payload


def assert_wall_named(site: Path, r: dict) -> None:
    """A failure names the Dynamo error and the installed line where tracing stopped."""
    assert r["status"] == "fails" and not r["passed"], r
    assert r["error"] and r["error"].split(":")[0] in ("Unsupported", "InternalTorchDynamoError", "TorchRuntimeError"), r
    match = LOCATION.match(r["location"] or "")
    assert match, r
    lines = (site / match[1]).read_text(encoding="utf-8").splitlines()
    assert lines[int(match[2]) - 1].strip() == r["source"] and r["source"], r


def test_the_scan_covers_every_function_of_the_fp4_path() -> None:
    entries = scan_entries()
    assert {e["function"] for e in entries} >= FP4_PATH
    assert {e["name"] for e in entries} >= {"mm_fp4[cutlass]", "mm_fp4[trtllm]", "mm_fp4[auto]", "cutlass_fused_moe[nvfp4]"}
    assert {e["name"] for e in entries if e["variant"]} == VARIANTS
    assert len({e["name"] for e in entries}) == len(entries)
    # the spec that makes each one compile: <function-kebab>-fullgraph, except where fp4_quantize does it
    by_name = {e["name"]: e["spec"] for e in entries}
    assert by_name["mm_fp4[auto]"] == "mm-fp4-fullgraph" and by_name["bmm_fp8"] == "bmm-fp8-fullgraph"
    assert entries_for_specs({"fp4-quantize-fullgraph"}) == ["fp4_quantize", "nvfp4_quantize", "mxfp4_quantize"]
    # nvfp4_quantize: its own op from 0.6.11, fp4_quantize's where that spec is not applied (not-needed before 0.6.11)
    assert by_name["nvfp4_quantize"] == by_name["nvfp4_quantize[per-token]"] == "nvfp4-quantize-fullgraph"
    assert entries_for_specs({"nvfp4-quantize-fullgraph"}) == ["nvfp4_quantize"]


@pytest.mark.parametrize("version", ["0.6.0", "0.7.4"])
def test_unpatched_every_function_fails_with_its_wall(linked_site, version: str) -> None:  # noqa: F811
    site = linked_site(version)
    payload = scan(site)
    assert payload["version"] == version and payload["flashinfer"] == version
    results = payload["functions"]
    assert [r["name"] for r in results] == [e["name"] for e in scan_entries()]
    absent = NEW_IN_07 if version == "0.6.0" else set()
    lacking = VARIANTS_NOT_IN_060 if version == "0.6.0" else set()
    for r in results:
        if r["function"] in absent:
            assert r["status"] == "not-present", r
        elif r["name"] in lacking:  # the function is there, the variant's parameter is not
            assert r["status"] == "not-present" and r["error"].startswith(f"{r['function']} has no parameter "), r
        elif r["name"] in DECLARED:  # what the scan saw is kept beside the declaration
            assert r["status"] == "not-needed" and r["declared"] and r["scanned"] == "fails", r
        else:
            assert_wall_named(site, r)
    gone = {r["name"] for r in results if r["function"] in absent} | lacking
    assert payload["counts"] == {
        "compiles": 0, "fails": len(results) - len(gone) - len(DECLARED), "not-present": len(gone), "no-call": 0, "not-needed": len(DECLARED),
        "left-out": 0,
    }
    if version == "0.6.0":  # docs/commands.md's unpatched 0.6.0 log ends in this line (it said 0/17)
        summary = f"\n0/{payload['counts']['fails']} present functions compile as one graph; 1 declared not needed"
        assert summary in (REPO / "docs" / "commands.md").read_text(), summary


@pytest.mark.parametrize("version", ["0.6.0", "0.7.4"])
def test_after_apply_the_patched_functions_compile(tmp_path_factory, version: str) -> None:
    site = applied_site(version, tmp_path_factory)
    status = json.loads(run_cli("status", "--site-packages", str(site), "--json", check=True).stdout)
    applied = {s["id"] for s in status["specs"] if s["state"] == "applied"}
    covered = set(entries_for_specs(applied))
    assert {"fp4_quantize", "nvfp4_quantize", "mxfp4_quantize"} <= covered
    results = scan(site)["functions"]
    variants = {r["name"]: r for r in results if r["name"] in VARIANTS}
    assert not covered & set(variants)  # verify --trace leaves the variants out
    check_variants_after_apply(site, version, variants)
    for r in results:
        if r["name"] in VARIANTS:
            continue
        if r["name"] in DECLARED:
            assert r["status"] == "not-needed" and "host op" in r["declared"], r
        elif r["name"] in covered:
            assert r["status"] == "compiles" and r["passed"], r
            assert r["graphs"] == 1 and r["graph_breaks"] == 0 and r["error"] is None, r
            assert r["ops"] and all(op.startswith("fp4patch::") for op in r["ops"]), r
            # called from a compiled function and handed to torch.compile directly: one graph, the same op each
            assert set(r["forms"]) == {"nested", "direct"} and r["form"] is None, r
            assert all(f["passed"] and f["ops"] == r["ops"] for f in r["forms"].values()), r["forms"]
        elif r["status"] != "not-present":
            assert_wall_named(site, r)
    # what the README and docs/commands.md say the scan counts after apply (they said 32 of 32 on 0.7.4 once it was 33)
    present = [r for r in results if r["status"] not in ("not-present", "not-needed")]
    counted = (sum(r["status"] == "compiles" for r in present), len(present))
    assert counted[0] == counted[1], [r["name"] for r in present if r["status"] != "compiles"]  # "all", as they say
    readme = re.search(r"(\d+) of (\d+) present on 0\.6\.0 and (\d+) of (\d+) on 0\.7\.4", " ".join((REPO / "README.md").read_text().split()))
    commands = re.search(r"(\d+)/(\d+) on 0\.6\.0 and (\d+)/(\d+) on 0\.7\.4", " ".join((REPO / "docs" / "commands.md").read_text().split()))
    assert readme and commands
    for said in (readme, commands):
        assert tuple(map(int, said.groups()[:2] if version == "0.6.0" else said.groups()[2:])) == counted, (said[0], version, counted)
    # the log form: one aligned line per function
    lines = [line for line in scan_lines(results) if line[2:3] != " "]  # a detail too long wraps under its column
    assert len(lines) == len(results)
    assert len({line.index(d) for line, d in zip(lines, [r["name"] for r in results])}) == 1
    details = [line[2 + max(len(r["name"]) for r in results) + 2 :] for line in lines]
    assert details[0].startswith("compiles (1 graph, ops:")  # the op names may wrap under the column


def check_variants_after_apply(site: Path, version: str, variants: dict) -> None:
    """What the default specs give each variant on ``version``; one that fails names its wall."""
    # deferred finalize (SGLang, TensorRT-LLM) compiles with capture_dynamic_output_shape_ops, as engines set it
    deferred = {"trtllm_fp4_block_scale_moe[do_finalize=False]", "trtllm_fp4_block_scale_routed_moe[do_finalize=False]"}
    if version == "0.6.0":
        compiles = deferred
        assert {n for n, r in variants.items() if r["status"] == "not-present"} == VARIANTS_NOT_IN_060
    else:  # 0.7.4: each backend of the two quantizers traces (mxfp8's cute-dsl mirrored from issue 19), the
        # per-token nvfp4_quantize calls of vLLM and SGLang (nvfp4-quantize-fullgraph's own op), FP8 MoE deferred too,
        # block_scale_interleave into a caller's out=
        compiles = deferred | {"trtllm_fp8_block_scale_moe[do_finalize=False]", "trtllm_fp8_per_tensor_scale_moe[do_finalize=False]"} | {
            "fp4_quantize[cuda]", "fp4_quantize[cute-dsl]", "mxfp8_quantize[cuda]", "mxfp8_quantize[cute-dsl]",
            "nvfp4_quantize[per-token]", "nvfp4_quantize[per-token,cute-dsl]", "block_scale_interleave[out]", "mxfp8_grouped_quantize[cuda]"}
    for name in compiles:
        r = variants[name]
        assert r["status"] == "compiles" and r["graphs"] == 1 and r["ops"] and all(op.startswith("fp4patch::") for op in r["ops"]), r
    for name, r in variants.items():  # the rest reported either way, a failure with where it stopped
        assert r["status"] in ("compiles", "fails", "not-present"), r
        if r["status"] == "fails":
            assert r["error"] and LOCATION.match(r["location"] or ""), r


def test_verify_trace_fails_when_a_patched_function_does_not_compile(linked_site, tmp_path: Path) -> None:  # noqa: F811
    """A spec named mm-fp4-fullgraph that leaves mm_fp4 as it is: verify --trace must run mm_fp4 and fail."""
    specs = tmp_path / "specs"
    shutil.copytree(SPECS_DIR, specs)
    (specs / "flashinfer-python" / "mm-fp4-fullgraph.toml").write_text(
        '''id = "mm-fp4-fullgraph"
summary = "test double: patched, yet mm_fp4 does not compile"
rationale = "a statement at the start of mm_fp4; nothing that makes it traceable"
distribution = "flashinfer-python"
default = true
conflicts = []
requires = []

[[target]]
versions = ">=0.6.0"
file = "flashinfer/gemm/gemm_base.py"

  [[target.operation]]
  kind = "insert-at-function-start"
  function = "mm_fp4"
  code = "_fp4patch_test_double = None"

[[case]]
name = "a statement"
version = "0.6.0"
before = "def mm_fp4(a):\\n    return a\\n"
after = "def mm_fp4(a):\\n    _fp4patch_test_double = None\\n    return a\\n"
''',
        encoding="utf-8",
    )
    site = linked_site("0.6.0")
    # fp4_quantize's spec and the test double: the scan covers the functions of the applied specs
    common = ("--site-packages", str(site), "--specs-dir", str(specs), "--spec", "fp4-quantize-fullgraph", "--spec", "mm-fp4-fullgraph")
    run_cli("apply", *common, check=True)
    done = run_cli("verify", "--trace", *common, "--json")
    payload = json.loads(done.stdout)
    validate("verify", payload)
    assert all(c["passed"] for c in payload["trace"])  # fp4_quantize's cases pass ...
    functions = {r["name"]: r for r in payload["trace_functions"]}
    mm = {"mm_fp4[cutlass]", "mm_fp4[trtllm]", "mm_fp4[auto]"}
    assert {"fp4_quantize", "nvfp4_quantize", "mxfp4_quantize"} | mm == set(functions)
    # fp4_quantize's family (the other applied spec) still passes
    assert all(r["passed"] for n, r in functions.items() if n not in mm), [n for n, r in functions.items() if not r["passed"]]
    for name in ("mm_fp4[cutlass]", "mm_fp4[trtllm]", "mm_fp4[auto]"):
        assert_wall_named(site, functions[name])
    assert done.returncode == 1 and payload["ok"] is False  # ... and the patched mm_fp4 that does not compile fails verify
    hint = failure_hint(payload["specs"], SATISFIED, payload["trace"], payload["trace_functions"])
    assert "patched function(s) not compiling as one graph: mm_fp4[cutlass], mm_fp4[trtllm], mm_fp4[auto]" in hint


def test_unknown_function_is_a_usage_error() -> None:
    done = run_cli("scan", "--function", "no_such_function")
    assert done.returncode == 2
    assert done.stderr.startswith("fp4patch: error: --function no_such_function: not a scan entry; choose from fp4_quantize,")
    close = run_cli("scan", "--function", "mm_fp5[cutlass]")
    assert close.returncode == 2 and "did you mean mm_fp4[cutlass]?" in close.stderr


@pytest.mark.parametrize(("given", "meant"), [
    ("mm-fp4", "mm_fp4"),  # suggested bmm_fp8: the base name was no candidate, and '-' counted against it
    ("MM_FP4", "mm_fp4"),
    ("fp4-quantize", "fp4_quantize"),
    ("nvfp4_quantize[per_token]", "nvfp4_quantize[per-token]"),
])
def test_a_misspelt_function_suggests_the_name_equal_but_for_dashes_and_case(given: str, meant: str) -> None:
    done = run_cli("scan", "--function", given)
    assert done.returncode == 2
    assert done.stderr.startswith(f"fp4patch: error: --function {given}: not a scan entry; did you mean {meant}? choose from "), done.stderr


def test_a_base_name_selects_every_variant(tmp_path_factory) -> None:
    """`fp4patch scan --function mm_fp4`, as `scan --help` and docs/commands.md write it: each backend."""
    site = applied_site("0.6.0", tmp_path_factory)
    done = run_cli("scan", "--site-packages", str(site), "--function", "mm_fp4", "--json")
    assert done.returncode == 0, done.stderr
    assert [r["name"] for r in json.loads(done.stdout)["functions"]] == ["mm_fp4[cutlass]", "mm_fp4[trtllm]", "mm_fp4[auto]"]
    done = run_cli("scan", "--site-packages", str(site), "--function", "mxfp8_quantize", "--function", "mxfp8_quantize[cuda]", "--json")
    assert done.returncode == 0, done.stderr
    # the default call and each variant, once
    assert [r["name"] for r in json.loads(done.stdout)["functions"]] == ["mxfp8_quantize", "mxfp8_quantize[cuda]", "mxfp8_quantize[cute-dsl]"]


def test_rendering_of_each_status(monkeypatch: pytest.MonkeyPatch) -> None:
    """The log lines and the terminal table show each status as documented (results made here, not scanned)."""
    monkeypatch.setenv("COLUMNS", "200")  # a log this wide: no line wraps (another test of the worker may have set it)
    from rich.console import Console

    from fp4patch.cli.render import scan_summary, scan_table

    base = dict.fromkeys(("graphs", "graph_breaks", "ops", "error", "explanation", "raised", "location", "source", "defined_at"))
    results = [
        {**base, "name": "fp4_quantize", "function": "fp4_quantize", "spec": "fp4-quantize-fullgraph", "status": "compiles", "passed": True,
         "graphs": 1, "graph_breaks": 0, "ops": ["fp4patch::fp4_quantize"]},
        {**base, "name": "mm_fp4[auto]", "function": "mm_fp4", "spec": "mm-fp4-fullgraph", "status": "fails", "passed": False,
         "error": "Unsupported: setattr() on unsupported type", "location": "flashinfer/utils.py:1575",
         "source": "wrapper.dropped_experimental_backends = []"},
        {**base, "name": "mm_fp4[cutlass]", "function": "mm_fp4", "spec": "mm-fp4-fullgraph", "status": "fails", "passed": False,
         "error": "Unsupported: Observed exception", "raised": "RuntimeError('cuDNN is not available.')",
         "location": "flashinfer/gemm/gemm_base.py:1137", "source": "raise RuntimeError("},
        {**base, "name": "rmsnorm_quant", "function": "rmsnorm_quant", "spec": "rmsnorm-quant-fullgraph", "status": "not-present", "passed": False},
    ]
    for r in results:
        validate("scan_result", r)
    assert scan_lines(results) == [
        "  fp4_quantize     compiles (1 graph, ops: fp4patch::fp4_quantize)",
        "  mm_fp4[auto]     Unsupported: setattr() on unsupported type at flashinfer/utils.py:1575: wrapper.dropped_experimental_backends = []",
        ("  mm_fp4[cutlass]  Unsupported: Observed exception (RuntimeError('cuDNN is not available.'))"
        " at flashinfer/gemm/gemm_base.py:1137: raise RuntimeError("),
        "  rmsnorm_quant    not present",
    ]
    assert scan_summary(results) == "1/3 present functions compile as one graph"
    console = Console(width=300, record=True, color_system=None)
    console.print(scan_table("t", results))
    text = console.export_text()
    assert "mm_fp4[auto]" in text  # square brackets are not taken for rich markup
    for needle in ("compiles (1 graph, ops: fp4patch::fp4_quantize)", "flashinfer/utils.py:1575", "not-present"):
        assert needle in text


def test_flashinfer_api_logging_on_stdout_does_not_break_the_probes(tmp_path_factory) -> None:
    """FLASHINFER_LOGLEVEL=3 (FlashInfer's @flashinfer_api logging, FLASHINFER_LOGDEST default stdout)
    prints a banner on stdout at import: ``scan`` and ``verify --trace`` still read their probe's JSON,
    and the patched fp4_quantize compiles with the logging wrapper on."""
    site = applied_site("0.6.0", tmp_path_factory, "fp4-quantize-fullgraph")
    env = {"FLASHINFER_LOGLEVEL": "3"}
    done = run_cli("scan", "--site-packages", str(site), "--json", "--function", "fp4_quantize", env=env)
    assert done.returncode == 0, done.stderr
    # a base name also selects its variants (fp4_quantize[cuda], ... where the release has them)
    (result,) = [r for r in json.loads(done.stdout)["functions"] if r["name"] == "fp4_quantize"]
    assert result["passed"], result
    done = run_cli("verify", "--trace", "--spec", "fp4-quantize-fullgraph", "--site-packages", str(site), "--json", env=env)
    assert done.returncode in (0, 1) and not done.stderr.strip(), done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["trace"] and all(case["passed"] for case in report["trace"]), report["trace"]
    functions = {f["name"]: f["passed"] for f in report["trace_functions"]}
    assert functions["fp4_quantize"], report["trace_functions"]


def test_nvfp4_and_mxfp4_quantize_compile_with_api_logging_on(tmp_path_factory) -> None:
    """FLASHINFER_LOGLEVEL=3 gives nvfp4_quantize and mxfp4_quantize their own @flashinfer_api
    logging wrapper (datetime.now: Dynamo cannot trace it); the spec's ``callers`` bypass it while
    compiling, and without the spec the same call stops at that wrapper (so this can fail)."""
    env = {"FLASHINFER_LOGLEVEL": "3"}
    names = ("--function", "nvfp4_quantize", "--function", "mxfp4_quantize")
    site = applied_site("0.6.0", tmp_path_factory, "fp4-quantize-fullgraph")
    done = run_cli("scan", "--site-packages", str(site), "--json", *names, env=env)
    assert done.returncode == 0, done.stderr
    results = [f for f in json.loads(done.stdout)["functions"] if "[" not in f["name"]]  # the default calls
    assert [f["name"] for f in results] == ["nvfp4_quantize", "mxfp4_quantize"]
    failing = [(f["name"], f["error"]) for f in results if not f["passed"]]
    assert not failing, failing
    pristine = release_site("0.6.0", tmp_path_factory, bytecode=True)
    unpatched = json.loads(run_cli("scan", "--site-packages", str(pristine), "--json", *names, env=env).stdout)["functions"]
    assert not any(f["passed"] for f in unpatched), unpatched


def test_a_release_s_call_arguments_come_from_its_release_data(tmp_path_factory) -> None:
    """0.7.2 (SGLang 0.5.23's pin; 0.7.2.post1 is vLLM 0.33.0's) takes ``mxfp8_grouped_quantize(backend="cutile" |
    "cake")`` only; 0.7.4 adds ``"cuda"``. The scan's call takes its backend from the release data the op is
    rendered from (the wrapper's default where that data lists it), so after apply the function compiles on 0.7.2,
    and the ``[cuda]`` variant is reported not present there; on 0.7.4 both compile. (The probe passed
    ``backend="cuda"`` on every release, and ``verify --trace`` failed on both engine pins.)"""
    on_072 = {r["name"]: r for r in scan(applied_site("0.7.2", tmp_path_factory))["functions"]}
    r = on_072["mxfp8_grouped_quantize"]
    assert r["status"] == "compiles" and r["release_args"] == {"backend": "'cutile'"} and r["call"]["backend"] == "'cutile'", r
    variant = on_072["mxfp8_grouped_quantize[cuda]"]
    assert variant["status"] == "not-present" and variant["error"] == "mxfp8_grouped_quantize takes no backend 'cuda' in this release", variant
    assert on_072["fp4_quantize[cute-dsl]"]["status"] == "compiles"  # a backend 0.7.2 has: the variant runs


def test_the_root_cause_behind_a_fake_tensor_error_is_shown(tmp_path_factory) -> None:
    """Without fp4patch's release data (the probe run by hand), ``backend="cuda"`` on 0.7.2 reaches the op's fake,
    which refuses it as the wrapper does; Dynamo reports only "RuntimeError when making fake tensor call", and the
    scan names the exception behind it and where it was raised, also in the log line."""
    import subprocess
    import sys

    site = applied_site("0.7.2", tmp_path_factory)
    done = subprocess.run(
        [sys.executable, str(REPO / "fp4patch" / "probes" / "scan_probe.py"), "--json", "--path", str(site), "--only", "mxfp8_grouped_quantize[cuda]",
         "--forms", "nested"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    (r,) = json.loads(done.stdout)["results"]
    assert r["status"] == "fails" and r["error"].startswith("TorchRuntimeError: RuntimeError when making fake tensor call"), r
    assert r["root_cause"] == "ValueError: Unsupported backend for mxfp8_grouped_quantize: 'cuda'", r
    assert r["root_location"].startswith("flashinfer/quantization/fp8_quantization.py:"), r
    line = " ".join(piece.strip() for piece in scan_lines([r]))  # wrapped at the log width
    assert "(root cause: ValueError: Unsupported backend for mxfp8_grouped_quantize: 'cuda' at flashinfer/quantization/fp8_quantization.py:" in line


def test_a_failed_trace_case_and_a_long_summary_keep_the_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace case whose compile failed before Dynamo counted breaks or made a graph (``verify --trace --json``
    with fp4-quantize-compiler-disable applied) has ``graph_breaks`` and ``custom_ops`` null, which the schema
    allows; the scan's summary line wraps at the log width like every other line (it ran to 225 columns)."""
    from fp4patch.cli.render import scan_summary, wrap

    validate("trace_case", {"name": "m1-k64", "passed": False, "graphs": 0, "graph_breaks": None, "custom_ops": None,
                            "error": "Unsupported: Skip calling `torch.compiler.disable()`d function"})
    monkeypatch.delenv("COLUMNS", raising=False)
    results = [{"name": f"function_number_{i}", "status": "left-out"} for i in range(12)]
    lines = wrap(scan_summary(results))
    assert len(lines) > 1 and all(len(line) <= 160 for line in lines), lines
