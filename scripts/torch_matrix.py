#!/usr/bin/env python3
"""The torch matrix (``make test-torch``): fp4patch's compile checks under each torch release of the supported range.

Usage (from the checkout; ``make test-torch`` runs ``run``)::

    python scripts/torch_matrix.py run [--jobs N] [--output docs/compatibility.md] VERSION ...
    python scripts/torch_matrix.py venv VERSION ...   # make (or reuse) the venvs only
    python scripts/torch_matrix.py dedupe             # hard-link identical large files across the cached venvs
    python scripts/torch_matrix.py report             # rewrite the table from docs/torch-matrix.json

For each torch release (``run``):

1. **A venv with that torch**, cached outside the checkout in ``$FP4PATCH_TORCH_CACHE/v<version>`` (default
   ``~/.cache/fp4patch/torch``): an existing venv whose torch is that release is reused, whoever built it; else it is
   made with ``python -m venv`` and ``pip install torch==<version>`` (the package registry's build: on Linux the CUDA
   build, which runs on CPU; ``--torch-index-url`` picks another index, e.g. PyTorch's CPU one). That one pip call
   runs with ``PIP_CONSTRAINT=/dev/null``: a machine's pip configuration may cap torch (``constraint =`` in
   ``pip.conf``), which would refuse the newer releases. Then the test requirements (``requirements-test.txt``:
   pytest, FlashInfer's light import-time dependencies) and fp4patch's own dependencies (``pyproject.toml``);
   fp4patch itself is never installed there, so checkouts sharing the cache never overwrite each other: the tests
   run in a venv of the checkout's own over it (:func:`checkout_python`). A :class:`filelock.FileLock` per venv (``v<version>.lock`` beside it) makes
   two runs wait for each other instead of building the same venv; ``fp4patch-matrix.json`` in the venv records
   what was installed, so a later run skips pip.
2. **The tests marked ``torch_matrix``** under that venv's python, in pytest-xdist workers
   (:data:`TEST_FILES`): the fullgraph trace tests, eager stays eager, the MoE ops' compile checks, and
   ``tests/test_torch_matrix.py``: per FlashInfer release of :data:`FLASHINFER_RELEASES`, after ``fp4patch apply``,
   ``verify --trace``, every function of ``fp4patch scan`` called from a compiled function and handed to
   ``torch.compile`` directly, and the README's Docker recipe on the engines' pins (:data:`ENGINE_PINS`).
3. **The results**: ``docs/torch-matrix.json`` keeps each torch release's counts (a run of some releases
   replaces theirs and keeps the others), and the section of ``docs/compatibility.md`` between
   :data:`BEGIN` and :data:`END` is rewritten from it (``make compat`` writes the rest of that file and keeps the
   section).

``dedupe`` (run after each venv that ``run`` or ``venv`` builds): the CUDA builds of torch carry the same
``nvidia-*`` libraries from one release to the next of the same CUDA (5 to 7 GB a venv in all); every file of
1 MiB or more that is byte-identical (same size, then same SHA-256) and of the same mode in two cached venvs becomes
one file with two links (a link made beside it, renamed over it: atomic). pip replaces a file it upgrades rather
than writing into it, so a later install in one venv never changes another's. A venv that is being built (its lock
is held, or it has no torch yet) is left alone.

Exit status: 0 when every test passed; 1 when a test failed; 2 on bad input or a torch release that cannot be
installed (one line says which and why).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from filelock import FileLock, Timeout
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parent.parent
#: The supported torch range (decided: FlashInfer 0.7.2+ imports only on torch >= 2.7 (``torch.float8_e8m0fnu``), and
#: 2.7 is the first torch with Blackwell (sm_100, CUDA 12.8) builds, which NVFP4 needs; 2.15.0 is the newest release
#: on the registry, 2026-12-02). The matrix runs a release below it to show that fp4patch refuses it.
SUPPORTED = SpecifierSet(">=2.7,<2.16")
RANGE_TEXT = "2.7 to 2.15"
#: ``make test-torch``'s releases: the newest patch release of each minor of the range, both engines' pins (2.14.0,
#: 2.14.1), and 2.6.0 below the floor.
DEFAULT_MATRIX = ["2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0"]
#: CI's: the oldest and the newest of the range (``make test`` covers 2.13, the CPU build).
CI_MATRIX = ["2.7.1", "2.15.0"]
#: The FlashInfer releases of the table's columns (tests/test_torch_matrix.py parametrizes over them).
FLASHINFER_RELEASES = ["0.6.0", "0.6.7", "0.7.2", "0.7.2.post1", "0.7.4"]
#: Engines' pins: engine → (FlashInfer release, torch release), read from each engine's own requirements
#: (SGLang 0.5.23: ``flashinfer_python==0.7.2``, ``torch==2.14.1``; vLLM 0.33.0: ``flashinfer-python==0.7.2.post1``,
#: ``torch==2.14.0``).
ENGINE_PINS = {"SGLang 0.5.23": ("0.7.2", "2.14.1"), "vLLM 0.33.0": ("0.7.2.post1", "2.14.0")}
#: The test files that hold ``torch_matrix`` tests (tests/test_torch_matrix.py checks that this list is complete).
TEST_FILES = [
    "tests/test_trace_fullgraph.py",
    "tests/test_eager_stays_eager.py",
    "tests/test_op_moe.py",
    "tests/test_op_fp8_moe.py",
    "tests/test_torch_matrix.py",
]
MARKS = "torch_matrix and not exhaustive and not eras and not property_long and not recipe"
#: The test run below the supported range (tests/test_torch_matrix.py): fp4patch refuses that torch.
BELOW_TEST = "test_below_the_range_apply_and_verify_refuse_in_one_line"
MARKER = "fp4patch-matrix.json"
BEGIN = "<!-- torch matrix: written by make test-torch (scripts/torch_matrix.py); do not edit by hand -->"
END = "<!-- end of torch matrix -->"
#: The start of the replay section (``tools/compat_report.py``'s ``REPLAY_BEGIN``): a new torch section goes before it.
REPLAY_BEGIN = "<!-- replay: written by python -m tools.compat --replay -->"
RESULTS = REPO / "docs" / "torch-matrix.json"
#: Each run's junit report, ``junit-<torch>.xml`` (build output, not committed): every failure in full.
REPORTS = REPO / "build" / "torch-matrix"
#: Free space a torch install needs before it starts (bytes): the registry's CUDA builds take 5 to 7 GB installed.
MIN_FREE = 8 * 1024**3
MIN_DEDUPE_SIZE = 1024**2
#: The SHA-256 of the cached venvs' large files, kept beside them for the next dedupe.
DIGESTS = ".dedupe-sha256.json"


#: A test's failure when its child interpreter exited non-zero (``child_json`` of tests/python_forkserver.py) ...
CHILD_EXITED = re.compile(r"^AssertionError: child exited -?\d+")
#: ... and an exception line of the child's traceback, in pytest's report of it (``E   IndexError: ...``).
EXCEPTION_LINE = re.compile(r"^E\s+((?:\w+\.)*\w*(?:Error|Exception|Unsupported|Exit)\b.*)$")


class MatrixError(Exception):
    """Bad input or an environment the matrix cannot use; its message is one line for the user."""


# ------------------------------------------------------------------------------------------------ versions, paths
def torch_release(text: str) -> Version:
    """``text`` as a torch release (``2.14.1``).

    Raises:
        MatrixError: not a version, or not a final release (a local label, a pre-release).
    """
    try:
        version = Version(text)
    except InvalidVersion:
        raise MatrixError(f"torch {text!r}: not a version (give releases such as 2.14.1)") from None
    if version.local or version.is_prerelease or version.is_devrelease:
        raise MatrixError(f"torch {text}: give a release such as {version.base_version} (no local label or pre-release)")
    return version


def torch_cache() -> Path:
    """Where the torch venvs live: ``$FP4PATCH_TORCH_CACHE``, else ``~/.cache/fp4patch/torch``."""
    return Path(os.environ.get("FP4PATCH_TORCH_CACHE") or Path.home() / ".cache" / "fp4patch" / "torch").expanduser()


def venv_dir(version: str, cache: Path | None = None) -> Path:
    """The venv of torch ``version``: ``<cache>/v<version>``."""
    return (cache or torch_cache()) / f"v{version}"


def site_packages(venv: Path) -> Path | None:
    """The venv's ``lib/python3.X/site-packages`` (the first found), or None."""
    found = sorted(venv.glob("lib/python3*/site-packages"))
    return found[0] if found else None


