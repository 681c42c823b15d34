"""The next FlashInfer release, carried further (issue 24): a parameter added with a default, a left-out spec.

The acceptance case is a synthetic 0.7.5: the real 0.7.4 wheel relabelled (``test_unlisted_release.relabel``),
its ``fp4_quantize`` gaining a trailing ``sf_round_up: bool = False`` that the wrapper reads (``True`` raises a
``ValueError`` of this synthetic release: where it is raised shows that the caller's value reached FlashInfer's
own code). fp4patch has never seen it: ``fp4-quantize-fullgraph`` takes 0.7.4's target *carried*: checked on
CPU at the default, applied, its redirect refusing any other value under compile with fp4patch's own first line.

A second synthetic 0.7.5 adds ``sf_round_up`` with a default fp4patch cannot compare (``bool(0)``): refused, and
the advice followed literally (``apply --skip``, then ``verify --trace --skip``) ends in exit 0. A third run gives
``--site-packages`` with ``--python`` an interpreter without torch (fp4patch installed apart from torch): the spec
stays ``needs-check``, as ``status`` says, and the same command with ``--python`` an interpreter with torch applies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, release_site, run_cli, snapshot
from .test_unlisted_release import relabel, replace_in

SPEC = "fp4-quantize-fullgraph"
FILE = "flashinfer/quantization/fp4_quantization.py"
SIGNATURE_END = "    batch_invariant: bool = False,\n) -> Tuple[torch.Tensor, torch.Tensor]:\n    r\"\"\"Quantize input tensor to FP4 format."
BODY_START = (
    "nvfp4_4over6_config=<same value>)``.\n    \"\"\"\n    if sf_vec_size != 16 and sf_vec_size != 32:\n"
    "        raise NotImplementedError(\"sf_vec_size can only be 16 or 32\")\n"
)
ROUND_UP_ERROR = "sf_round_up=True: this synthetic 0.7.5 rounds scale factors up"


def synthetic_075(source: Path, target: Path, default: str = "False") -> Path:
    """0.7.4 relabelled 0.7.5 whose ``fp4_quantize`` takes ``sf_round_up: bool = <default>`` last and raises
    :data:`ROUND_UP_ERROR` when it is true (checked first in its body)."""
    site = relabel(source, target, "0.7.5")
    replace_in(site, FILE, SIGNATURE_END, SIGNATURE_END.replace("    batch_invariant: bool = False,\n", f"    batch_invariant: bool = False,\n    sf_round_up: bool = {default},\n"))
    replace_in(site, FILE, BODY_START, BODY_START + f"    if sf_round_up:\n        raise ValueError({ROUND_UP_ERROR!r})\n")
    return site


def reports(site: Path, *extra: str) -> dict[str, dict]:
    done = run_cli("status", "--site-packages", str(site), "--json", *extra, check=True)
    return {r["id"]: r for r in json.loads(done.stdout)["specs"]}


# --------------------------------------------------------------------------- what can be carried (no FlashInfer import)
def _fp4_target_074():
    from fp4patch.catalog.spec import load_specs

    spec = next(s for s in load_specs(None) if s.id == SPEC)
    return spec, next(t for t in spec.targets if t.contains("0.7.4") and not t.status)


def _rows(target) -> list[list[str]]:
    from fp4patch.catalog.catalog_file import load_catalog

    (entry,) = [e for e in load_catalog().evidence[SPEC] if e.target == str(target.versions)]
    return [list(row) for row in entry.signature]


@pytest.mark.parametrize(("change", "carried", "refusal"), [
    (lambda rows: [*rows, ["sf_round_up", "keyword-only", "False"]], [("sf_round_up", "False")], ""),
    (lambda rows: [*rows, ["mode", "keyword-only", "'fast'"], ["layout", "keyword-only", "SfLayout.layout_128x4"]],
     [("mode", "'fast'"), ("layout", "SfLayout.layout_128x4")], ""),
    (lambda rows: [*rows, ["sf_round_up", "keyword-only", ""]], [], "parameter 'sf_round_up' added without a default"),
    (lambda rows: [*rows, ["sf_round_up", "keyword-only", "bool(0)"]], [], "parameter 'sf_round_up' added with the default bool(0), which fp4patch cannot compare"),
    (lambda rows: [*rows, ["kwargs", "**kwargs", ""]], [], "parameter 'kwargs' added as **kwargs"),
    (lambda rows: [r for r in rows if r[0] != "enable_pdl"], [], "parameter 'enable_pdl' removed"),
    (lambda rows: [["x", *r[1:]] if r[0] == "input" else r for r in rows], [], "parameter 'input' renamed to 'x'"),
    (lambda rows: [[r[0], r[1], "'cuda'"] if r[0] == "backend" else r for r in rows], [], "default of 'backend' is 'cuda', was 'auto'"),
    (lambda rows: [*rows, ["sf_round_up", "keyword-only", "False"], ["x", "keyword-only", ""]], [], "parameter 'x' added without a default"),
])
def test_only_parameters_added_with_a_comparable_default_are_carried(change, carried: list, refusal: str) -> None:
    """Against 0.7.4's verified signature of fp4_quantize: added parameters whose default is a constant or a dotted
    name are carried; one without a default (a call must pass it), with a default fp4patch cannot compare, as
    ``**kwargs``, or any other change (removed, renamed, another default) refuses the whole target, naming it."""
    from fp4patch.catalog.evidence import carriable

    _, target = _fp4_target_074()
    verified = _rows(target)
    got, refusals = carriable(change(verified), verified, "fp4_quantize", target)
    assert got == carried
    assert (not refusals) if not refusal else any(refusal in r for r in refusals), refusals


def test_a_parameter_the_op_source_binds_to_another_default_is_not_carried() -> None:
    """0.7.4's target on a release whose fp4_quantize lost batch_invariant and then gained it back with another
    default: the op binds an absent ``batch_invariant`` to ``False``, so a wrapper default of ``True`` would not
    be what the fake mirrors."""
    from fp4patch.catalog.evidence import carriable

    spec = next(s for s in __import__("fp4patch.catalog.spec", fromlist=["load_specs"]).load_specs(None) if s.id == SPEC)
    target = next(t for t in spec.targets if t.contains("0.7.1") and not t.status)  # no batch_invariant yet
    verified = [list(r) for r in next(e for e in __import__("fp4patch.catalog.catalog_file", fromlist=["x"]).load_catalog().evidence[SPEC]
                                      if e.target == str(target.versions)).signature]
    assert carriable([*verified, ["batch_invariant", "keyword-only", "False"]], verified, "fp4_quantize", target) == ([("batch_invariant", "False")], [])
    got, refusals = carriable([*verified, ["batch_invariant", "keyword-only", "True"]], verified, "fp4_quantize", target)
    assert got == [] and "the op binds it to False on releases without it" in refusals[0], refusals


def test_a_parameter_the_op_models_release_by_release_is_not_carried() -> None:
    """0.6.14 as if unseen: trtllm_fp8_per_tensor_scale_moe gained ``output``, whose checks the op source keeps as
    release data (``output_check``, ``output_checked_unfinalized``: 'none' before 0.6.14, where there is no
    output): the nearest target's data describe a release without it, so it is refused, not carried."""
    from fp4patch.catalog.catalog_file import load_catalog
    from fp4patch.catalog.evidence import carriable
    from fp4patch.catalog.spec import load_specs

    spec = next(s for s in load_specs(None) if s.id == "trtllm-fp8-per-tensor-scale-moe-fullgraph")
    target = next(t for t in spec.targets if t.contains("0.6.13") and not t.status)
    verified = [list(r) for r in next(e for e in load_catalog().evidence[spec.id] if e.target == str(target.versions)).signature]
    got, refusals = carriable([*verified, ["output", "positional", "None"]], verified, "trtllm_fp8_per_tensor_scale_moe", target)
    assert got == [] and "the op models it release by release (output_check, output_checked_unfinalized of its RELEASE)" in refusals[0], refusals


