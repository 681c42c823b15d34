"""Reliability of apply/revert on the real flashinfer-python 0.6.0 wheel (issue 5): the
environment lock, crash recovery through the journal (SIGKILL at every write step), the RECORD
baseline check, hard links, bytecode, text encodings, upgrades, and install kinds.

Every command runs as ``python -m fp4patch`` in a subprocess (``run_cli``); fault injection is
``FP4PATCH_FAULT=<step>:<n>`` (:mod:`tests.faults`, which wraps the engine's steps in the child).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import py_compile
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from filelock import FileLock

from fp4patch.target.environment import from_site_packages
from fp4patch.catalog.releases import fetch

from .conftest import REPO, read_only, release_site, run_cli, snapshot
from .test_cli_real_wheel import CPP_EXT, DIST_INFO, FP4, STATE, assert_matches_record, one_line_error, record_hash, sp

BOTH = ("--spec", "cuda-version-from-torch", "--spec", "fp4-quantize-compiler-disable")
TARGETS = (CPP_EXT, FP4)
LOCK = STATE / "flashinfer-python.lock"
JOURNAL = STATE / "flashinfer-python" / "journal.json"


@pytest.fixture(scope="module")
def patched_060(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The bytes of the two target files after one plain apply of BOTH (and the originals)."""
    site = tmp_path_factory.mktemp("reference") / "site-packages"
    shutil.copytree(release_site("0.6.0", tmp_path_factory), site, symlinks=True, copy_function=os.link)
    original = {t: (site / t).read_bytes() for t in TARGETS}
    run_cli("apply", *BOTH, *sp(site), check=True)
    patched = {t: (site / t).read_bytes() for t in TARGETS}
    assert all(original[t] != patched[t] for t in TARGETS)
    return {"original": original, "patched": patched}


