"""``fp4patch.fake_check``: the product's check of an op's fake against the installed wrapper, on CPU.

* With the default specs applied to the real 0.6.0 and 0.7.4 wheels, ``run_fake_check`` passes for each
  quantizer op there (``fp4_quantize`` with its CUDA and CuTe-DSL paths, the batched / grouped / experts
  NVFP4 and MXFP8 quantizers), every case of its grid compared or deliberately skipped.
* On a synthetic release (a copy of the applied 0.7.4 with FlashInfer's own source edited) it fails for a
  changed output allocation the fake mirrors (the swizzled scale-factor padding of
  ``nvfp4_batched_quantize``'s kernel entry, ``mxfp8_quantize``'s linear scale-factor size), naming the
  output that differs, and still passes where the edit is one the fake does not depend on (a comment and a
  log line in ``fp4_quantize`` and ``mxfp8_grouped_quantize``).
* The parts that need no FlashInfer: a request without a grid, the failure lines, the requests built from
  the specs, and the rule that the probe, the oracle and the grids import nothing of fp4patch.

One child interpreter per site-packages (each ``run_fake_check`` call runs one for all its functions).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

from fp4patch.custom_op import CustomOpTarget
from fp4patch.environment import from_site_packages
from fp4patch.errors import EnvironmentProblem
from fp4patch.fake_check import FAKE_CHECK_PROBE, ORACLE, FakeCheckRequest, describe_failure, requests_for, run_fake_check

from . import op_grids
from .conftest import REPO, applied_site

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)")
GRIDS = REPO / "patches" / "flashinfer-python" / "grids"
QUANTIZERS = [
    "fp4_quantize",
    "nvfp4_batched_quantize",
    "scaled_fp4_grouped_quantize",
    "silu_and_mul_scaled_nvfp4_experts_quantize",
    "mxfp8_quantize",
    "mxfp8_grouped_quantize",
    "silu_and_mul_mxfp8_experts_quantize",
]


def _requests(version: str, functions: list[str] = QUANTIZERS) -> list[FakeCheckRequest]:
    """The fake check's requests for the functions whose fullgraph spec patches ``version``."""
    found = []
    for function in functions:
        spec = op_grids.specs()[op_grids.spec_id(function)]
        for target in spec.targets_for(version):
            if not target.status:
                found += requests_for(spec, target)
    return found


@pytest.mark.torch
@needs_torch
@pytest.mark.parametrize("version", ["0.6.0", "0.7.4"])
def test_default_specs_pass_the_fake_check(version: str, tmp_path_factory) -> None:
    site = applied_site(version, tmp_path_factory)
    requests = _requests(version)
    present = [r.function for r in requests]
    # 0.6.0 predates the grouped MXFP8 quantizers (0.6.14, 0.7.4): their specs declare it not-needed
    assert present == (QUANTIZERS if version == "0.7.4" else [f for f in QUANTIZERS if "mxfp8_" not in f or f == "mxfp8_quantize"])
    results = run_fake_check(from_site_packages(site), site, requests)
    assert list(results) == present
    for request in requests:
        r = results[request.function]
        assert r.ok, f"{version} {request.function}: {r}"
        grid = op_grids.grid_module(request.grid).cases(frozenset(request.params), request.release)
        assert r.cases == len(grid) and r.compared + r.skipped_kernel == r.cases and r.compared > 0, r
        assert r.skipped_kernel == sum(1 for c in grid if c.get("kernel") is not None)
    if version == "0.7.4":  # the CuTe-DSL grid ran too (the TMA sizes, the environment, SM107)
        assert results["fp4_quantize"].compared > 1000