def test_a_carried_target_renders_the_guard_and_takes_the_new_parameter_as_the_wrappers() -> None:
    """The carried target's redirect refuses another value first (the rendering of every other target is
    unchanged: tests/test_rendered_bytes.py), and its drift check accepts the new parameter."""
    from fp4patch.catalog.evidence import carried_target

    _, target = _fp4_target_074()
    plain = target.operation_specs[0][1]["target"]
    moved = carried_target(target, [("sf_round_up", "False")], "0.7.5", "0.7.4")
    kwargs = moved.operation_specs[0][1]
    assert kwargs["anchor_params"][-1] == "sf_round_up" and kwargs["target"].params == plain.params
    (op,) = moved.custom_ops
    (original,) = target.custom_ops
    assert op.redirect.replace(
        "    if not (sf_round_up is False):  # sf_round_up: new in FlashInfer 0.7.5, checked at its default only\n"
        "        _fp4patch_fp4_quantize_refuse_carried('sf_round_up', sf_round_up, 'False')\n", "") == original.redirect
    assert "def _fp4patch_fp4_quantize_refuse_carried(name, value, default):" in op.block
    assert "refuse_carried" not in original.block and "refuse_carried" not in original.redirect
    assert carried_target(target, [], "0.7.5", "0.7.4") is target


