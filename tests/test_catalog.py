"""The release catalog, one real release per era, and ``verify --against``.

The full sweep over all 74 releases (with the trace probe) is ``make compat``; here one release
per era of the matrix is checked statically: apply the default specs, verify, revert
byte-identical, and each non-default spec on its own, with the declared states and their reasons.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from fp4patch.catalog.catalog_file import load_catalog
from tools.compat import tree_hashes
from fp4patch.engine.coordinator import APPLICABLE, APPLIED, NOT_TARGETED, SATISFIED, Engine, select_specs
from fp4patch.target.environment import find_distribution, from_site_packages
from fp4patch.catalog.releases import fetch
from fp4patch.catalog.spec import load_specs

from .conftest import DIST, SPECS_DIR, release_params, release_site, run_cli

DECLARED = {"not-needed", "unsupported", "obsolete"}

# One release per era of the matrix (fp4_quantize file, signature, decorators, getter, get_cuda_version).
ERAS = [
    "0.2.5",  # 1: no fp4_quantize
    "0.2.6.post1",  # 2: 5 parameters, global_scale required
    "0.2.9",  # 3: is_sf_8x4_layout
    "0.2.12",  # 4: enable_pdl, sm100 getter
    "0.2.14",  # 5: _get_cuda_version
    "0.4.0",  # 5: get_cuda_version falls back to torch.version.cuda
    "0.5.0",  # 5: first wheel
    "0.6.0",  # 6: @flashinfer_api
    "0.6.7",  # 7: moved to flashinfer/quantization/
    "0.6.8",  # 8: backend
    "0.6.10",  # 9: @flashinfer_api(trace=...)
    "0.6.11",  # 10: is_global_scale_inversed
    "0.6.12",  # 11: upstream torch.ops.flashinfer.fp4_quantize
    "0.7.1",  # 12: nvfp4_4over6
    "0.7.4",  # 13: keyword-only batch_invariant
]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(DIST)


@pytest.fixture(scope="module")
def specs():
    return [s for s in load_specs(SPECS_DIR) if s.distribution == DIST]


def test_catalog_lists_every_registry_release(catalog):
    versions = [str(r.version) for r in catalog.releases]
    assert len(versions) == 74
    assert versions[0] == "0.2.0.post1" and versions[-1] == "0.7.4"
    assert len(set(versions)) == 74
    with_fp4 = [r for r in catalog.releases if r.has_fp4_quantize]
    assert len(with_fp4) == 63
    assert str(with_fp4[0].version) == "0.2.6.post1"
    assert all(r.archive == ("wheel" if r.version >= Version("0.5.0") else "sdist") for r in catalog.releases)
    moved = {str(r.version) for r in with_fp4 if r.fp4_quantize == "flashinfer/quantization/fp4_quantization.py"}
    assert min(moved, key=Version) == "0.6.7"
    unknown = [r for r in catalog.releases if r.fp4_quantize is None]
    assert [str(r.version) for r in unknown] == ["0.2.6"] and unknown[0].note


def test_catalog_is_not_a_spec():
    ids = {s.id for s in load_specs(SPECS_DIR)}
    assert "catalog" not in ids
    assert not list(SPECS_DIR.rglob("catalog.toml"))


def test_every_spec_declares_every_catalog_release_with_fp4_quantize(catalog, specs):
    """No spec is `not-targeted` on a known release with fp4_quantize; declared ranges give a reason."""
    for spec in specs:
        missing = [str(r.version) for r in catalog.releases if r.has_fp4_quantize and not spec.targets_for(r.version)]
        assert not missing, f"{spec.id} has no target for {missing}"
        for target in spec.targets:
            if target.status:
                assert target.reason.strip(), f"{spec.id}:{target.line}: {target.status} without a reason"


# make test: no fp4_quantize, the first wheel, upstream's own op, the last release; make test-eras: every era
# (each era's patched code is also checked against its real sources by the spec cases, tests/test_spec_cases.py)
@pytest.mark.parametrize("version", release_params(ERAS, core=("0.2.5", "0.5.0", "0.6.12", "0.7.4")))
def test_era_apply_verify_revert(version, catalog, specs, tmp_path, tmp_path_factory):
    import os
    import shutil

    site = tmp_path / "site-packages"
    # sources only, hard-linked: fp4patch replaces a patched file by a new inode, never in place
    shutil.copytree(release_site(version, tmp_path_factory, sources_only=True), site, symlinks=True, copy_function=os.link)
    pristine = tree_hashes(site)
    dist = find_distribution(from_site_packages(site), DIST)
    assert str(dist.version) == version
    engine = Engine(dist, specs)
    release = catalog.get(version)
    reports = {s.id: engine.report(s) for s in specs}
    for spec_id, report in reports.items():
        if report.state == NOT_TARGETED:
            assert not release.has_fp4_quantize, f"{spec_id} not targeted at {version}, which has fp4_quantize"
            continue
        assert report.state in DECLARED | {APPLICABLE}, f"{spec_id} on {version}: {report.state}: {report.detail}"
        if report.state in DECLARED:
            assert report.detail, f"{spec_id} on {version}: {report.state} without a reason"
    if not release.has_fp4_quantize:
        assert all(r.state in DECLARED | {NOT_TARGETED} for r in reports.values())
    groups = [select_specs(specs, None)] + [[s] for s in specs if not s.default]
    for group in groups:
        to_apply = [s for s in group if reports[s.id].state == APPLICABLE]
        if not to_apply:
            continue
        written = engine.apply(to_apply)
        assert written
        for spec in group:
            state = engine.report(spec).state
            assert state in SATISFIED | DECLARED, f"{spec.id} on {version} after apply: {state}"
        assert all(engine.report(s).state == APPLIED for s in to_apply)
        engine.revert(None)
        assert tree_hashes(site) == pristine, f"{version}: revert of {[s.id for s in group]} is not byte-identical"


def test_status_shows_declared_reason(tmp_path_factory):
    site = release_site("0.3.0", tmp_path_factory, sources_only=True)
    done = run_cli("status", "--site-packages", str(site), "--json", check=True)
    states = {s["id"]: s for s in json.loads(done.stdout)["specs"]}
    assert states["cuda-version-from-torch"]["state"] == "applicable"
    assert states["fp4-quantize-fullgraph"]["state"] == "unsupported"
    assert states["fp4-quantize-fullgraph"]["detail"]
    text = run_cli("status", "--site-packages", str(site), check=True).stdout
    assert "unsupported" in text and states["fp4-quantize-fullgraph"]["detail"].split()[0] in text
    early = run_cli("status", "--site-packages", str(release_site("0.2.5", tmp_path_factory, sources_only=True)), "--json", check=True)
    for spec in json.loads(early.stdout)["specs"]:
        if spec["id"] != "fp4-quantize-compiler-disable" or spec["state"] != "not-targeted":
            # not-needed (no such code in 0.2.5), or unsupported with the reason the spec declares (bmm_fp8 ...)
            assert spec["state"] in ("not-needed", "unsupported") and spec["detail"], spec


# ---------------------------------------------------------------------------- --against
def test_against_a_release_that_is_not_installed(tmp_path):
    """0.6.7 is fetched and checked in a temporary directory; the current environment has no flashinfer."""
    assert run_cli("status").returncode == 2  # nothing installed here, before ...
    done = run_cli("verify", "--against", "flashinfer-python==0.6.7", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    payload = json.loads(done.stdout)
    assert payload["ok"] is True and payload["version"] == "0.6.7" and payload["kind"] == "wheel"
    assert payload["catalog"]["where"] == "known"
    # every default spec (the quantizer specs of issue 10 too): applicable, or declared not-needed where its function is absent
    default_ids = {s.id for s in load_specs(SPECS_DIR) if s.default}
    states = {s["id"]: s["state"] for s in payload["specs"]}
    assert set(states) == default_ids
    assert states["cuda-version-from-torch"] == states["fp4-quantize-fullgraph"] == "applicable"
    assert states["mxfp8-grouped-quantize-fullgraph"] == "not-needed"  # from 0.6.14
    assert set(states.values()) <= {"applicable", "not-needed"}, states
    after = {s["id"]: s["state"] for s in payload["after_apply"]}
    assert after == {k: "applied" if v == "applicable" else v for k, v in states.items()}
    assert payload["drifted"] == []
    assert run_cli("status").returncode == 2  # ... and after
    text = run_cli("verify", "--against", "flashinfer-python==0.6.7")
    assert text.returncode == 0 and "in the catalog" in text.stdout and "verify --against: ok" in text.stdout


def _fake_wheel(tmp_path: Path, version: str, drop_nvcc: bool) -> Path:
    """A small wheel of a future release, made of 0.7.4's relevant files."""
    source = fetch(DIST, "0.7.4")
    keep = ("flashinfer/jit/cpp_ext.py", "flashinfer/quantization/fp4_quantization.py", "flashinfer/fp4_quantization.py")
    path = tmp_path / f"flashinfer_python-{version}-py3-none-any.whl"
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(path, "w") as new:
        for name in keep:
            data = old.read(name)
            if drop_nvcc and name.endswith("cpp_ext.py"):
                data = data.replace(b"subprocess.check_output(", b"subprocess.run(")
            new.writestr(name, data)
        new.writestr(f"flashinfer_python-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\n")
    return path


