"""Fetch a released distribution from the package registry and unpack it as a site-packages.

Used by the test suite (real FlashInfer sources, never vendored) and by
``fp4patch verify --against``: a wheel is unpacked without installing; an sdist's Python
sources are laid out with a minimal ``.dist-info`` so :mod:`importlib.metadata` finds them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from filelock import FileLock
from packaging.utils import canonicalize_name

from .errors import EnvironmentProblem


def cache_dir() -> Path:
    """Where downloaded archives are kept: ``$FP4PATCH_CACHE`` or ``~/.cache/fp4patch/releases``."""
    return Path(os.environ.get("FP4PATCH_CACHE") or Path.home() / ".cache" / "fp4patch" / "releases")


def _find_archive(directory: Path, name: str, version: str) -> Path | None:
    stem = canonicalize_name(name).replace("-", "_")
    for pattern in (f"{stem}-{version}-*.whl", f"{stem}-{version}.tar.gz", f"{name}-{version}.tar.gz"):
        found = sorted(directory.glob(pattern))
        if found:
            return found[0]
    return None


def fetch(name: str, version: str, cache: Path | None = None) -> Path:
    """The archive of ``name==version`` (a wheel when one exists, else the sdist), downloaded once.

    Runs ``python -m pip download --no-deps`` into the cache (a file lock guards parallel runs).

    Raises:
        EnvironmentProblem: the registry has no such release or cannot be reached.
    """
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / f".{canonicalize_name(name)}-{version}.lock")):
        found = _find_archive(cache, name, version)
        if found:
            return found
        base = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q", "-d", str(cache)]
        attempts = [
            base + ["--only-binary=:all:", f"{name}=={version}"],
            base + ["--no-binary=:all:", "--no-build-isolation", f"{name}=={version}"],
        ]
        last = ""
        for command in attempts:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            found = _find_archive(cache, name, version)
            if found:
                return found
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvironmentProblem(f"{name}=={version}: cannot download from the package registry ({last}); check the version and network")


def unpack(archive: Path, destination: Path, sources_only: bool = False) -> Path:
    """Unpack ``archive`` (wheel or sdist) into ``destination`` and return the site-packages dir.

    A wheel is extracted as is (its ``.dist-info`` included); with ``sources_only``, only its
    Python sources and ``.dist-info`` (what the static checks read: a 0.7.x wheel unpacks to
    ~700 MB in all, mostly CUDA sources and binaries). For an sdist, the top-level
    packages are copied and a ``<name>-<version>.dist-info/METADATA`` is written from PKG-INFO.

    Raises:
        EnvironmentProblem: the archive is neither a wheel nor an sdist.
    """
    destination.mkdir(parents=True, exist_ok=True)
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            members = [
                n for n in wheel.namelist()
                if not sources_only or n.endswith((".py", ".pyi")) or ".dist-info/" in n
            ]
            wheel.extractall(destination, members)
        return destination
    if archive.name.endswith(".tar.gz"):
        scratch = destination.parent / (destination.name + ".sdist")
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        (root,) = [p for p in scratch.iterdir() if p.is_dir()]
        pkg_info = (root / "PKG-INFO").read_text(encoding="utf-8")
        headers = dict(line.split(": ", 1) for line in pkg_info.splitlines() if ": " in line and not line.startswith(" "))
        for package in root.iterdir():
            if package.is_dir() and (package / "__init__.py").exists():
                shutil.copytree(package, destination / package.name, dirs_exist_ok=True)
        info = destination / f"{canonicalize_name(headers['Name']).replace('-', '_')}-{headers['Version']}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {headers['Name']}\nVersion: {headers['Version']}\n")
        shutil.rmtree(scratch)
        return destination
    raise EnvironmentProblem(f"{archive}: not a wheel or an sdist; pass a .whl or .tar.gz file")