def test_a_function_moved_with_the_same_code_is_applied_where_it_is_defined_now(tmp_path: Path, tmp_path_factory) -> None:
    """0.7.4 relabelled 0.7.5 whose mxfp8_quantize (with the whole module) moved to another file, the old module
    importing it from there: the same code as verified on 0.7.4, taken at the new file and said so."""
    from packaging.version import Version

    from fp4patch.catalog.catalog_file import load_catalog
    from fp4patch.catalog.evidence import SAME_CODE, resolve
    from fp4patch.catalog.fingerprint import ModuleReader
    from fp4patch.catalog.spec import load_specs

    site = relabel(release_site("0.7.4", tmp_path_factory, sources_only=True), tmp_path / "site", "0.7.5")
    old, new = "flashinfer/quantization/fp8_quantization.py", "flashinfer/quantization/fp8_quantization_impl.py"
    text = (site / old).read_text(encoding="utf-8")
    (site / new).write_text(text, encoding="utf-8")  # the same package: its relative imports still hold
    (site / old).unlink()  # a hard link into the shared unpack: replace, never write through
    (site / old).write_text("from .fp8_quantization_impl import *  # noqa: F403\nfrom .fp8_quantization_impl import mxfp8_quantize\n", encoding="utf-8")
    spec = next(s for s in load_specs(None) if s.id == "mxfp8-quantize-fullgraph")
    resolution = resolve(spec, Version("0.7.5"), load_catalog(), ModuleReader(site))
    basis = resolution.basis
    assert basis.kind == SAME_CODE and basis.release == "0.7.4" and basis.moved == (old, new), basis
    assert [t.file for t in resolution.targets] == [new]
    assert basis.describe() == f"as verified on 0.7.4, same code; moved from {old} to {new}"


def test_scan_leaves_out_what_skip_names_and_counts_it_apart() -> None:
    from fp4patch.cli.render import scan_detail, scan_summary
    from fp4patch.checks.trace import leave_out

    results = [
        {"name": "fp4_quantize", "spec": SPEC, "status": "fails", "passed": False, "error": "Unsupported: ..."},
        {"name": "mxfp4_quantize", "spec": SPEC, "status": "compiles", "passed": True, "ops": ["fp4patch.x"]},
        {"name": "mm_fp4", "spec": "mm-fp4-fullgraph", "status": "compiles", "passed": True, "ops": ["fp4patch.y"]},
    ]
    out = leave_out(results, [SPEC])
    assert [r["status"] for r in out] == ["left-out", "compiles", "compiles"]
    assert out[0]["scanned"] == "fails" and scan_detail(out[0]) == f"left out with --skip {SPEC} (the scan saw: fails)"
    assert scan_summary(out) == "2/2 present functions compile as one graph; 1 left out with --skip, not counted (fp4_quantize)"
    assert leave_out(results, None) == results


