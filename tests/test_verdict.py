"""The recorded verdict (fp4patch/engine/verdict.py) and the ``verify`` fast path (fp4patch/cli/entry.py).

``apply`` records what ``verify`` answers; ``verify`` prints it only while every input is
unchanged. Each test compares against ``FP4PATCH_NO_VERDICT=1``, which makes ``verify`` check
the files itself, on the real flashinfer-python 0.6.0 wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fp4patch.engine import verdict
from fp4patch.cli.entry import VerifyArguments, parse_verify
from fp4patch.target.environment import TargetEnvironment, from_site_packages
from fp4patch.catalog.spec import load_specs

from .conftest import REPO, SPECS_DIR, applied_site, run_cli, snapshot

CPP_EXT = "flashinfer/jit/cpp_ext.py"
FP4 = "flashinfer/fp4_quantization.py"
STATE = Path(".fp4patch/flashinfer-python")
RECORD = STATE / "verdict.json"
NO_VERDICT = {"FP4PATCH_NO_VERDICT": "1"}
#: Modules the fast path must not import (the full CLI imports all three on a verify).
HEAVY = {"typer", "pydantic", "libcst"}


def sp(site: Path) -> tuple[str, str]:
    return ("--site-packages", str(site))


def imported(*args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``python -X importtime -m fp4patch ARGS``: the result and the top-level packages imported."""
    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "fp4patch", *args], capture_output=True, text=True, env=full_env, cwd=REPO)
    names = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in done.stderr.splitlines() if line.startswith("import time:") and "|" in line}
    return done, names


