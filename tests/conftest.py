"""Shared fixtures: real flashinfer-python releases from the package registry, unpacked per test.

Archives are downloaded once into ``$FP4PATCH_CACHE`` (default ``~/.cache/fp4patch/releases``)
and never committed. Each release is unpacked once per test run, shared by every pytest-xdist
worker (``make test`` runs ``-n auto``); each test gets its own copy of it, so tests may patch it
freely.

Parallel runs: tests are spread over workers one by one (``--dist loadgroup``). Tests that must
not run beside each other (they share a fixed path or a machine-wide resource) carry the same
``@pytest.mark.xdist_group("<name>")``: a group runs in one worker, one test after the other.
Better: no fixed paths outside ``tmp_path`` and no writes into the checkout.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

from fp4patch.catalog.releases import cache_dir, fetch, unpack

REPO = Path(__file__).resolve().parent.parent
SPECS_DIR = REPO / "patches"
DIST = "flashinfer-python"

_unpacked: dict[tuple[str, bool], Path] = {}


HEAVY_LIST = Path(__file__).resolve().parent / "heavy.txt"


def heavy_tests() -> set[str]:
    """The node ids listed in ``tests/heavy.txt`` (``tests/<file>.py::<test>[<params>]``; comments after ``#``)."""
    lines = HEAVY_LIST.read_text().splitlines() if HEAVY_LIST.is_file() else []
    return {line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of ``tests/heavy.txt`` ``heavy``; under pytest-xdist, hand out the long tests first.

    ``heavy`` (``make test`` deselects it, ``make test-heavy`` selects it) is added before ``-m`` is applied
    (``tryfirst``). A listed id in a file that was collected but not found among its tests is an error that
    names it: the list is stale (a renamed test), regenerate it with ``scripts/heavy_tests.py``.

    Workers take tests in collection order; with the long ones first (marked ``slow`` or ``torch``), the
    many short ones fill the workers at the end instead of one worker finishing a long test alone. The
    order is the same in every worker (a stable sort), as xdist requires. Without xdist nothing changes.
    """
    listed = heavy_tests()
    collected = {item.nodeid for item in items}
    stale = [] if config.getoption("keyword") else sorted(n for n in listed if n not in collected and _whole_file(config, n))
    if stale:
        raise pytest.UsageError(f"tests/heavy.txt lists tests that were not collected: {', '.join(stale[:5])}; regenerate it with scripts/heavy_tests.py")
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.heavy)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: 0 if item.get_closest_marker("slow") or item.get_closest_marker("torch") else 1)


def _whole_file(config: pytest.Config, nodeid: str) -> bool:
    """Whether ``nodeid``'s file was collected whole (named as a directory or a file, not one of its tests)."""
    path = nodeid.split("::", 1)[0]
    return any("::" not in str(arg) and (path.startswith(str(arg).rstrip("/") + "/") or path == str(arg) or str(arg) in (".", ""))
               for arg in config.args)


def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base temporary folder of this test run, the same for every pytest-xdist worker.

    Under xdist each worker's ``getbasetemp()`` is ``<run root>/popen-gwN``; without xdist it is
    the run root itself. Things made once per run and shared by the workers live here, made under
    a :class:`filelock.FileLock` (see :func:`release_site`).
    """
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def release_site(
    version: str, tmp_path_factory: pytest.TempPathFactory, sources_only: bool = False, bytecode: bool = False
) -> Path:
    """A pristine unpacked site-packages of flashinfer-python ``version`` (shared, do not modify).

    Unpacked once per test run for all xdist workers (a file lock serialises the first unpack; a
    ``.complete`` marker tells a finished unpack from an interrupted one). ``sources_only`` unpacks
    only the Python sources and the .dist-info (enough for the static commands, and much faster
    for the large 0.7.x wheels: 0.7.4 unpacks to ~700 MB in all).

    ``bytecode``: a hard-linked copy of the sources-only unpack in which ``import flashinfer`` has
    written its ``__pycache__`` (as after ``pip install``), so that each fresh interpreter
    importing a copy of it does not compile FlashInfer again (about 4 CPU-seconds for 0.7.4).
    Sources only: importing FlashInfer reads no kernel file (they are JIT inputs), and 0.7.4's
    full tree is 15,000 files to link per test instead of 3,600. Needs torch; without it the
    copy has no bytecode.
    """
    sources_only = sources_only or bytecode
    key = (version, sources_only, bytecode)
    if key not in _unpacked:
        root = run_root(tmp_path_factory) / "pristine"
        root.mkdir(exist_ok=True)
        name = f"{version}{'-src' if sources_only else ''}{'-pyc' if bytecode else ''}"
        where = root / name / "site-packages"
        complete = root / name / ".complete"
        source = release_site(version, tmp_path_factory, sources_only=True) if bytecode else None
        with FileLock(str(root / f"{name}.lock")):
            if not complete.exists():
                shutil.rmtree(where, ignore_errors=True)
                if source is None:
                    unpack(fetch(DIST, version), where, sources_only=sources_only)
                else:
                    shutil.copytree(source, where, symlinks=True, copy_function=os.link)
                    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
                    env["PYTHONPATH"] = str(where)
                    subprocess.run([sys.executable, "-c", "import flashinfer"], cwd=where, env=env, capture_output=True, check=False)
                complete.touch()
        _unpacked[key] = where
    return _unpacked[key]


def applied_site(version: str, tmp_path_factory: pytest.TempPathFactory, *specs: str) -> Path:
    """A site-packages of ``version`` (the bytecode unpack of :func:`release_site`, hard-linked)
    on which ``fp4patch apply`` ran with ``--spec`` for each of ``specs`` (the default specs when
    none): made once per test run under a file lock and shared by every test and xdist worker
    that asks for the same version and specs. Read it, never change it: tests that patch, revert
    or edit files take :func:`linked_site` instead. (Child interpreters may import from it: Python
    writes bytecode by rename, which leaves the shared links alone.)
    """
    name = f"{version}-{'+'.join(specs) or 'default'}"
    root = run_root(tmp_path_factory) / "applied"
    root.mkdir(exist_ok=True)
    where, complete = root / name / "site-packages", root / name / ".complete"
    source = release_site(version, tmp_path_factory, bytecode=True)
    with FileLock(str(root / f"{name}.lock")):
        if not complete.exists():
            shutil.rmtree(where, ignore_errors=True)
            shutil.copytree(source, where, symlinks=True, copy_function=os.link)
            run_cli("apply", "--site-packages", str(where), *(a for s in specs for a in ("--spec", s)), check=True)
            complete.touch()
    return where


def engine_cache() -> Path:
    """Where serving engines' wheels (and the few of their dependencies the engine tests install rather than stand
    in for) are downloaded and unpacked: ``engines/cp<major><minor>`` beside the release cache
    (``$FP4PATCH_CACHE/../engines/cp311`` by default ``~/.cache/fp4patch/engines/cp311``), outside the clone. Per
    Python version, because the wheels are (sglang 0.5.23 ships cp311 extension modules, msgspec is compiled)."""
    return cache_dir().parent / "engines" / f"cp{sys.version_info.major}{sys.version_info.minor}"


def engine_site(name: str, version: str, sources_only: bool = False) -> Path:
    """A site-packages holding the ``name==version`` wheel from the package registry, installed without its
    dependencies (``pip download --no-deps``, :func:`fp4patch.catalog.releases.fetch`) and unpacked once into
    :func:`engine_cache` (a file lock and a ``.complete`` marker, as for :func:`release_site`); shared, read-only.

    ``sources_only``: only the Python sources and small data files (:func:`fp4patch.catalog.releases.is_source`) and the
    ``.dist-info``; the vllm 0.33.0 wheel is 336 MB of mostly CUDA binaries that a CPU interpreter cannot load.
    SGLang 0.5.23 is unpacked whole (132 MB): its JIT utilities check at import that ``sglang/kernels/jit`` has
    its ``include`` and ``csrc`` folders.

    Raises:
        fp4patch.errors.EnvironmentProblem: the registry has no such wheel or cannot be reached.
    """
    root = engine_cache()
    root.mkdir(parents=True, exist_ok=True)
    name_dir = root / f"{name}-{version}{'-src' if sources_only else ''}"
    where, complete = name_dir / "site-packages", name_dir / ".complete"
    with FileLock(str(root / f".{name_dir.name}.unpack.lock")):
        if not complete.exists():
            shutil.rmtree(where, ignore_errors=True)
            unpack(fetch(name, version, cache=root), where, sources_only=sources_only)
            complete.touch()
    return where


def _copy_or_link(source: str, target: str) -> None:
    """Copy what tests edit in place (Python sources, .dist-info files); hard-link the rest."""
    if source.endswith((".py", ".pyi")) or ".dist-info" in Path(source).parent.name:
        shutil.copy2(source, target)
    else:
        os.link(source, target)


@pytest.fixture
def site_factory(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """Call with a version: returns a private copy of that release's site-packages.

    Python sources and the .dist-info are real copies (edit them freely); every other file
    (kernels, headers, binaries: 41 of 44 MB for 0.6.0) is a hard link to the shared pristine
    unpack: replace such a file (unlink, then write), never write through it or change its mode.
    """

    def make(version: str) -> Path:
        target = tmp_path / f"site-{version}"
        shutil.copytree(release_site(version, tmp_path_factory), target, symlinks=True, copy_function=_copy_or_link)
        return target

    return make


@pytest.fixture
def linked_site(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """Call with a version: a private site-packages of hard links to the pristine unpacked wheel's
    Python sources and .dist-info (no kernel sources or binaries: importing FlashInfer and the
    trace probes read none).

    The 0.7.4 wheel's sources are 3,600 files, too many to copy for every test. fp4patch replaces a
    file by a new inode (``files.atomic_write``), so patching a linked copy leaves the pristine one
    intact; Python and fp4patch write bytecode by rename too. A test that edits a file by hand must
    replace it (unlink, then write). The copy carries the bytecode of ``import flashinfer`` (see
    :func:`release_site`), so a child interpreter importing it compiles only what was patched.
    """

    def make(version: str, name: str = "site") -> Path:
        target = tmp_path / f"{name}-{version}"
        shutil.copytree(release_site(version, tmp_path_factory, bytecode=True), target, symlinks=True, copy_function=os.link)
        return target

    return make


@pytest.fixture
def site_060(site_factory) -> Path:
    """A private site-packages holding the real flashinfer-python 0.6.0 wheel."""
    return site_factory("0.6.0")


def run_cli(*args: str, check: bool = False, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m fp4patch ARGS`` in a fresh process (NO_COLOR, wide terminal), forked from
    a server that has imported the CLI's modules where ``env`` allows (see python_forkserver). With
    ``FP4PATCH_FAULT`` or ``FP4PATCH_PAUSE`` in ``env``, the command runs under :mod:`tests.faults`."""
    from .python_forkserver import CLI, run_python

    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    module = "tests.faults" if {"FP4PATCH_FAULT", "FP4PATCH_PAUSE"} & set(env or ()) else "fp4patch"
    done = run_python(["-m", module, *args], env=full_env, cwd=REPO, preload=CLI)
    if check and done.returncode != 0:
        raise AssertionError(f"fp4patch {' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (relative path → bytes), bytecode caches excluded."""
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@contextlib.contextmanager
def read_only(directory: Path):
    """Make ``directory`` refuse new files, also for root (``chattr +i``); skip if impossible."""
    if os.geteuid() != 0:
        mode = directory.stat().st_mode
        directory.chmod(0o555)
        try:
            yield
        finally:
            directory.chmod(mode)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode != 0:
        pytest.skip("cannot make a directory read-only for root here (chattr +i unsupported)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=True)


def release_params(versions: list[str], core: tuple[str, ...] = ("0.6.0", "0.7.4")) -> list:
    """``versions`` as pytest params: those outside ``core`` (the two ends the suite always checks)
    carry the ``eras`` mark, so ``make test`` runs the ends and ``make test-eras`` every release
    between where the code differs (the per-era sweeps cost minutes of CPU each)."""
    return [v if v in core else pytest.param(v, marks=pytest.mark.eras) for v in versions]