def test_status_apply_and_verify_say_left_out_alike(site_060: Path) -> None:
    """``--skip`` is one act: status lists the spec as left out (its state shown all the same), apply and verify
    print the same line, and an unknown id is the same usage error everywhere."""
    line = "left out mm-fp4-fullgraph: --skip"
    status = run_cli("status", "--site-packages", str(site_060), "--skip", "mm-fp4-fullgraph", check=True)
    assert line in status.stdout.splitlines()
    from .test_scan import validate

    payload = json.loads(run_cli("status", "--site-packages", str(site_060), "--skip", "mm-fp4-fullgraph", "--json", check=True).stdout)
    validate("status", payload)
    assert payload["left_out"] == ["mm-fp4-fullgraph"] and "mm-fp4-fullgraph" in {r["id"] for r in payload["specs"]}
    applied = json.loads(run_cli("apply", "--site-packages", str(site_060), "--skip", "mm-fp4-fullgraph", "--json", check=True).stdout)
    validate("apply", applied)
    assert {"id": "mm-fp4-fullgraph", "state": "applicable", "detail": "--skip"} in applied["left_out"]
    again = run_cli("apply", "--site-packages", str(site_060), "--skip", "mm-fp4-fullgraph", check=True)
    assert line in again.stdout.splitlines()
    verified = run_cli("verify", "--site-packages", str(site_060), "--skip", "mm-fp4-fullgraph")
    assert verified.returncode == 0 and line in verified.stdout.splitlines(), verified.stdout
    payload = json.loads(run_cli("verify", "--site-packages", str(site_060), "--skip", "mm-fp4-fullgraph", "--json").stdout)
    validate("verify", payload)
    assert payload["ok"] and payload["left_out"] == ["mm-fp4-fullgraph"]
    for command in ("status", "apply", "verify", "scan"):
        done = run_cli(command, "--site-packages", str(site_060), "--skip", "mm-fp4")
        assert done.returncode == 2 and "unknown spec 'mm-fp4'" in done.stderr, (command, done.stderr)


def test_python_and_site_packages_together_name_the_files_and_the_interpreter(site_060: Path) -> None:
    """``--site-packages D --python P``: D's distribution, P's interpreter for what needs torch; both repeated in
    every command a message advises."""
    from fp4patch.target.environment import resolve as environment

    env = environment(sys.executable, site_060)
    assert env.paths == (str(site_060.resolve()),) and env.python == sys.executable
    assert env.options == ("--site-packages", str(site_060), "--python", sys.executable)
    done = run_cli("status", "--site-packages", str(site_060), "--python", sys.executable, "--json", check=True)
    assert json.loads(done.stdout)["version"] == "0.6.0"


@pytest.fixture(scope="module")
def carried(tmp_path_factory) -> dict:
    """The synthetic 0.7.5 (``sf_round_up: bool = False``), its status before, and ``apply``'s run."""
    root = tmp_path_factory.mktemp("next-release")
    site = synthetic_075(release_site("0.7.4", tmp_path_factory, bytecode=True), root / "site")
    pristine = snapshot(site)
    before = reports(site)
    applied = run_cli("apply", "--site-packages", str(site))
    return {"site": site, "pristine": pristine, "before": before, "apply": applied}


def test_status_says_the_spec_carries_the_new_parameter_and_waits_for_its_check(carried: dict) -> None:
    report = carried["before"][SPEC]
    assert report["state"] == "needs-check", report
    basis = report["basis"]
    assert basis["carried"] == [{"name": "sf_round_up", "default": "False"}] and basis["release"] == "0.7.4", basis
    assert basis["description"].startswith("carried with `sf_round_up` new in 0.7.5, to be checked at its default; ")


def test_apply_carries_it_checked_at_its_default_and_says_so(carried: dict) -> None:
    done = carried["apply"]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "0.7.5: fp4-quantize-fullgraph carried with `sf_round_up` new in 0.7.5, checked at its default (0.7.4's target" in done.stdout
    after = reports(carried["site"])[SPEC]
    assert after["state"] == "applied" and after["basis"]["kind"] == "checked", after
    assert after["basis"]["carried"] == [{"name": "sf_round_up", "default": "False"}]
    status = run_cli("status", "--site-packages", str(carried["site"]), check=True).stdout
    assert "carried with `sf_round_up` new in 0.7.5, checked at its default" in status