def both(*args: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """``verify ARGS`` as answered with the recorded verdict allowed, and with it ignored."""
    return run_cli("verify", *args), run_cli("verify", *args, env=NO_VERDICT)


def assert_same(fast: subprocess.CompletedProcess, full: subprocess.CompletedProcess) -> None:
    assert (fast.returncode, fast.stdout, fast.stderr) == (full.returncode, full.stdout, full.stderr)


@pytest.fixture
def applied_060(site_060: Path) -> Path:
    run_cli("apply", *sp(site_060), check=True)
    assert (site_060 / RECORD).is_file()
    return site_060


TERMINAL = {"FORCE_COLOR": "1"}  # coloured, as on a terminal (NO_COLOR still keeps escapes out)


@pytest.mark.parametrize(
    ("options", "env"),
    [
        ((), {}),
        ((), TERMINAL),
        (("--json",), {}),
        (("--format", "json"), {}),
        (("--format", "github"), {}),
        (("--format=table",), TERMINAL),
        (("-q",), {}),
        (("-q",), TERMINAL),
        (("--applicable",), {}),
        (("--format", "json", "--json"), {}),
    ],
    ids=lambda v: (" ".join(v) or "plain") if isinstance(v, tuple) else ("terminal" if v else "log"),
)
def test_recorded_verify_prints_what_the_full_check_prints_without_typer_or_libcst(tmp_path_factory, options, env) -> None:
    site = applied_site("0.6.0", tmp_path_factory)  # shared, read only: verify never writes (tested below)
    fast, names = imported("verify", *options, *sp(site), env=env)
    full = run_cli("verify", *options, *sp(site), env={**env, **NO_VERDICT})
    assert full.returncode == 0
    fast.stderr = "".join(line + "\n" for line in fast.stderr.splitlines() if not line.startswith("import time:"))
    assert_same(fast, full)
    assert not HEAVY & names, HEAVY & names
    assert "rich" not in names, "the recorded verdict prints plain (ANSI-coloured on a terminal) lines, without rich"


def test_the_full_check_is_another_code_path(tmp_path_factory) -> None:
    # so that the comparisons above are between two different code paths
    site = applied_site("0.6.0", tmp_path_factory)
    _, names_fast = imported("verify", *sp(site))
    _, names_full = imported("verify", *sp(site), env=NO_VERDICT)
    assert "typer" in names_full and "typer" not in names_fast


def test_apply_records_the_verdict_once_and_verify_never_writes(applied_060: Path) -> None:
    record = json.loads((applied_060 / RECORD).read_text())
    assert record["request"] == {"spec_ids": None, "specs_dir": None}
    assert set(record["files"]) >= {CPP_EXT, FP4}
    states = {r["id"]: r["state"] for r in record["specs"]}
    assert set(states) == {s.id for s in load_specs(SPECS_DIR) if s.default}  # every default spec, once
    core = {"cuda-version-from-torch": "applied", "fp4-quantize-fullgraph": "applied", "flashinfer-fp4-quantize-op-keywords": "not-needed"}
    assert {k: states[k] for k in core} == core
    # the other functions' specs: applied, or not-needed where 0.6.0 has no such function (mxfp8_grouped_quantize ...)
    assert set(states.values()) <= {"applied", "not-needed"}, states
    files = snapshot(applied_060)
    assert run_cli("apply", *sp(applied_060), check=True).stdout.count("already applied") == 1
    run_cli("verify", *sp(applied_060), check=True)
    assert snapshot(applied_060) == files


@pytest.mark.parametrize("change", ["original-bytes", "comment", "metadata-version", "journal", "manifest", "corrupt-record", "removed-target"])
def test_any_changed_input_is_a_miss_and_verify_checks_the_files(applied_060: Path, change: str) -> None:
    site = applied_060
    if change == "original-bytes":  # reinstalled by hand: must be reported applicable, not applied
        shutil.copyfile(site / STATE / "backups" / CPP_EXT, site / CPP_EXT)
    elif change == "comment":
        (site / FP4).write_bytes((site / FP4).read_bytes() + b"\n# a comment\n")
    elif change == "metadata-version":
        metadata = next(site.glob("flashinfer_python-*.dist-info")) / "METADATA"
        metadata.write_text(metadata.read_text().replace("Version: 0.6.0", "Version: 0.6.0.post1", 1))
    elif change == "journal":
        (site / STATE / "journal.json").write_text("{}")
    elif change == "manifest":
        manifest = site / STATE / "manifest.json"
        manifest.write_text(manifest.read_text() + " ")
    elif change == "corrupt-record":
        (site / RECORD).write_text("{not json")
    elif change == "removed-target":
        (site / CPP_EXT).unlink()
    assert verdict.lookup(from_site_packages(site), verdict.Request.of(None, None)) is None
    fast, full = both(*sp(site))
    assert_same(fast, full)
    expected = {"original-bytes": 1, "comment": 0, "journal": 1, "manifest": 0, "corrupt-record": 0, "removed-target": 1}
    if change in expected:
        assert fast.returncode == expected[change], fast.stdout + fast.stderr


def test_another_selection_or_specs_dir_is_a_miss(applied_060: Path, tmp_path: Path) -> None:
    env = from_site_packages(applied_060)
    assert verdict.lookup(env, verdict.Request.of(None, None)) is not None
    assert verdict.lookup(env, verdict.Request.of(["cuda-version-from-torch"], None)) is None
    copy = tmp_path / "specs"
    shutil.copytree(SPECS_DIR, copy)
    assert verdict.lookup(env, verdict.Request.of(None, copy)) is None
    fast, full = both("--spec", "cuda-version-from-torch", *sp(applied_060))
    assert_same(fast, full)
    assert fast.returncode == 0


def test_a_changed_spec_file_or_fp4patch_source_is_a_miss(applied_060: Path, tmp_path: Path, monkeypatch) -> None:
    specs = tmp_path / "specs"
    shutil.copytree(SPECS_DIR, specs)
    run_cli("apply", "--specs-dir", str(specs), *sp(applied_060), check=True)  # records for this --specs-dir
    env, request = from_site_packages(applied_060), verdict.Request.of(None, specs)
    assert verdict.lookup(env, request) is not None
    toml = specs / "flashinfer-python" / "cuda-version-from-torch.toml"
    toml.write_text(toml.read_text().replace("summary = ", "summary = 'changed' # ", 1))
    assert verdict.lookup(env, request) is None
    toml.write_text(toml.read_text().replace("summary = 'changed' # ", "summary = ", 1))
    assert verdict.lookup(env, request) is not None
    package = tmp_path / "package"
    shutil.copytree(verdict.PACKAGE_DIR, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(verdict, "PACKAGE_DIR", package)
    assert verdict.lookup(env, request) is not None  # same sources, other place: same digest
    (package / "engine" / "coordinator.py").write_text((package / "engine" / "coordinator.py").read_text() + "\n# changed\n")
    assert verdict.lookup(env, request) is None


def test_a_distribution_earlier_on_the_path_is_a_miss(applied_060: Path, tmp_path: Path) -> None:
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    dist_info = next(applied_060.glob("flashinfer_python-*.dist-info"))
    shutil.copytree(dist_info, earlier / dist_info.name)
    request = verdict.Request.of(None, None)
    resolved = str(applied_060.resolve())
    assert verdict.lookup(TargetEnvironment((resolved,), sys.executable, "test"), request) is not None
    assert verdict.lookup(TargetEnvironment((str(earlier), resolved), sys.executable, "test"), request) is None


def test_no_verdict_env_variable_and_revert_remove_it(applied_060: Path, monkeypatch) -> None:
    env, request = from_site_packages(applied_060), verdict.Request.of(None, None)
    monkeypatch.setenv("FP4PATCH_NO_VERDICT", "1")
    assert verdict.lookup(env, request) is None
    monkeypatch.delenv("FP4PATCH_NO_VERDICT")
    refused = run_cli("revert", "--spec", "no-such-spec", *sp(applied_060))
    assert refused.returncode == 2 and (applied_060 / RECORD).is_file()  # a refused revert changes nothing
    run_cli("revert", "--spec", "cuda-version-from-torch", *sp(applied_060), check=True)
    assert not (applied_060 / RECORD).exists()
    fast, full = both(*sp(applied_060))
    assert_same(fast, full)
    assert fast.returncode == 1  # cuda-version-from-torch is applicable again


def test_unsatisfied_reports_are_never_recorded(applied_060: Path) -> None:
    record = json.loads((applied_060 / RECORD).read_text())
    record["specs"][0]["state"] = "applicable"
    (applied_060 / RECORD).write_text(json.dumps(record))
    assert verdict.lookup(from_site_packages(applied_060), verdict.Request.of(None, None)) is None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["verify"], VerifyArguments()),
        (["verify", "--site-packages", "/s", "-q"], VerifyArguments(site_packages="/s", quiet=True)),
        (["verify", "--python=/p", "--spec", "a", "--spec=b"], VerifyArguments(python="/p", spec=["a", "b"])),
        (["verify", "--format", "github", "--format", "json"], VerifyArguments(output="json")),
        (["verify", "--format", "json", "--json"], VerifyArguments(output="json")),
        (["verify", "--specs-dir", "d", "--applicable", "--format", "github"], VerifyArguments(specs_dir="d", applicable=True, output="github")),
    ],
)
def test_fast_path_arguments(argv: list[str], expected: VerifyArguments) -> None:
    assert parse_verify(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["status"],
        ["verify", "--trace"],
        ["verify", "--help"],
        ["verify", "--against", "flashinfer-python==0.7.4"],
        ["verify", "--python", "/p", "--site-packages", "/s"],
        ["verify", "--format", "xml"],
        ["verify", "--format", "github", "--json"],
        ["verify", "-q", "--json"],
        ["verify", "--quiet", "--format", "github"],
        ["verify", "--site-packages"],
        ["verify", "--spec", "--json"],
        ["verify", "--json=1"],
        ["verify", "-qq"],
        ["verify", "extra"],
        ["--version"],
    ],
)
def test_everything_else_goes_to_the_full_cli(argv: list[str]) -> None:
    assert parse_verify(argv) is None