def installed_version(venv: Path, name: str) -> str | None:
    """The version of distribution ``name`` installed in ``venv`` (read from its ``.dist-info`` with
    :mod:`importlib.metadata`, without running the venv's python), or None."""
    where = site_packages(venv)
    if where is None:
        return None
    for dist in metadata.distributions(path=[str(where)]):
        if canonicalize_name(dist.metadata["Name"] or "") == canonicalize_name(name):
            return dist.version
    return None


def has_release(venv: Path, version: str) -> bool:
    """Whether ``venv`` holds torch ``version`` (any build of it: ``2.13.0+cpu`` is 2.13.0)."""
    found = installed_version(venv, "torch")
    try:
        return found is not None and Version(Version(found).public) == Version(version)
    except InvalidVersion:
        return False


# ------------------------------------------------------------------------------------------------ venvs
def requirements() -> list[str]:
    """What a matrix venv gets besides torch: the lines of ``requirements-test.txt`` and fp4patch's dependencies
    (``[project] dependencies`` and the ``test`` extra of ``pyproject.toml``)."""
    lines = [line.split("#", 1)[0].strip() for line in (REPO / "requirements-test.txt").read_text().splitlines()]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [*filter(None, lines), *project["dependencies"], *project.get("optional-dependencies", {}).get("test", [])]