def test_the_guard_stands_only_in_the_carried_redirect(carried: dict) -> None:
    """The compile-time refusal is rendered where a parameter is carried (fp4_quantize's redirect) and nowhere
    else: the other ops of the same module keep their plain redirect."""
    text = (carried["site"] / FILE).read_text(encoding="utf-8")
    assert text.count("def _fp4patch_fp4_quantize_refuse_carried(") == 1
    assert "if not (sf_round_up is False):  # sf_round_up: new in FlashInfer 0.7.5, checked at its default only" in text
    assert "_fp4patch_fp4_quantize_refuse_carried('sf_round_up', sf_round_up, 'False')" in text
    assert text.count("_refuse_carried(") == 2  # its definition and the guard's call
    assert "constant(_fp4patch_fp4_quantize_refuse_carried)" in text  # Dynamo calls it, never traces it
    assert text.count("_refuse_carried") == 3  # those and the mark; no other op of the module has one


@pytest.mark.slow
def test_verify_trace_passes_on_the_carried_release(carried: dict) -> None:
    done = run_cli("verify", "--site-packages", str(carried["site"]), "--trace")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "fullgraph trace: 33/33 cases passed" in done.stdout and "verify: ok" in done.stdout


CHILD = r"""
import importlib.util, json, sys, warnings
site, probe, message = sys.argv[1:4]
sys.path.insert(0, site)
import torch, torch._dynamo
spec = importlib.util.spec_from_file_location("_next_release_scan_probe", probe)
scan = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = scan
spec.loader.exec_module(scan)
scan.install_device_stubs(torch)
import flashinfer
from torch._subclasses.fake_tensor import FakeTensorMode
warnings.simplefilter("ignore")
graphs = []
def backend(gm, example_inputs):
    graphs.append(gm)
    return gm.forward
mode = FakeTensorMode(allow_non_fake_inputs=True)
with mode:
    x = torch.empty((128, 64), dtype=torch.bfloat16, device="cuda")
    gs = torch.empty((1,), dtype=torch.float32, device="cuda")
out = {}
for name, fullgraph, kwargs in (("omitted", True, {}), ("default", True, {"sf_round_up": False}), ("other", True, {"sf_round_up": True}),
                                ("other-no-fullgraph", False, {"sf_round_up": True}), ("eager", None, {"sf_round_up": True})):
    torch._dynamo.reset()
    graphs.clear()
    call = lambda x, gs, kwargs=kwargs: flashinfer.fp4_quantize(x, gs, **kwargs)
    fn = call if fullgraph is None else torch.compile(call, fullgraph=fullgraph, backend=backend)
    try:
        with mode:
            fn(x, gs)
        ops = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function" and "fp4patch" in str(n.target)]
        out[name] = {"graphs": len(graphs), "ops": ops}
    except Exception as exc:
        out[name] = {"type": type(exc).__name__, "first": (str(exc).strip().splitlines() or [""])[0]}
print(message + json.dumps(out))
"""


@pytest.mark.torch
def test_a_compiled_call_at_the_default_is_one_graph_and_another_value_fails_with_fp4patchs_first_line(carried: dict) -> None:
    """Under ``torch.compile(fullgraph=True)`` on fake CUDA tensors: omitted or ``False``, one graph holding the op;
    ``True``, fp4patch's refusal as the first line (naming the function, the parameter and the release). Without
    ``fullgraph`` that refusal is a graph break: the call runs eagerly and FlashInfer's own code gets ``True``
    (its synthetic ``ValueError``), as an eager call does — the argument is never dropped nor reinterpreted."""
    mark = "FP4PATCH-NEXT-RELEASE "
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(carried["site"]), str(REPO / "fp4patch" / "probes" / "scan_probe.py"), mark],
        capture_output=True, text=True, timeout=600, check=False, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith(mark)), None)
    assert line, done.stdout[-2000:] + done.stderr[-3000:]
    out = json.loads(line[len(mark):])
    for name in ("omitted", "default"):
        assert out[name]["graphs"] == 1 and len(out[name]["ops"]) == 1 and out[name]["ops"][0].startswith("fp4patch.fp4_quantize_"), out
    assert out["omitted"]["ops"] == out["default"]["ops"]
    assert out["other"]["type"] == "Unsupported", out
    assert out["other"]["first"] == (
        "fp4patch: fp4_quantize(sf_round_up=True) is not supported under torch.compile on FlashInfer 0.7.5 (sf_round_up is new in 0.7.5: "
        "fp4patch carries the op verified on 0.7.4, checked at the default sf_round_up=False only); call it outside the compiled region, "
        "or with the default"
    )
    assert out["other-no-fullgraph"] == {"type": "ValueError", "first": ROUND_UP_ERROR}, out
    assert out["eager"] == {"type": "ValueError", "first": ROUND_UP_ERROR}, out