def test_usage_errors_are_still_reported_by_the_full_cli(applied_060: Path) -> None:
    done = run_cli("verify", "--format", "xml", *sp(applied_060))
    assert done.returncode == 2 and "--format 'xml'" in done.stderr
    done = run_cli("verify", "--skip", "no-such-spec", *sp(applied_060))
    assert done.returncode == 2 and "'no-such-spec'" in done.stderr


def test_apply_records_the_verdict_while_holding_the_lock(site_060: Path, monkeypatch) -> None:
    """A writer waiting for the lock removes temporary files it finds as a killed run's
    leftovers; the verdict's temporary file must therefore only exist under the lock."""
    from typer.testing import CliRunner

    from fp4patch import cli

    from fp4patch.engine import files
    from fp4patch.engine.lock import held as _lock_held

    held = []
    real = files.atomic_write

    def checked(path: Path, data: bytes, mode: int | None = None) -> None:
        if path.name == "verdict.json":
            held.append(_lock_held(site_060 / ".fp4patch" / "flashinfer-python.lock"))
        real(path, data, mode)

    monkeypatch.setattr(files, "atomic_write", checked)
    result = CliRunner().invoke(cli.app, ["apply", *sp(site_060)])
    assert result.exit_code == 0, result.output
    assert held == [True]