# Edits of FlashInfer 0.7.4's own source (flashinfer/quantization/), each (file, text, replacement, count).
CHANGED_ALLOCATION = [
    # nvfp4_batched_quantize's kernel entry fp4_batched_quantize_sm100: the scale factors' rows padded to 8, not 128
    ("fp4_quantization.py", "(b, _compute_swizzled_layout_sf_size(m, k // sf_vec_size, 128)),",
     "(b, _compute_swizzled_layout_sf_size(m, k // sf_vec_size, 8)),"),
    # mxfp8_quantize's kernel entry mxfp8_quantize_sm100: a linear layout of twice the scale factors
    ("fp8_quantization.py", "                out_sf_size = m * padded_k // 32\n", "                out_sf_size = m * padded_k // 16\n"),
]
HARMLESS = [
    # a comment and a log line in fp4_quantize, before it resolves its recipe
    ("fp4_quantization.py", "    nvfp4_4over6_config = _resolve_fp4_quantize_recipe(\n",
     ("    # fp4patch test: a comment and a log line the fake does not depend on\n"
      "    __import__(\"logging\").getLogger(__name__).debug(\"fp4_quantize: %s\", tuple(input.shape))\n"
      "    nvfp4_4over6_config = _resolve_fp4_quantize_recipe(\n")),
    # a log line in mxfp8_grouped_quantize, first after fp4patch's redirect
    ("fp8_quantization.py", "            backend=backend,\n        )\n\n    if backend not in (",
     ("            backend=backend,\n        )\n"
      "    __import__(\"logging\").getLogger(__name__).info(\"mxfp8_grouped_quantize backend %s\", backend)  # fp4patch test\n"
      "\n    if backend not in (")),
]


def _edited_copy(source: Path, target: Path, edits: list[tuple[str, str, str]]) -> Path:
    """A hard-linked copy of the site-packages ``source`` with ``edits`` made to new copies of the files."""
    shutil.copytree(source, target, symlinks=True, copy_function=os.link)
    for name, old, new in edits:
        path = target / "flashinfer" / "quantization" / name
        text = path.read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{name}: the edit's anchor is not there once: {old!r}"
        path.unlink()  # a new file: the shared pristine and applied copies keep theirs
        path.write_text(text.replace(old, new), encoding="utf-8")
    return target


@pytest.mark.torch
@needs_torch
def test_a_changed_allocation_fails_and_a_harmless_change_passes(tmp_path: Path, tmp_path_factory) -> None:
    site = _edited_copy(applied_site("0.7.4", tmp_path_factory), tmp_path / "site", CHANGED_ALLOCATION + HARMLESS)
    functions = ["nvfp4_batched_quantize", "mxfp8_quantize", "fp4_quantize", "mxfp8_grouped_quantize"]
    results = run_fake_check(from_site_packages(site), site, _requests("0.7.4", functions))
    batched, mxfp8 = results["nvfp4_batched_quantize"], results["mxfp8_quantize"]
    assert not batched.ok and not batched.error and batched.failures, batched
    # every case with an output fails on the scale factors alone (rows padded to 8: smaller, unless M = 0)
    assert all(": output 1 (sf): wrapper (" in f for f in batched.failures), batched.failures
    assert any(f.startswith("B=3 M=129 K=128 bf16: output 1 (sf): wrapper (3, 1088) stride (1088, 1) uint8, fake (3, 2048)") for f in batched.failures), batched.failures
    assert not any("M=0" in f for f in batched.failures)  # no rows: the same size either way
    assert not mxfp8.ok and mxfp8.failures, mxfp8
    linear = [f for f in mxfp8.failures if "linear" in f]
    assert linear and all(": output 1 (sf): wrapper (" in f for f in mxfp8.failures), mxfp8.failures
    assert not any("128x4" in f for f in mxfp8.failures)  # only the linear layout's size changed
    for function in ("fp4_quantize", "mxfp8_grouped_quantize"):
        assert results[function].ok, f"{function}: {results[function]}"


def test_a_missing_grid_is_not_ok_and_starts_no_probe(tmp_path: Path) -> None:
    env = from_site_packages(tmp_path)
    results = run_fake_check(env, tmp_path, [FakeCheckRequest("mm_fp4", tmp_path / "grids" / "mm_fp4.py", ("a", "b"), {})])
    assert not results["mm_fp4"].ok and "no case grid for mm_fp4" in results["mm_fp4"].error


@pytest.mark.torch
@needs_torch
def test_a_site_without_flashinfer_is_an_environment_problem(tmp_path: Path) -> None:
    if importlib.util.find_spec("flashinfer") is not None:
        pytest.skip("flashinfer is installed in this interpreter")
    with pytest.raises(EnvironmentProblem, match="fake check could not run"):
        run_fake_check(from_site_packages(tmp_path), tmp_path, _requests("0.7.4", ["mxfp8_quantize"]))