def test_revert_restores_the_synthetic_release_byte_for_byte(carried: dict, request) -> None:
    # last of the module's tests on this site (pytest runs them in file order)
    run_cli("revert", "--site-packages", str(carried["site"]), check=True)
    assert snapshot(carried["site"]) == carried["pristine"]


@pytest.mark.slow
def test_the_refusals_advice_followed_literally_ends_in_exit_0(tmp_path: Path, tmp_path_factory) -> None:
    """A parameter added with a default fp4patch cannot compare is refused; the refusal's own advice, run as
    printed: ``apply --skip`` applies the rest, and ``verify --trace --skip`` leaves the spec's trace cases out
    with it and passes."""
    site = synthetic_075(release_site("0.7.4", tmp_path_factory, bytecode=True), tmp_path / "site", default="bool(0)")
    status = reports(site)[SPEC]
    assert status["state"] == "drifted" and "parameter 'sf_round_up' added with the default bool(0)" in status["detail"], status
    refused = run_cli("apply", "--site-packages", str(site))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    first = refused.stderr.strip().splitlines()[-1]
    apply_cmd = f"fp4patch apply --site-packages {site} --skip {SPEC}"
    verify_cmd = f"fp4patch verify --site-packages {site} --skip {SPEC}"
    assert f"`{apply_cmd}` leaves it out, and `{verify_cmd}` checks the rest" in first, first
    done = run_cli(*apply_cmd.split()[1:])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"left out {SPEC}: --skip" in done.stdout
    verified = run_cli(*verify_cmd.split()[1:], "--trace")
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-2000:]
    assert f"left out {SPEC}: --skip" in verified.stdout
    assert f"fullgraph trace: left out (the trace probe's fp4_quantize cases are {SPEC}'s, left out with --skip {SPEC})" in verified.stdout
    assert "verify: ok" in verified.stdout


@pytest.mark.slow
def test_without_torch_the_spec_stays_needs_check_and_the_advised_python_applies_it(tmp_path: Path, tmp_path_factory) -> None:
    """fp4patch run with ``--site-packages`` and an interpreter without torch for the check: ``apply`` says
    ``needs-check`` as ``status`` does (the check did not run: not a failed one), writes nothing, and names
    ``--python``; given with ``--site-packages``, an interpreter with torch runs the check and the spec applies."""
    site = synthetic_075(release_site("0.7.4", tmp_path_factory, bytecode=True), tmp_path / "site")
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    pristine = snapshot(site)
    refused = run_cli("apply", "--site-packages", str(site), "--python", str(bare / "bin" / "python"))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert f"{SPEC}: needs-check: carried with `sf_round_up` new in 0.7.5" in line and "the CPU check could not run in" in line, line
    assert "pass `--python PATH`, an interpreter with torch" in line and "drifted" not in line.split(" — ")[0], line
    assert snapshot(site) == pristine
    assert reports(site)[SPEC]["state"] == "needs-check"
    done = run_cli("apply", "--site-packages", str(site), "--python", sys.executable, "--spec", SPEC)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "carried with `sf_round_up` new in 0.7.5, checked at its default" in done.stdout
    shutil.rmtree(bare)