def _pip(python: Path, args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})}, check=False)


def _pip_reason(stderr: str) -> str:
    sys.path.insert(0, str(REPO))
    try:
        from fp4patch.catalog.releases import pip_reason
    finally:
        sys.path.remove(str(REPO))
    return pip_reason(stderr)


def _make_venv(python: str, venv: Path, version: str) -> None:
    made = subprocess.run([python, "-m", "venv", str(venv)], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        raise MatrixError(f"torch {version}: cannot make a venv at {venv} ({(made.stderr.strip().splitlines() or ['no output'])[-1]})")


@dataclass
class Venv:
    """A matrix venv: where it is, its torch as installed (``2.7.1+cu126``), and the seconds its making took (0 when
    it was reused as it was)."""

    path: Path
    torch: str
    seconds: float
    built: bool

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def ensure_venv(version: str, python: str = sys.executable, index_url: str | None = None, cache: Path | None = None,
                log=print, min_free: int = MIN_FREE) -> Venv:
    """The venv of torch ``version`` with the test requirements, made or completed as needed (see the module docstring).

    ``python``: the interpreter whose ``venv`` module makes a new venv (the checkout's Python, 3.11+). ``index_url``:
    the index of the torch install only (``--index-url``). Waits for another run building the same venv (its lock).

    Raises:
        MatrixError: ``version`` is not a release; torch ``version`` cannot be installed (pip's reason, e.g. no such
            release for this Python or platform); less than ``min_free`` bytes are free for a new torch; the
            requirements cannot be installed; or they changed the venv's torch.
    """
    torch_release(version)
    cache = cache or torch_cache()
    cache.mkdir(parents=True, exist_ok=True)
    venv = venv_dir(version, cache)
    started = time.monotonic()
    wanted = {"torch": version, "requirements": hashlib.sha256("\n".join(requirements()).encode()).hexdigest()}
    built = False
    with FileLock(str(cache / f"v{version}.lock")):
        if not has_release(venv, version):
            free = shutil.disk_usage(cache).free
            if free < min_free:
                raise MatrixError(f"torch {version}: not installed, {free / 1024**3:.1f} GB free in {cache} and a torch build "
                                  f"needs about {min_free / 1024**3:.0f} GB; run `python scripts/torch_matrix.py dedupe` or remove a venv there")
            log(f"torch {version}: making {venv}")
            shutil.rmtree(venv, ignore_errors=True)
            _make_venv(python, venv, version)
            index = ["--index-url", index_url] if index_url else []
            # a machine's pip.conf may cap torch (constraint = ...): lifted for this one install
            done = _pip(venv / "bin" / "python", [*index, f"torch=={version}"], env={"PIP_CONSTRAINT": "/dev/null"})
            if done.returncode != 0 or not has_release(venv, version):
                shutil.rmtree(venv, ignore_errors=True)
                where = f" from {index_url}" if index_url else ""
                raise MatrixError(f"torch {version}: cannot be installed{where} (pip: {_pip_reason(done.stderr)})")
            built = True
        marker = venv / MARKER
        recorded = json.loads(marker.read_text()) if marker.is_file() else {}
        if {k: recorded.get(k) for k in wanted} != wanted:
            log(f"torch {version}: installing the test requirements into {venv}")
            before = installed_version(venv, "torch")
            done = _pip(venv / "bin" / "python", [*requirements()])
            if done.returncode != 0:
                raise MatrixError(f"torch {version}: the test requirements cannot be installed into {venv} (pip: {_pip_reason(done.stderr)})")
            after = installed_version(venv, "torch")
            if after != before:
                raise MatrixError(f"torch {version}: installing the test requirements replaced torch {before} by {after} in {venv}; "
                                  "a requirement pins torch, remove it from requirements-test.txt")
            marker.write_text(json.dumps({**wanted, "installed": after, "made": _now()}, indent=1) + "\n")
    return Venv(venv, installed_version(venv, "torch") or version, time.monotonic() - started, built)


# ------------------------------------------------------------------------------------------------ dedupe
def disk_use(roots: list[Path]) -> int:
    """Bytes allocated on disk to the files under ``roots``, each inode counted once (as ``du`` counts)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                try:
                    st = os.lstat(os.path.join(folder, name))
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Deduped:
    """What :func:`dedupe` did: files it linked, the bytes those freed, disk use of the venvs before and after."""

    linked: int
    freed: int
    before: int
    after: int
    venvs: list[Path]


def ready_venvs(cache: Path | None = None) -> list[Path]:
    """The cached venvs that are complete: ``v*`` folders holding a torch, whose lock no run holds now."""
    cache = cache or torch_cache()
    found = []
    for venv in sorted(p for p in cache.glob("v*") if p.is_dir()):
        try:
            with FileLock(str(cache / f"{venv.name}.lock"), timeout=0):
                if installed_version(venv, "torch"):
                    found.append(venv)
        except Timeout:
            continue
    return found


def dedupe(venvs: list[Path], min_size: int = MIN_DEDUPE_SIZE, log=print, digests_file: Path | None = None) -> Deduped:
    """Hard-link the byte-identical files of ``min_size`` bytes or more across ``venvs`` (see the module docstring).

    Files are grouped by size, then by SHA-256 (only groups with more than one inode are read) and mode; within a
    group every file becomes a link to the first (oldest path order). Symbolic links are left alone, as are files on
    another file system than the first of their group. ``digests_file`` (JSON) keeps the SHA-256 of each file read,
    by device, inode, size and modification time, so that a later dedupe reads only new files (a file replaced
    since has another inode or time). Returns a :class:`Deduped`.
    """
    known: dict[str, str] = {}
    if digests_file is not None and digests_file.is_file():
        try:
            known = json.loads(digests_file.read_text())
        except ValueError:
            known = {}
    before = disk_use(venvs)
    by_size: dict[int, list[Path]] = {}
    for venv in venvs:
        for folder, _dirs, files in os.walk(venv):
            for name in files:
                path = Path(folder) / name
                st = path.lstat()
                if path.is_symlink() or st.st_size < min_size:
                    continue
                by_size.setdefault(st.st_size, []).append(path)
    linked = freed = 0
    for size, paths in sorted(by_size.items()):
        inodes = {(p.stat().st_dev, p.stat().st_ino) for p in paths}
        if len(paths) < 2 or len(inodes) < 2:
            continue
        groups: dict[tuple[str, int], list[Path]] = {}
        digests: dict[tuple[int, int], str] = {}
        for path in paths:
            st = path.stat()
            key = (st.st_dev, st.st_ino)
            if key not in digests:
                stamp = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
                digests[key] = known.get(stamp) or _sha256(path)
                known[stamp] = digests[key]
            groups.setdefault((digests[key], st.st_mode), []).append(path)
        for same in groups.values():
            keep = same[0]
            kept = keep.stat()
            for other in same[1:]:
                st = other.stat()
                if (st.st_dev, st.st_ino) == (kept.st_dev, kept.st_ino) or st.st_dev != kept.st_dev:
                    continue
                partner = other.with_name(f".{other.name}.fp4patch-link")
                partner.unlink(missing_ok=True)
                os.link(keep, partner)
                os.replace(partner, other)
                linked += 1
                if st.st_nlink == 1:
                    freed += size
    if digests_file is not None:
        partial = digests_file.with_name(digests_file.name + ".partial")
        partial.write_text(json.dumps(known))
        partial.replace(digests_file)
    after = disk_use(venvs)
    log(f"dedupe: {linked} files linked over {len(venvs)} venvs; {before / 1024**3:.1f} GB -> {after / 1024**3:.1f} GB on disk")
    return Deduped(linked, freed, before, after, venvs)


def dedupe_cache(min_size: int = MIN_DEDUPE_SIZE, cache: Path | None = None, log=print) -> Deduped:
    """:func:`dedupe` over the complete venvs of the cache (:func:`ready_venvs`), one run at a time (``.dedupe.lock``),
    with the digests kept in the cache (:data:`DIGESTS`)."""
    cache = cache or torch_cache()
    with FileLock(str(cache / ".dedupe.lock")):
        return dedupe(ready_venvs(cache), min_size=min_size, log=log, digests_file=cache / DIGESTS)


# ------------------------------------------------------------------------------------------------ running
def _now() -> str:
    return _dt.datetime.now().strftime("%Y-%m-%d %H:%M")


def checkout_python(venv: Venv) -> Path:
    """This checkout's interpreter over ``venv``: a venv of its own in ``build/torch-matrix/python-<torch>`` (made anew,
    ``--without-pip``: no file copied) whose site-packages holds two ``.pth`` files, one adding the cached venv's
    site-packages (``site.addsitedir``, so its own ``.pth`` files count) and one this checkout, as the editable install
    of ``.venv`` adds it. Every interpreter the tests start (``sys.executable``) sees torch, the test requirements and
    this checkout's fp4patch; the cached venv, shared by checkouts, is never written. Returns its ``bin/python``.

    Raises:
        MatrixError: the venv cannot be made.
    """
    root = REPORTS / f"python-{venv.path.name.removeprefix('v')}"
    shutil.rmtree(root, ignore_errors=True)
    made = subprocess.run([str(venv.python), "-m", "venv", "--without-pip", str(root)], capture_output=True, text=True, check=False)
    own = site_packages(root)
    shared = site_packages(venv.path)
    if made.returncode != 0 or own is None or shared is None:
        raise MatrixError(f"torch {venv.torch}: cannot make {root} over {venv.path} ({(made.stderr.strip().splitlines() or ['no site-packages'])[-1]})")
    (own / "fp4patch_matrix_torch.pth").write_text(f"import site; site.addsitedir({str(shared)!r})\n")
    (own / "fp4patch_matrix_checkout.pth").write_text(f"{REPO}\n")
    return root / "bin" / "python"


def run_tests(venv: Venv, jobs: str, junit: Path, extra: list[str] | None = None) -> tuple[int, float]:
    """Run the ``torch_matrix`` tests of :data:`TEST_FILES` with :func:`checkout_python` over ``venv``; (pytest's exit
    status, seconds). ``jobs``: pytest-xdist workers (``auto``, a number, ``0`` for one process); ``extra``: more
    pytest arguments. ``FP4PATCH_TOOL`` names the checkout venv's ``fp4patch`` (fp4patch in its own venv, for the
    Docker recipe of tests/test_torch_matrix.py) when it exists.
    """
    env = dict(os.environ)
    tool = REPO / ".venv" / "bin" / "fp4patch"
    if tool.exists() and "FP4PATCH_TOOL" not in env:
        env["FP4PATCH_TOOL"] = str(tool)
    parallel = [] if jobs == "0" else ["-n", jobs, "--dist", "loadgroup"]
    # below the range, what is checked is the refusal (the other tests skip there or fail for torch's own reasons)
    files = TEST_FILES if Version(Version(venv.torch).public) in SUPPORTED else [f"{TEST_FILES[-1]}::{BELOW_TEST}"]
    command = [str(checkout_python(venv)), "-m", "pytest", "-q", "-p", "no:cacheprovider", *parallel, "-m", MARKS,
               f"--junitxml={junit}", "-o", "junit_family=xunit1", *files, *(extra or [])]
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=env, check=False)
    return done.returncode, time.monotonic() - started


def _one_line(text: str, limit: int = 240) -> str:
    line = " ".join((text or "").strip().split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def read_junit(junit: Path) -> list[dict]:
    """The test cases of a pytest junit report: ``{id, outcome (passed/failed/skipped), cell, engine, cause}``.

    ``cell`` and ``engine`` are the ``matrix_cell`` / ``engine`` properties tests/test_torch_matrix.py records
    (the FlashInfer release, the engine pin); ``cause`` the ``root_cause`` property, else the failure's message.
    """
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        outcome = "failed" if failure is not None else "skipped" if skipped is not None else "passed"
        cause = props.get("root_cause") or ""
        if failure is not None and not cause:  # the first line of pytest's message, else the last of the traceback
            lines = [line for line in (failure.get("message") or "").splitlines() if line.strip()]
            cause = lines[0] if lines else ((failure.text or "").strip().splitlines() or [""])[-1]
            if CHILD_EXITED.match(cause):  # a child script died (tests/python_forkserver.py): the exception it died of
                raised = [m.group(1) for m in map(EXCEPTION_LINE.match, (failure.text or "").splitlines()) if m and not CHILD_EXITED.match(m.group(1))]
                if raised:
                    cause = f"{cause}: {raised[-1]}"
        module = (case.get("classname") or "").replace(".", "/")
        cases.append({
            "id": f"{module}.py::{case.get('name')}", "outcome": outcome, "cell": props.get("matrix_cell"),
            "engine": props.get("engine"), "cause": _one_line(cause) if outcome == "failed" else "",
            "order": int(props["order"]) if props.get("order", "").isdigit() else None,
            "seconds": float(case.get("time") or 0),
        })
    return cases


def summarize(cases: list[dict]) -> dict:
    """Counts per column: each FlashInfer release (``cell``), ``tests`` (the other tests), ``engines`` (per pin):
    ``{passed, failed, skipped, first_failure: {id, cause} | None, failures: [ids], causes: {cause: count}}``.

    The first failure is the first in the tests' own ``order`` (tests/test_torch_matrix.py: ``verify --trace``, then
    each function nested, then directly, in the scan's order), else in node id order: the same whatever order the
    pytest-xdist workers finished in."""

    def count(group: list[dict]) -> dict:
        failed = sorted((c for c in group if c["outcome"] == "failed"), key=lambda c: (c.get("order") is None, c.get("order") or 0, c["id"]))
        causes: dict[str, int] = {}
        for c in failed:
            causes[c["cause"]] = causes.get(c["cause"], 0) + 1
        return {
            "passed": sum(c["outcome"] == "passed" for c in group), "failed": len(failed),
            "skipped": sum(c["outcome"] == "skipped" for c in group),
            "first_failure": {"id": failed[0]["id"], "cause": failed[0]["cause"]} if failed else None,
            "failures": [c["id"] for c in failed][:50], "causes": causes,
        }

    cells = {v: count([c for c in cases if c["cell"] == v and not c["engine"]]) for v in FLASHINFER_RELEASES}
    engines = {e: count([c for c in cases if c["engine"] == e]) for e in ENGINE_PINS}
    others = count([c for c in cases if not c["cell"] and not c["engine"]])
    return {"cells": cells, "tests": others, "engines": {e: c for e, c in engines.items() if c["passed"] + c["failed"]}}


def load_results(path: Path = RESULTS) -> dict:
    """``docs/torch-matrix.json``: ``{"releases": {torch version: row}}`` (empty when absent)."""
    return json.loads(path.read_text()) if path.is_file() else {"releases": {}}


def save_results(results: dict, path: Path = RESULTS) -> None:
    ordered = dict(sorted(results["releases"].items(), key=lambda item: Version(item[0])))
    path.write_text(json.dumps({"releases": ordered}, indent=1) + "\n")


# ------------------------------------------------------------------------------------------------ the table
def _cell(count: dict | None, notes: dict[str, str]) -> str:
    if not count or count["passed"] + count["failed"] == 0:
        return "—"
    text = f"{count['passed']}/{count['passed'] + count['failed']}"
    if count["first_failure"]:
        cause = count["first_failure"]["cause"] or "(no message)"
        key = notes.setdefault(cause, f"c{len(notes) + 1}")
        text += f" [{key}]"
    return text


def render_section(results: dict) -> str:
    """The torch × FlashInfer section of docs/compatibility.md, :data:`BEGIN` to :data:`END`, from ``results``."""
    notes: dict[str, str] = {}
    rows = []
    for version, row in sorted(results["releases"].items(), key=lambda item: Version(item[0])):
        label = version if Version(version) in SUPPORTED else f"{version} (below the range)"
        pins = [e for e, (_fi, t) in ENGINE_PINS.items() if t == version]
        if pins:
            label += " — " + ", ".join(f"{e}'s torch" for e in pins)
        cells = [_cell(row["summary"]["cells"].get(v), notes) for v in FLASHINFER_RELEASES]
        rows.append(f"| {label} | {row['installed']} | " + " | ".join(cells) + f" | {_cell(row['summary']['tests'], notes)} | "
                    f"{row['measured']} ({row['seconds']['tests']:.0f} s) |")
    header = ["torch", "installed build", *FLASHINFER_RELEASES, "suite tests", "measured (test time)"]
    lines = [
        BEGIN,
        "## torch × FlashInfer",
        "",
        "Written by `make test-torch` (`scripts/torch_matrix.py`, [development](development.md#the-torch-matrix)) from",
        "[torch-matrix.json](torch-matrix.json); each row is that torch release's last run. The supported torch range is",
        f"**{RANGE_TEXT}**: FlashInfer 0.7.2 and later import only on torch 2.7 or newer, and 2.7 is the first torch with",
        "Blackwell builds, which NVFP4 needs; the release below it is run to check that fp4patch refuses it. Each torch is",
        "the package registry's build (on Linux the CUDA build, run on CPU, the tests using fake CUDA tensors).",
        "",
        "A FlashInfer cell counts the tests of `tests/test_torch_matrix.py` on that release, passed/run: after `fp4patch",
        "apply`, `verify --trace`, and each function `fp4patch scan` finds in the release under `fullgraph=True`, called",
        "from a compiled function and handed to `torch.compile` directly (skipped: the functions the release lacks and",
        "those a spec declares not needed). *suite tests* counts the other `torch_matrix` tests: the fullgraph trace",
        "tests, eager stays eager, and the MoE ops compiled with two token counts (on 0.6.0 and 0.7.4). `[cN]` is the",
        "root cause of the cell's first failure (listed below the tables); torch-matrix.json has every failure's cause.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *rows,
        "",
        "The engines' pins, with the README's Docker recipe (`fp4patch apply --python <server venv>`, then",
        "`fp4patch verify --trace --python <server venv>`, fp4patch in its own venv as in `examples/Dockerfile`; the",
        "server venv is the torch venv with that FlashInfer release installed `--no-deps`), then `fp4patch revert`",
        "compared byte for byte with the install:",
        "",
        "| engine | FlashInfer | torch | Docker recipe, revert |",
        "|---|---|---|---|",
    ]
    for engine, (flashinfer, torch) in ENGINE_PINS.items():
        row = results["releases"].get(torch)
        count = row["summary"]["engines"].get(engine) if row else None
        lines.append(f"| {engine} | {flashinfer} | {torch} | {_cell(count, notes) if count else 'not run'} |")
    if notes:
        lines += ["", "Root causes of the first failure of each cell:", ""]
        lines += [f"- [{key}] {cause}" for cause, key in notes.items()]
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    """Put ``section`` into ``path`` between :data:`BEGIN` and :data:`END`: in place of an earlier one, else before the
    replay section (:data:`REPLAY_BEGIN`), else at the end; the rest of the file (``make compat``'s) is kept as it is."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if BEGIN in text and END in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = head + section.rstrip("\n") + tail
    elif REPLAY_BEGIN in text:
        head, _, tail = text.partition(REPLAY_BEGIN)
        text = head + section + "\n" + REPLAY_BEGIN + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text, encoding="utf-8")


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True, check=False)
    return (done.stdout.strip() or "unknown") + ("+changes" if dirty.stdout.strip() else "")