def test_failure_lines_name_the_first_differing_output() -> None:
    x_q = [[129, 32], [32, 1], "torch.uint8"]
    real = {"ok": [x_q, [[129, 4], [4, 1], "torch.uint8"]]}
    fake = {"ok": [x_q, [[256, 4], [4, 1], "torch.uint8"]]}
    assert describe_failure("M=129", real, fake, ("x_q", "sf")) == (
        "M=129: output 1 (sf): wrapper (129, 4) stride (4, 1) uint8, fake (256, 4) stride (4, 1) uint8"
    )
    raised = {"error": ["ValueError", "Unknown backend: x"]}
    assert describe_failure("backend=x", real, raised) == (
        "backend=x: wrapper returned (129, 32) stride (32, 1) uint8, (129, 4) stride (4, 1) uint8; fake raised ValueError: Unknown backend: x"
    )
    handed_back = {"ok": [x_q[:3] + ["out"]]}
    assert describe_failure("out=", handed_back, {"ok": [x_q]}) == (
        "out=: output 0: wrapper (129, 32) stride (32, 1) uint8 (the argument out), fake (129, 32) stride (32, 1) uint8"
    )
    assert describe_failure("refusal", None, {"ok": [x_q]}).startswith("refusal: the fake should refuse this call")


def test_requests_carry_each_target_s_params_and_release_data() -> None:
    for spec in op_grids.specs().values():
        for target in spec.targets:
            requests = requests_for(spec, target)
            ops = [kwargs["target"] for kind, kwargs in target.operation_specs if kind == "custom-op"]
            assert [r.function for r in requests] == [op.function for op in ops]
            for request, op in zip(requests, ops):
                assert isinstance(op, CustomOpTarget)
                assert request.params == op.params and request.grid == spec.path.parent / "grids" / f"{op.function}.py"
                # the op source's RELEASE defaults, with the target's own data on top
                (node,) = [n for n in ast.parse(op.source).body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "RELEASE"]
                assert request.release == {**ast.literal_eval(node.value), **op.release}
    for function in QUANTIZERS:  # each quantizer op has its grid
        assert (GRIDS / f"{function}.py").is_file()


def _module_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add("." if node.level else (node.module or "").split(".")[0])
    return names


def test_probe_oracle_and_grids_import_only_the_standard_library() -> None:
    """They run by path where fp4patch is not installed: no fp4patch, no relative import, nothing but the
    standard library at module level (torch and FlashInfer are imported inside their functions)."""
    for path in [FAKE_CHECK_PROBE, ORACLE, *sorted(GRIDS.glob("*.py"))]:
        imported = _module_level_imports(path) - {"__future__"}
        assert imported <= set(sys.stdlib_module_names), f"{path.name}: {sorted(imported - set(sys.stdlib_module_names))}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0 and not (node.module or "").startswith("fp4patch"), f"{path.name}:{node.lineno}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("fp4patch") for a in node.names), f"{path.name}:{node.lineno}"


def _wheel_releases() -> list[str]:
    from fp4patch.catalog import load_catalog

    return [str(r.version) for r in load_catalog().releases if r.archive == "wheel"]


@pytest.mark.torch
@needs_torch
@pytest.mark.eras
@pytest.mark.parametrize("version", _wheel_releases())
def test_every_wheel_release_passes_the_fake_check_on_its_own_targets(version: str, tmp_path_factory) -> None:
    """On every wheel release (``make test-eras``), each op with a case grid passes the product's check
    on the release's own target: a grid or stub gap there would refuse a release fp4patch does not know
    for nothing (0.7.2's Cake launcher, imported by the kernel entry, was one)."""
    from fp4patch.states import APPLIED

    site = applied_site(version, tmp_path_factory)
    import json

    from .conftest import run_cli

    status = {r["id"]: r["state"] for r in json.loads(run_cli("status", "--site-packages", str(site), "--json", check=True).stdout)["specs"]}
    requests = []
    for spec_id, spec in op_grids.specs().items():
        if status.get(spec_id) != APPLIED:
            continue
        for target in spec.targets_for(version):
            if not target.status:
                requests += [r for r in requests_for(spec, target) if r.grid.is_file()]
    if not requests:
        pytest.skip(f"no op with a case grid is applied on {version}")
    results = run_fake_check(from_site_packages(site), site, requests)
    bad = {f: r for f, r in results.items() if not r.ok}
    assert not bad, f"{version}: " + "; ".join(f"{f}: {r.error or r.failures[:2] or r.unchecked[:2] or r.not_visible[:2]}" for f, r in bad.items())