def test_against_newer_than_the_catalog_says_so_and_what_drifted(tmp_path):
    wheel = _fake_wheel(tmp_path, "0.8.0", drop_nvcc=True)
    done = run_cli("verify", "--wheel", str(wheel), "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    payload = json.loads(done.stdout)
    assert payload["version"] == "0.8.0" and payload["catalog"]["where"] == "newer"
    assert "newer than every release in the catalog (latest known: 0.7.4)" in payload["catalog"]["message"]
    drifted = "\n".join(payload["drifted"])
    assert "cuda-version-from-torch: drifted" in drifted and "subprocess.check_output" in drifted
    # fp4_quantize's file is 0.7.4's, but the helpers its fake mirrors (flashinfer/utils.py) are not in
    # this three-file release: the code differs, and the CPU check cannot import so small a package
    fp4 = next(line for line in payload["drifted"] if line.startswith("fp4-quantize-fullgraph:"))
    # (a package without its __init__ imports from elsewhere: the check could not run, which is said as such)
    assert "flashinfer/utils.py:round_up" in fp4 and "the CPU check could not run" in fp4, fp4
    assert "the CPU check failed" not in fp4, fp4
    # a file this fake release lacks: the function is named as missing against the nearest verified release
    assert "bmm-fp8-fullgraph: drifted: 0.8.0: bmm_fp8() not found in flashinfer/gemm/gemm_base.py (against 0.7.4" in drifted
    text = run_cli("verify", "--wheel", str(wheel))
    assert text.returncode == 1
    assert "newer than every release in the catalog" in text.stdout and "will not apply: cuda-version-from-torch: drifted" in text.stdout


def test_against_sdist_is_not_traced(tmp_path):
    done = run_cli("verify", "--sdist", str(fetch(DIST, "0.2.14")), "--trace", "--json")
    payload = json.loads(done.stdout)
    assert payload["kind"] == "sdist" and payload["trace"] is None and "sdist" in payload["trace_note"]
    after = {s["id"]: s["state"] for s in payload["after_apply"]}
    assert after["cuda-version-from-torch"] == "applied"
    # fp4-quantize-fullgraph is declared unsupported before 0.5.0: a default spec, left out, not a failure
    assert done.returncode == 0 and after["fp4-quantize-fullgraph"] == "unsupported" and not payload["drifted"]


@pytest.mark.parametrize(
    "args",
    [
        ("--against", "flashinfer-python>=0.7"),
        ("--against", "torch==2.13.0"),
        ("--against", "flashinfer-python==0.7.4", "--site-packages", "/tmp"),
        ("--against", "flashinfer-python==0.7.4", "--wheel", "x.whl"),
        ("--wheel", "missing.tar.gz"),
    ],
)
def test_against_usage_errors(args):
    done = run_cli("verify", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("fp4patch: error: ")


@pytest.mark.parametrize("where", ["a-file", "no-home"])
def test_against_with_an_unusable_download_cache_is_one_line_naming_the_variable(tmp_path: Path, where: str) -> None:
    if where == "a-file":
        blocker = tmp_path / "cache"
        blocker.write_text("a file where the cache folder should be")
        done = run_cli("verify", "--against", "flashinfer-python==0.7.4", env={"FP4PATCH_CACHE": str(blocker / "releases")})
    else:  # no HOME and no passwd entry for the uid (docker run -u 12345): Path.home() raises
        code = (
            "import pathlib, sys\n"
            "def no_home(): raise RuntimeError('Could not determine home directory.')\n"
            "pathlib.Path.home = staticmethod(no_home)\n"
            "from fp4patch.cli.entry import main\n"
            "sys.argv = ['fp4patch', 'verify', '--against', 'flashinfer-python==0.7.4']\n"
            "main()\n"
        )
        env = {k: v for k, v in os.environ.items() if k != "FP4PATCH_CACHE"}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, "NO_COLOR": "1"}, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fp4patch: error: ") and "FP4PATCH_CACHE" in lines[0], done.stderr


@pytest.mark.parametrize("output", [(), ("--format", "github"), ("--json",)])
def test_against_a_version_never_released_says_so_before_any_download(tmp_path: Path, output: tuple[str, ...]) -> None:
    """0.7.3 lies between 0.7.2.post1 and 0.7.4 in the catalog, which lists every registry release: it was never
    published. The refusal says so and names the releases around it (not "cannot download ... check the network"),
    without touching the registry (an empty download cache, no index reachable); with --format github it is an
    ::error annotation too, as every other verify failure is."""
    env = {"FP4PATCH_CACHE": str(tmp_path / "cache"), "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_INDEX": "1"}
    done = run_cli("verify", "--against", "flashinfer-python==0.7.3", *output, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert "0.7.3 was never released" in line and "0.7.2.post1 and 0.7.4" in line and "cannot download" not in line, line
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.whl"))
    if output == ("--format", "github"):
        (annotation,) = done.stdout.splitlines()
        assert annotation.startswith("::error title=fp4patch verify failed::") and "0.7.3 was never released" in annotation
    if output == ("--json",):
        assert "never released" in json.loads(done.stdout)["error"]


def test_against_a_download_failure_is_a_github_error_annotation(tmp_path: Path) -> None:
    """A release newer than the catalog is looked up on the registry; when that fails, --format github prints the
    failure as an ::error (a CI log shows the annotations), besides the one line on stderr."""
    env = {"FP4PATCH_CACHE": str(tmp_path / "cache"), "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_INDEX": "1"}
    done = run_cli("verify", "--against", "flashinfer-python==99.0.0", "--format", "github", env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert [line.split("::")[1] for line in done.stdout.splitlines()] == ["error title=fp4patch verify failed"], done.stdout