# ------------------------------------------------------------------------------------------------ commands
def cmd_run(args: argparse.Namespace) -> int:
    versions = args.versions or DEFAULT_MATRIX
    for v in versions:
        torch_release(v)
    results = load_results(args.results)
    failed = False
    for version in versions:
        venv = ensure_venv(version, python=args.python, index_url=args.torch_index_url)
        if venv.built:
            dedupe_cache()
        print(f"torch {version} ({venv.torch}, {venv.path}): venv in {venv.seconds:.0f} s; running the torch_matrix tests", flush=True)
        junit = REPORTS / f"junit-{version}.xml"
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.unlink(missing_ok=True)
        rc, seconds = run_tests(venv, args.jobs, junit, args.pytest_args)
        if not junit.is_file():
            raise MatrixError(f"torch {version}: pytest wrote no report (exit {rc}); run it by hand: {REPORTS}/python-{version}/bin/python -m pytest {' '.join(TEST_FILES)}")
        cases = read_junit(junit)
        summary = summarize(cases)
        results["releases"][version] = {
            "installed": venv.torch, "measured": _now(), "fp4patch": _commit(), "python": platform.python_version(),
            "seconds": {"venv": round(venv.seconds), "venv_built": venv.built, "tests": round(seconds)},
            "summary": summary,
        }
        failed = failed or rc != 0
        total = sum(c["outcome"] != "skipped" for c in cases)
        print(f"torch {version}: {sum(c['outcome'] == 'passed' for c in cases)}/{total} passed in {seconds:.0f} s (pytest exit {rc})", flush=True)
        save_results(results, args.results)
        write_section(args.output, render_section(results))
    print(f"wrote {args.output} and {args.results}")
    return 1 if failed else 0


