"""Shared fixtures: real flashinfer-python releases from the package registry, unpacked per test.

Archives are downloaded once into ``$FP4PATCH_CACHE`` (default ``~/.cache/fp4patch/releases``)
and never committed. Each test gets its own unpacked copy, so tests may patch it freely.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fp4patch.releases import fetch, unpack

REPO = Path(__file__).resolve().parent.parent
SPECS_DIR = REPO / "patches"
DIST = "flashinfer-python"

_unpacked: dict[tuple[str, bool], Path] = {}


def release_site(version: str, tmp_path_factory: pytest.TempPathFactory, sources_only: bool = False) -> Path:
    """A pristine unpacked site-packages of flashinfer-python ``version`` (shared, do not modify).

    ``sources_only`` unpacks only the Python sources and the .dist-info (enough for the static
    commands, and much faster for the large 0.7.x wheels).
    """
    key = (version, sources_only)
    if key not in _unpacked:
        archive = fetch(DIST, version)
        where = tmp_path_factory.mktemp(f"pristine-{version}{'-src' if sources_only else ''}") / "site-packages"
        _unpacked[key] = unpack(archive, where, sources_only=sources_only)
    return _unpacked[key]


@pytest.fixture
def site_factory(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """Call with a version: returns a private copy of that release's site-packages."""

    def make(version: str) -> Path:
        target = tmp_path / f"site-{version}"
        shutil.copytree(release_site(version, tmp_path_factory), target, symlinks=True)
        return target

    return make


@pytest.fixture
def site_060(site_factory) -> Path:
    """A private site-packages holding the real flashinfer-python 0.6.0 wheel."""
    return site_factory("0.6.0")


def run_cli(*args: str, check: bool = False, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m fp4patch ARGS`` in a subprocess (NO_COLOR, wide terminal)."""
    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    done = subprocess.run([sys.executable, "-m", "fp4patch", *args], capture_output=True, text=True, env=full_env, cwd=REPO)
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