@pytest.fixture
def site_060(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private 0.6.0 site-packages made of hard links to the shared pristine unpack (fast: no
    data copied). Safe because fp4patch replaces files by rename, never writes through a link —
    which these tests check; tests that edit a file by hand use :func:`rewrite`."""
    target = tmp_path / "site-0.6.0"
    shutil.copytree(release_site("0.6.0", tmp_path_factory), target, symlinks=True, copy_function=os.link)
    return target


def rewrite(path: Path, data: bytes) -> None:
    """Replace ``path`` by a new file (never through a hard link to the shared pristine copy)."""
    path.unlink()
    path.write_bytes(data)


def targets(site: Path) -> dict[str, bytes]:
    return {t: (site / t).read_bytes() for t in TARGETS}


def notes(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


# --------------------------------------------------------------------------- lock
def test_eight_concurrent_applies_patch_once(site_060: Path, patched_060) -> None:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    procs = [
        subprocess.Popen([sys.executable, "-m", "fp4patch", "apply", *BOTH, *sp(site_060)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    assert all(code == 0 for code, _, _ in results), results
    writers = [out for _, out, _ in results if "patched " in out]
    assert len(writers) == 1, [out for _, out, _ in results]
    assert sum("already applied" in out for _, out, _ in results) == 7
    waited = 0
    for _, _, err in results:
        lines = notes(err)
        assert all(re.fullmatch(r"fp4patch: (waiting for lock .*|waited \d+\.\d s for lock .*)", line) for line in lines), err
        waited += any(line.startswith("fp4patch: waited ") for line in lines)
    assert waited >= 1
    assert targets(site_060) == patched_060["patched"]
    manifest = json.loads((site_060 / STATE / "flashinfer-python" / "manifest.json").read_text())
    assert manifest["specs"] == sorted(BOTH[1::2]) and set(manifest["files"]) == set(TARGETS)
    assert not (site_060 / LOCK).exists() and not (site_060 / JOURNAL).exists()
    assert run_cli("verify", *sp(site_060), *BOTH).returncode == 0
    run_cli("revert", *sp(site_060), check=True)
    assert_matches_record(site_060)


def test_a_held_lock_is_waited_for_and_reported(site_060: Path) -> None:
    (site_060 / STATE).mkdir()
    holder = FileLock(str(site_060 / LOCK))
    holder.acquire()
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "fp4patch", "apply", "--spec", "cuda-version-from-torch", *sp(site_060)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stderr.readline()  # printed as soon as it finds the lock taken
    assert first == f"fp4patch: waiting for lock {site_060 / LOCK}: another fp4patch process is applying or reverting flashinfer-python in {site_060}\n"
    time.sleep(2)
    assert proc.poll() is None  # still waiting, nothing written
    assert not (site_060 / STATE / "flashinfer-python").exists()
    holder.release()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    lines = notes(err)
    seconds = float(re.fullmatch(r"fp4patch: waited (\d+\.\d) s for lock .*", lines[0]).group(1))
    assert seconds >= 2 and len(lines) == 1
    assert "patched flashinfer/jit/cpp_ext.py" in out


def test_lock_timeout_is_a_one_line_exit_3(site_060: Path) -> None:
    (site_060 / STATE).mkdir()
    with FileLock(str(site_060 / LOCK)):
        files = snapshot(site_060)
        done = run_cli("apply", *sp(site_060), env={"FP4PATCH_LOCK_TIMEOUT": "1"})
        assert snapshot(site_060) == files
    assert done.returncode == 3
    assert "still held by another fp4patch process after 1 s" in done.stderr.splitlines()[-1]


def test_read_only_site_packages(site_060: Path) -> None:
    files = snapshot(site_060)
    with read_only(site_060):
        done = run_cli("apply", *sp(site_060))
        assert done.returncode == 3, done.stderr
        line = one_line_error(done.stderr)
        assert f"{site_060 / STATE}: cannot create" in line and "not writable" in line
        assert snapshot(site_060) == files
        assert run_cli("revert", *sp(site_060)).returncode == 0  # nothing recorded: nothing to do
    # applied at build time, read-only at run time: apply again is a no-op, not an error
    run_cli("apply", *sp(site_060), check=True)
    with read_only(site_060 / STATE), read_only(site_060):
        done = run_cli("apply", *sp(site_060))
        assert done.returncode == 0, done.stderr
        assert "already applied" in done.stdout


# --------------------------------------------------------------------------- crash safety
APPLY_POINTS = [f"{step}:{n}" for step, count in (("journal", 1), ("backup", 2), ("file", 2), ("bytecode", 2), ("manifest", 1), ("done", 1), ("tmp", 6)) for n in range(1, count + 1)]
REVERT_POINTS = [f"{step}:{n}" for step, count in (("journal", 1), ("file", 2), ("bytecode", 2), ("manifest", 1), ("done", 1), ("tmp", 3)) for n in range(1, count + 1)]


def _state(site: Path, reference) -> set[str]:
    """Which version each target file holds; fails on anything else."""
    states = set()
    for target, data in targets(site).items():
        if data == reference["original"][target]:
            states.add("original")
        elif data == reference["patched"][target]:
            states.add("patched")
        else:
            raise AssertionError(f"{target} is neither original nor patched after a kill")
    return states


def _killed(command: str, point: str, site: Path) -> subprocess.CompletedProcess:
    args = (command, *BOTH) if command == "apply" else (command,)
    done = run_cli(*args, *sp(site), env={"FP4PATCH_FAULT": point})
    assert done.returncode == -signal.SIGKILL, f"{command} at {point} was not killed: {done.returncode}\n{done.stderr}"
    return done


def _recover(command: str, site: Path) -> subprocess.CompletedProcess:
    args = (command, *BOTH) if command == "apply" else (command,)
    done = run_cli(*args, *sp(site))
    assert done.returncode == 0, done.stderr
    for line in notes(done.stderr):
        assert re.match(r"fp4patch: (completed an interrupted (apply|revert) of |rolled back an interrupted fp4patch run)", line), done.stderr
    return done


def crash_trials(
    site: Path, reference, count: int, with_bytecode: bool, start: int = 0, apply_points=APPLY_POINTS, revert_points=REVERT_POINTS
) -> list[tuple[str, str, str]]:
    """``count`` trials, chained so that each starts from the state it needs:
    apply killed → apply, revert killed → apply, revert killed → revert, apply killed → revert.
    Each of the four kinds walks its fault points from index ``start`` (the second recovery of
    each from the middle of the list, so that few trials still spread over the points)."""
    if with_bytecode:
        for target, mode in zip(TARGETS, ("TIMESTAMP", "UNCHECKED_HASH")):
            pyc = importlib.util.cache_from_source(str(site / target))
            py_compile.compile(str(site / target), cfile=pyc, invalidation_mode=py_compile.PycInvalidationMode[mode], doraise=True)
    done = []
    index: dict[tuple[str, str], int] = {}
    while len(done) < count:
        for killed, recovery, expected in (("apply", "apply", "patched"), ("revert", "apply", "patched"), ("revert", "revert", "original"), ("apply", "revert", "original")):
            points = apply_points if killed == "apply" else revert_points
            first = start + (len(points) // 2 if killed != recovery else 0)
            n = index[killed, recovery] = index.get((killed, recovery), first - 1) + 1
            point = points[n % len(points)]
            _killed(killed, point, site)
            _state(site, reference)  # each file is whole: original or patched
            recovered = _recover(recovery, site)
            if point not in ("done:1",):
                assert "fp4patch: " in recovered.stderr, f"{killed} at {point}: the next {recovery} said nothing"
            assert _state(site, reference) == {expected}, f"{killed} killed at {point}, then {recovery}"
            assert not (site / JOURNAL).exists() and not (site / LOCK).exists()
            leftovers = [p for p in site.rglob("*.fp4patch-tmp")]
            assert not leftovers, leftovers
            if with_bytecode and expected == "patched":
                _check_bytecode_fresh(site)
            done.append((killed, point, recovery))
            if len(done) == count:
                break
    if _state(site, reference) != {"original"}:
        run_cli("revert", *sp(site), check=True)
    for target in TARGETS:
        Path(importlib.util.cache_from_source(str(site / target))).unlink(missing_ok=True)
    assert_matches_record(site)
    return done


def _check_bytecode_fresh(site: Path) -> None:
    for target in TARGETS:
        pyc = Path(importlib.util.cache_from_source(str(site / target)))
        if pyc.exists():
            assert _pyc_code(pyc) == compile((site / target).read_bytes(), str(site / target), "exec", dont_inherit=True).co_consts.__len__()


def _pyc_code(pyc: Path) -> int:
    import marshal

    return len(marshal.loads(pyc.read_bytes()[16:]).co_consts)


def test_crash_recovery_default(site_060: Path, patched_060) -> None:
    """20 trials over a spread of the fault points, pycs present (the slow test takes all)."""
    apply_points = ["journal:1", "backup:2", "file:1", "bytecode:2", "tmp:1", "file:2", "manifest:1", "done:1", "tmp:4", "backup:1"]
    revert_points = ["journal:1", "file:1", "bytecode:1", "manifest:1", "tmp:2", "file:2", "done:1", "tmp:1", "bytecode:2", "tmp:3"]
    trials = crash_trials(site_060, patched_060, 20, with_bytecode=True, apply_points=apply_points, revert_points=revert_points)
    assert {p for k, p, _ in trials if k == "apply"} == set(apply_points)
    assert {p for k, p, _ in trials if k == "revert"} == set(revert_points)


@pytest.mark.slow
@pytest.mark.exhaustive
def test_crash_recovery_every_step(site_060: Path, patched_060) -> None:
    """104 trials: every apply point (16) and revert point (10), each recovered by apply and by
    revert, without and with existing bytecode (``make test-all``; ``make test`` runs the spread
    of :func:`test_crash_recovery_default`)."""
    trials = crash_trials(site_060, patched_060, 52, with_bytecode=False)
    trials += crash_trials(site_060, patched_060, 52, with_bytecode=True, start=13)
    assert len(trials) >= 100
    apply_pairs = {(p, rec) for k, p, rec in trials if k == "apply"}
    revert_pairs = {(p, rec) for k, p, rec in trials if k == "revert"}
    assert apply_pairs == {(p, rec) for p in APPLY_POINTS for rec in ("apply", "revert")}
    assert revert_pairs == {(p, rec) for p in REVERT_POINTS for rec in ("apply", "revert")}


def test_kill_during_recovery_and_verify_reports_it(site_060: Path, patched_060) -> None:
    _killed("apply", "file:1", site_060)
    assert _state(site_060, patched_060) == {"original", "patched"}
    verify = run_cli("verify", "--json", *BOTH, *sp(site_060))
    assert verify.returncode == 1
    report = json.loads(verify.stdout)
    assert "was interrupted" in report["interrupted"] and str(site_060 / JOURNAL) in report["interrupted"]
    assert (site_060 / JOURNAL).exists()  # verify never writes
    _killed("revert", "file:1", site_060)  # killed while finishing the apply
    _state(site_060, patched_060)
    done = _recover("revert", site_060)
    assert "completed an interrupted apply of cuda-version-from-torch, fp4-quantize-compiler-disable" in done.stderr
    assert_matches_record(site_060)


def test_killed_before_the_journal_rolls_back(site_060: Path, patched_060) -> None:
    _killed("apply", "tmp:1", site_060)  # the journal's temporary file, not yet renamed
    assert _state(site_060, patched_060) == {"original"}
    done = _recover("revert", site_060)
    assert "rolled back an interrupted fp4patch run: it had not changed any file yet" in done.stderr
    assert_matches_record(site_060)


# --------------------------------------------------------------------------- baseline (RECORD)
def set_in_record(site: Path, relative: str, data: bytes) -> None:
    """Rewrite ``relative`` and its RECORD row: a wheel built that way (CRLF, BOM, ...)."""
    rewrite(site / relative, data)
    record = site / DIST_INFO / "RECORD"
    rows = list(csv.reader(record.read_text(encoding="utf-8").splitlines()))
    for row in rows:
        if row[0] == relative:
            row[1], row[2] = record_hash(data), str(len(data))
    text = "".join(",".join(row) + "\n" for row in rows)
    rewrite(record, text.encode())


def test_a_file_changed_by_hand_is_refused_unless_allowed(site_060: Path) -> None:
    target = site_060 / CPP_EXT
    edited = target.read_bytes() + b"\n# local fix\n"
    rewrite(target, edited)
    files = snapshot(site_060)
    done = run_cli("apply", *BOTH, *sp(site_060))
    assert done.returncode == 3
    line = one_line_error(done.stderr)
    assert f"{target}: differs from the sha256 in flashinfer-python 0.6.0's RECORD" in line and "--allow-modified" in line
    assert snapshot(site_060) == files
    done = run_cli("apply", "--allow-modified", *BOTH, *sp(site_060))
    assert done.returncode == 0, done.stderr
    assert run_cli("apply", *BOTH, *sp(site_060)).returncode == 0  # patched by fp4patch: fine
    run_cli("revert", *sp(site_060), check=True)
    assert target.read_bytes() == edited  # the hand edit is what was there before


# --------------------------------------------------------------------------- hard links
def test_hard_linked_cache_copy_keeps_its_bytes(site_060: Path, tmp_path: Path) -> None:
    cache = tmp_path / "uv-cache"
    cache.mkdir()
    original = {t: (site_060 / t).read_bytes() for t in TARGETS}
    for t in TARGETS:
        os.link(site_060 / t, cache / Path(t).name)
        assert (site_060 / t).stat().st_nlink >= 2
    run_cli("apply", *BOTH, *sp(site_060), check=True)
    for t in TARGETS:
        assert (cache / Path(t).name).read_bytes() == original[t]
        assert (site_060 / t).read_bytes() != original[t]
        assert (site_060 / t).stat().st_ino != (cache / Path(t).name).stat().st_ino
    run_cli("revert", *sp(site_060), check=True)
    for t in TARGETS:
        assert (cache / Path(t).name).read_bytes() == original[t] == (site_060 / t).read_bytes()
    assert_matches_record(site_060)


# --------------------------------------------------------------------------- bytecode
PROBE = """
import importlib.util, json, sys
path = sys.argv[1]
spec = importlib.util.spec_from_file_location("probe_module", path)
code = spec.loader.get_code("probe_module")  # what `import` would run: pyc if valid, else source
def find(code, name):
    for const in code.co_consts:
        if hasattr(const, "co_name"):
            if const.co_name == name:
                return const
            found = find(const, name)
            if found:
                return found
fresh = compile(open(path, "rb").read(), path, "exec", dont_inherit=True)
print(json.dumps({name: find(code, name).co_code == find(fresh, name).co_code for name in sys.argv[2:]}))
"""


@pytest.mark.parametrize("mode", ["TIMESTAMP", "CHECKED_HASH", "UNCHECKED_HASH"])
def test_existing_bytecode_runs_the_new_source(site_060: Path, mode: str) -> None:
    invalidation = py_compile.PycInvalidationMode[mode]
    for t in TARGETS:
        py_compile.compile(str(site_060 / t), cfile=importlib.util.cache_from_source(str(site_060 / t)), invalidation_mode=invalidation, doraise=True)
        py_compile.compile(str(site_060 / t), cfile=importlib.util.cache_from_source(str(site_060 / t), optimization=2), optimize=2, invalidation_mode=invalidation, doraise=True)
    stamps = {t: (site_060 / t).stat().st_mtime for t in TARGETS}

    def loaded_matches(command: str) -> None:
        for t, function in ((CPP_EXT, "get_cuda_version"), (FP4, "fp4_quantize")):
            pyc = Path(importlib.util.cache_from_source(str(site_060 / t)))
            assert pyc.exists(), f"{command} removed {pyc} instead of rewriting it"
            assert int.from_bytes(pyc.read_bytes()[4:8], "little") == {"TIMESTAMP": 0, "CHECKED_HASH": 3, "UNCHECKED_HASH": 1}[mode]
            os.utime(site_060 / t, (stamps[t], stamps[t]))  # same second as the old pyc
            done = subprocess.run([sys.executable, "-c", PROBE, str(site_060 / t), function], capture_output=True, text=True, check=True)
            assert json.loads(done.stdout) == {function: True}, f"after {command}, {t} would run stale bytecode"

    run_cli("apply", *BOTH, *sp(site_060), check=True)
    loaded_matches("apply")
    run_cli("revert", *sp(site_060), check=True)
    loaded_matches("revert")


def test_bytecode_of_same_size_same_mtime_source_is_rewritten(tmp_path: Path) -> None:
    from fp4patch.engine.files import atomic_write, refresh_bytecode

    source = tmp_path / "mod.py"
    source.write_text("VALUE = 1\n")
    pyc = Path(importlib.util.cache_from_source(str(source)))
    py_compile.compile(str(source), cfile=str(pyc), doraise=True)
    other = pyc.with_name("mod.cpython-299.pyc")  # another interpreter's: cannot be rewritten here
    other.write_bytes(pyc.read_bytes())
    stat = source.stat()
    atomic_write(source, b"VALUE = 2\n")
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert {p.name: what for p, what in refresh_bytecode(source)} == {pyc.name: "rewritten", other.name: "removed"}
    done = subprocess.run([sys.executable, "-c", "import mod; print(mod.VALUE)"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "2"


# --------------------------------------------------------------------------- text
def _tabs(data: bytes) -> bytes:
    out = []
    for line in data.split(b"\n"):
        stripped = line.lstrip(b" ")
        depth = (len(line) - len(stripped)) // 4
        out.append(b"\t" * depth + line[depth * 4 :])
    return b"\n".join(out)


TEXT_VARIANTS = {
    "crlf": lambda data: data.replace(b"\n", b"\r\n"),
    "bom": lambda data: b"\xef\xbb\xbf" + data,
    "tabs": _tabs,
    "latin-1-cookie": lambda data: b"# -*- coding: latin-1 -*-\n# r\xe9sum\xe9: Latin-1 bytes\n" + data,
}


@pytest.mark.parametrize("variant", sorted(TEXT_VARIANTS))
def test_line_endings_bom_tabs_and_coding_cookie_are_kept(site_060: Path, variant: str) -> None:
    make = TEXT_VARIANTS[variant]
    originals = {}
    for t in TARGETS:
        data = make((site_060 / t).read_bytes())
        compile(data, t, "exec", dont_inherit=True)
        set_in_record(site_060, t, data)
        originals[t] = data
    run_cli("apply", *BOTH, *sp(site_060), check=True)
    for t in TARGETS:
        patched = (site_060 / t).read_bytes()
        assert patched != originals[t]
        compile(patched, t, "exec", dont_inherit=True)
        if variant == "crlf":
            assert b"\n" not in patched.replace(b"\r\n", b"")
        if variant == "bom":
            assert patched.startswith(b"\xef\xbb\xbf") and patched.count(b"\xef\xbb\xbf") == 1
        if variant == "tabs":
            indents = {line[: len(line) - len(line.lstrip(b" \t"))] for line in patched.splitlines() if line.strip()}
            assert all(not i.startswith(b"    ") for i in indents), sorted(i for i in indents if i.startswith(b"    "))[:3]
        if variant == "latin-1-cookie":
            assert patched.startswith(b"# -*- coding: latin-1 -*-\n# r\xe9sum\xe9")
    assert run_cli("verify", *BOTH, *sp(site_060)).returncode == 0
    run_cli("revert", *sp(site_060), check=True)
    assert targets(site_060) == originals
    assert_matches_record(site_060)


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        pytest.param(lambda data: data + b"\ndef broken(:\n", "not valid Python", id="syntax-error"),
        pytest.param(lambda data: data + b"\n# \xff\xfe not utf-8\n", "not valid Python", id="bad-encoding"),
    ],
)
def test_a_file_that_is_not_python_is_reported_never_rewritten(site_060: Path, damage, needle) -> None:
    set_in_record(site_060, CPP_EXT, damage((site_060 / CPP_EXT).read_bytes()))
    files = snapshot(site_060)
    for command in ("apply", "verify"):
        done = run_cli(command, *BOTH, *sp(site_060))
        assert done.returncode == 1, done.stdout + done.stderr
        line = one_line_error(done.stderr)
        assert str(site_060 / CPP_EXT) in line and needle in line and "reinstall" in line
    assert snapshot(site_060) == files
    assert not (site_060 / STATE).exists()


# --------------------------------------------------------------------------- upgrades
def _install_over(site: Path, version: str) -> str:
    """What pip does on an upgrade: remove the old RECORD's files, unpack the new wheel."""
    for info in site.glob("flashinfer_python-*.dist-info"):
        for row in csv.reader((info / "RECORD").read_text(encoding="utf-8").splitlines()):
            (site / row[0]).unlink(missing_ok=True)
        shutil.rmtree(info, ignore_errors=True)
    with zipfile.ZipFile(fetch("flashinfer-python", version)) as wheel:
        wheel.extractall(site)
    return f"flashinfer_python-{version}.dist-info"


def test_force_reinstall_of_the_same_version(site_060: Path) -> None:
    originals = targets(site_060)
    run_cli("apply", *BOTH, *sp(site_060), check=True)
    for t in TARGETS:  # pip install --force-reinstall: the wheel's files again
        rewrite(site_060 / t, originals[t])
    verify = run_cli("verify", "--json", *BOTH, *sp(site_060))
    assert verify.returncode == 1
    assert {s["state"] for s in json.loads(verify.stdout)["specs"]} == {"applicable"}  # from the contents, not the manifest
    done = run_cli("apply", *BOTH, *sp(site_060))
    assert done.returncode == 0, done.stderr
    assert "holds the original bytes again (reinstalled?); patching it afresh" in done.stderr
    assert run_cli("verify", *BOTH, *sp(site_060)).returncode == 0
    for t in TARGETS:
        rewrite(site_060 / t, originals[t])
    done = run_cli("revert", *sp(site_060))
    assert done.returncode == 0, done.stderr
    assert "already holds the original bytes (reinstalled?)" in done.stderr
    assert "restored" not in done.stdout and "nothing to write back" in done.stdout
    assert_matches_record(site_060)


def test_after_an_upgrade_revert_refuses_old_backups(site_060: Path) -> None:
    run_cli("apply", *BOTH, *sp(site_060), check=True)
    info = _install_over(site_060, "0.6.1")
    files = snapshot(site_060)
    verify = run_cli("verify", "--json", "--spec", "cuda-version-from-torch", *sp(site_060))
    assert verify.returncode == 1
    report = json.loads(verify.stdout)
    assert report["version"] == "0.6.1" and report["specs"][0]["state"] == "applicable"

    refused = run_cli("revert", *sp(site_060))
    assert refused.returncode == 3
    line = one_line_error(refused.stderr)
    assert "backups are for flashinfer-python 0.6.0 but 0.6.1 is installed" in line and "--force" in line
    assert snapshot(site_060) == files

    done = run_cli("apply", "--spec", "cuda-version-from-torch", *sp(site_060))
    assert done.returncode == 0, done.stderr
    assert "discarding fp4patch's record of flashinfer-python 0.6.0" in done.stderr
    run_cli("revert", *sp(site_060), check=True)
    _matches_record(site_060, info)


def test_after_an_upgrade_revert_force_discards_the_record(site_060: Path) -> None:
    run_cli("apply", "--spec", "cuda-version-from-torch", *sp(site_060), check=True)
    info = _install_over(site_060, "0.6.1")
    done = run_cli("revert", "--force", *sp(site_060))
    assert done.returncode == 0, done.stderr
    assert "discarded fp4patch's record of flashinfer-python 0.6.0 (0.6.1 is installed); no file restored" in done.stderr
    _matches_record(site_060, info)


def _matches_record(site: Path, info: str) -> None:
    rows = {row[0]: row[1] for row in csv.reader((site / info / "RECORD").read_text(encoding="utf-8").splitlines())}
    files = snapshot(site)
    assert set(files) == set(rows)
    assert all(record_hash(files[p]) == h for p, h in rows.items() if h)


# --------------------------------------------------------------------------- install kinds
def test_editable_install_is_refused(site_060: Path) -> None:
    (site_060 / DIST_INFO / "direct_url.json").write_text(json.dumps({"url": "file:///src/flashinfer", "dir_info": {"editable": True}}))
    files = snapshot(site_060)
    for command in ("apply", "verify", "revert"):
        done = run_cli(command, *sp(site_060))
        assert done.returncode == 2, done.stderr
        line = one_line_error(done.stderr)
        assert "flashinfer-python is an editable install: its files are in file:///src/flashinfer" in line
    assert snapshot(site_060) == files


def test_zipped_distribution_is_refused(site_060: Path, tmp_path: Path) -> None:
    archive = tmp_path / "flashinfer.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for p in [*(site_060 / DIST_INFO).iterdir(), site_060 / CPP_EXT]:
            z.write(p, str(p.relative_to(site_060)))
    done = run_cli("apply", "--python", sys.executable, env={"PYTHONPATH": str(archive)})
    assert done.returncode == 2, done.stderr
    assert f"flashinfer-python is installed inside an archive ({archive}" in one_line_error(done.stderr)
    done = run_cli("apply", "--site-packages", str(archive))
    assert done.returncode == 2
    assert f"{archive}: a zip archive, not a site-packages directory" in one_line_error(done.stderr)


def test_status_names_an_interrupted_apply(site_060: Path, patched_060) -> None:
    """After an apply killed in its write phase, status says so (text and --json), as verify does."""
    _killed("apply", "file:1", site_060)
    text = run_cli("status", *sp(site_060))
    said = " ".join(text.stdout.split())  # long lines wrap at the log width
    assert text.returncode == 0 and "interrupted: an fp4patch apply of" in said and "was interrupted" in said
    payload = json.loads(run_cli("status", "--json", *sp(site_060)).stdout)
    assert "was interrupted" in payload["interrupted"] and str(site_060 / JOURNAL) in payload["interrupted"]
    _recover("apply", site_060)
    assert json.loads(run_cli("status", "--json", *sp(site_060)).stdout)["interrupted"] is None


@pytest.mark.parametrize("point, said, written", [
    ("plan:1", "before `fp4patch apply` wrote anything; no file changed", False),
    ("file:1", "had written every file of its journal first, so the operation is complete", True),
])
def test_ctrl_c_during_apply_says_what_state_the_files_are_in(site_060: Path, point: str, said: str, written: bool) -> None:
    """Ctrl-C before the write phase stops at once, nothing written; during it, it is held until the
    journal is carried out (never a half-patched file), and both say so in one line, exit 130."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:  # e.g. a suite started as a background job (`cmd &`)
        pytest.skip("SIGINT is ignored in this process and so in the CLI it runs: a Ctrl-C cannot reach it")
    before = snapshot(site_060)
    done = run_cli("apply", *BOTH, *sp(site_060), env={"FP4PATCH_FAULT": f"{point}:sigint"})
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 130 and lines[-1].startswith("fp4patch: interrupted (Ctrl-C)") and said in lines[-1], done.stderr
    if written:
        assert run_cli("verify", *BOTH, *sp(site_060)).returncode == 0
        assert not (site_060 / JOURNAL).exists()
    else:
        assert snapshot(site_060) == before


@pytest.mark.parametrize("point, said, written", [
    ("plan:1", "before `fp4patch apply` wrote anything; no file changed", False),
    ("file:1", "had written every file of its journal first, so the operation is complete", True),
    ("tmp:1", "had written every file of its journal first, so the operation is complete", True),
])
def test_sigterm_during_apply_is_handled_as_ctrl_c_is(site_060: Path, point: str, said: str, written: bool) -> None:
    """SIGTERM (docker build cancelled, a CI timeout) ended apply with exit 143, no message, and left the journal and
    a *.fp4patch-tmp file until the next apply. Now: before the write phase it stops at once, nothing written; during
    it (a file written, a temporary file not yet renamed) it is held until the journal is carried out. One line says
    which, exit 143, and no journal, temporary file or lock is left."""
    before = snapshot(site_060)
    done = run_cli("apply", *BOTH, *sp(site_060), env={"FP4PATCH_FAULT": f"{point}:sigterm"})
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 143 and len(lines) == 1, done.stderr
    assert lines[0].startswith("fp4patch: terminated (SIGTERM)") and said in lines[0], done.stderr
    assert not (site_060 / JOURNAL).exists() and not list(site_060.rglob("*.fp4patch-tmp")) and not (site_060 / LOCK).exists()
    if written:
        assert run_cli("verify", *BOTH, *sp(site_060)).returncode == 0
    else:
        assert snapshot(site_060) == before


def test_sigterm_from_outside_at_any_moment_leaves_no_journal(site_060: Path, patched_060) -> None:
    """A real SIGTERM sent by another process while apply runs (whenever it lands: while Python starts, before the
    write phase or during it) ends it with exit 143 (or 0 if it had finished) and one line, and never leaves a journal
    or a temporary file: the target files are all original or all patched."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    for delay in (0.6, 1.5, 3.0, 5.0):
        proc = subprocess.Popen(
            [sys.executable, "-m", "fp4patch", "apply", *BOTH, *sp(site_060)], env=env, cwd=REPO, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=600)
        lines = [line for line in stderr.splitlines() if line.strip()]
        # -15: it landed while the interpreter started, before any fp4patch code ran, or in the interpreter's shutdown
        # after apply's last line (on a loaded machine apply can finish within the longest delay): nothing can be said
        # then, and the files are all original or all patched, as the last assertion checks
        assert proc.returncode in (0, 143, -signal.SIGTERM), (delay, proc.returncode, stderr)
        if proc.returncode == 143:
            assert len(lines) == 1 and lines[0].startswith("fp4patch: terminated (SIGTERM)"), stderr
        elif proc.returncode < 0:
            assert not any("terminated" in line for line in lines), stderr  # killed before the handler or after it
        assert not (site_060 / JOURNAL).exists() and not list(site_060.rglob("*.fp4patch-tmp")), (delay, stderr)
        assert targets(site_060) in (patched_060["original"], patched_060["patched"]), (delay, stderr)
        run_cli("revert", *sp(site_060), check=True)


def test_a_read_only_site_packages_is_refused_before_any_file_is_parsed(site_060: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """apply on a read-only site-packages took 21 s to refuse: it planned every file first. fp4patch's record (none
    here) shows that writes are needed, so the refusal comes before libcst parses anything; the files are untouched."""
    import libcst

    from fp4patch.engine.coordinator import Engine, select_specs
    from fp4patch.errors import FileSystemError
    from fp4patch.catalog.spec import load_specs

    specs = [s for s in load_specs() if s.distribution == "flashinfer-python"]
    engine = Engine(_dist(site_060), specs, notify=lambda m: None)
    parsed: list[str] = []

    def no_parse(*args, **kwargs):
        parsed.append("parse")
        raise AssertionError("a file was parsed before the refusal")

    files = snapshot(site_060)
    with read_only(site_060):
        monkeypatch.setattr(libcst, "parse_module", no_parse)
        with pytest.raises(FileSystemError) as refused:
            engine.apply(select_specs(specs, None))
    assert not parsed and "not writable" in str(refused.value)
    assert snapshot(site_060) == files


def _dist(site: Path):
    from fp4patch.target.environment import find_distribution

    return find_distribution(from_site_packages(site), "flashinfer-python")


def test_an_interrupted_run_of_many_specs_is_counted_not_listed() -> None:
    """The notes on an interrupted apply name up to three specs and count more (with the 21 default specs the
    line ran to 870-1,000 columns in a log)."""
    from types import SimpleNamespace

    from fp4patch.engine.recovery import _what

    assert _what(SimpleNamespace(operation="apply", specs=["a", "b"])) == "apply of a, b"
    assert _what(SimpleNamespace(operation="revert", specs=[f"spec-{i}" for i in range(21)])) == "revert of 21 specs"