def cmd_venv(args: argparse.Namespace) -> int:
    for version in args.versions:
        venv = ensure_venv(version, python=args.python, index_url=args.torch_index_url)
        print(f"torch {version}: {venv.path} ({venv.torch}; {'made' if venv.built else 'reused'} in {venv.seconds:.0f} s)")
        if venv.built:
            dedupe_cache()
    return 0


def cmd_dedupe(args: argparse.Namespace) -> int:
    dedupe_cache(min_size=args.min_size)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    results = load_results(args.results)
    if args.reread:  # the counts again from each row's kept junit report (after a change of how causes are read)
        for version, row in results["releases"].items():
            junit = REPORTS / f"junit-{version}.xml"
            if junit.is_file():
                row["summary"] = summarize(read_junit(junit))
        save_results(results, args.results)
    write_section(args.output, render_section(results))
    print(f"wrote {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/torch_matrix.py", description="fp4patch's torch matrix (make test-torch)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "venv", "dedupe", "report"):
        p = sub.add_parser(name)
        p.add_argument("--output", type=Path, default=REPO / "docs" / "compatibility.md")
        p.add_argument("--results", type=Path, default=RESULTS)
        p.add_argument("--python", default=sys.executable, help="the Python that makes new venvs (default: this one)")
        p.add_argument("--torch-index-url", default=os.environ.get("TORCH_INDEX_URL") or None)
        p.add_argument("--min-size", type=int, default=MIN_DEDUPE_SIZE, help="dedupe: smallest file to link (bytes)")
        if name in ("run", "venv"):
            p.add_argument("versions", nargs="*" if name == "run" else "+", help="torch releases (run: default all of the matrix)")
        if name == "report":
            p.add_argument("--reread", action="store_true", help="count each row again from its junit report in build/torch-matrix")
        if name == "run":
            p.add_argument("--jobs", default="auto", help="pytest-xdist workers per release (0: one process)")
            p.add_argument("--pytest-args", nargs=argparse.REMAINDER, default=[], help="more pytest arguments (last)")
    args = parser.parse_args(argv)
    try:
        return {"run": cmd_run, "venv": cmd_venv, "dedupe": cmd_dedupe, "report": cmd_report}[args.command](args)
    except MatrixError as exc:
        print(f"torch matrix: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