def test_recorded_verify_through_python_matches_the_full_check(site_060: Path, tmp_path: Path) -> None:
    """``--python``: the target interpreter's sys.path is probed (started before the imports)."""
    venv = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    shutil.copytree(site_060, site, dirs_exist_ok=True)
    run_cli("apply", "--python", str(python), check=True)
    assert (site / RECORD).is_file()
    for options in ((), ("--format", "github")):
        fast, names = imported("verify", *options, "--python", str(python))
        fast.stderr = "".join(line + "\n" for line in fast.stderr.splitlines() if not line.startswith("import time:"))
        assert_same(fast, run_cli("verify", *options, "--python", str(python), env=NO_VERDICT))
        assert fast.returncode == 0 and not HEAVY & names
    missing = run_cli("verify", "--python", str(tmp_path / "no-python"))
    assert missing.returncode == 2 and "cannot run this interpreter" in missing.stderr


@pytest.mark.parametrize("command", [["verify", "--json"], ["verify"], ["status", "--json"], ["diff"]])
def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path_factory, command: list[str]) -> None:
    """``fp4patch verify --json | head -1``: the pipe closes after the first line; the CLI stops quietly
    (exit 1, nothing on stderr) instead of printing a BrokenPipeError traceback."""
    import subprocess
    import sys

    site = applied_site("0.6.0", tmp_path_factory)
    run_cli("verify", "--site-packages", str(site), check=True)  # records the verdict the fast path reads
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    process = subprocess.Popen(
        [sys.executable, "-m", "fp4patch", *command, "--site-packages", str(site)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO, bufsize=0,
    )
    process.stdout.read(1)
    process.stdout.close()  # the reader leaves before the output is written
    stderr = process.stderr.read().decode()
    code = process.wait(timeout=120)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert code in (0, 1), (code, stderr)


@pytest.mark.parametrize(
    "command",
    [("status",), ("status", "--json"), ("diff",), ("diff", "--stat"), ("diff", "--json"), ("apply",), ("apply", "--json"), ("apply", "-q")],
    ids=" ".join,
)
def test_apply_status_and_diff_on_a_patched_environment_answer_from_the_verdict(tmp_path_factory, command: tuple[str, ...]) -> None:
    """On an already patched environment `apply` took 10-54 s, `status` 22-38 s and `diff` 36 s to say that nothing is to
    be done, while `verify` answered from the recorded verdict in 0.2 s. They now answer from it as verify does: the same
    output as the full command, without typer, pydantic or libcst (make bench measures the times). Neither writes."""
    site = applied_site("0.7.4", tmp_path_factory)  # shared: the full apply here has nothing to write (checked)
    before = snapshot(site)
    fast, names = imported(*command, *sp(site))
    fast.stderr = "".join(line + "\n" for line in fast.stderr.splitlines() if not line.startswith("import time:"))
    full = run_cli(*command, *sp(site), env=NO_VERDICT)
    # the site is shared with other xdist workers: the full command may wait for their lock (and leaves its lock file)
    full.stderr = "".join(line + "\n" for line in full.stderr.splitlines() if not line.startswith(("fp4patch: waiting for lock", "fp4patch: waited ")))
    assert_same(fast, full)
    assert not HEAVY & names, HEAVY & names
    lock = ".fp4patch/flashinfer-python.lock"
    assert {k: v for k, v in snapshot(site).items() if not k.endswith(lock)} == {k: v for k, v in before.items() if not k.endswith(lock)}


def test_status_answers_from_the_verdict_of_a_plain_apply_only(linked_site) -> None:
    """An apply with --spec records the verdict of that selection and no status view: status then checks the files."""
    site = linked_site("0.6.0")
    run_cli("apply", "--spec", "cuda-version-from-torch", *sp(site), check=True)
    _, names = imported("status", *sp(site))
    assert "libcst" in names
    _, names = imported("apply", "--spec", "cuda-version-from-torch", *sp(site))
    assert not HEAVY & names
