"""Fetch a released distribution from the package registry and unpack it as a site-packages.

Used by the test suite (real FlashInfer sources, never vendored) and by
``fp4patch verify --against``: a wheel is unpacked without installing; an sdist's Python
sources are laid out with a minimal ``.dist-info`` so :mod:`importlib.metadata` finds them.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from filelock import FileLock
from packaging.utils import canonicalize_name, canonicalize_version

from ..errors import EnvironmentProblem

#: What of a package its import reads besides code: Python sources and the small data files imported
#: modules open (0.6.11.post2's ``flashinfer/gemm/specialized_kernels/*/workloads.json``). Never the
#: CUDA sources and binaries (``.cu``, ``.cuh``, ``.so``, ``flashinfer/data/``), JIT inputs only.
SOURCE_SUFFIXES = (".py", ".pyi", ".json", ".txt", ".typed")


def is_source(relative: str) -> bool:
    """True for a site-packages-relative path :data:`SOURCE_SUFFIXES` keeps (outside ``<package>/data/``)."""
    parts = relative.split("/")
    return relative.endswith(SOURCE_SUFFIXES) and not (len(parts) > 2 and parts[1] == "data")


@functools.lru_cache(maxsize=1)
def fingerprinted_native() -> frozenset[str]:
    """The C++ files the built-in specs' ``mirrors`` name (:func:`fp4patch.catalog.fingerprint.native_files`), which a
    sources-only unpack keeps so that their fingerprints can be taken (read once per process)."""
    from .fingerprint import native_files
    from .spec import load_specs

    return frozenset(native_files(load_specs(None)))


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


def fetch(name: str, version: str, cache: Path | None = None, python: str | None = None) -> Path:
    """The archive of ``name==version`` (a wheel when one exists, else the sdist), downloaded once.

    Runs ``python -m pip download --no-deps`` into the cache (a file lock guards parallel runs),
    so pip's own configuration (index, extra indexes, find-links, proxy, certificates) applies.
    ``python`` is the interpreter whose pip runs (default: this one).

    An sdist is never built. ``pip download`` of an sdist unpacks it and then asks its build
    backend for metadata, which fails for many releases (flashinfer-python < 0.5.0 needs a newer
    setuptools than a fresh venv has, or, with build isolation, a pre-release build dependency
    the registry lacks). So pip runs with ``--no-build-isolation --no-clean`` and a private
    ``TMPDIR``: when the metadata step fails, the sdist tree pip unpacked (its ``PKG-INFO``
    names this release) is packed as ``<name>-<version>.tar.gz`` into the cache — the sdist's
    files, in a new archive.

    Raises:
        EnvironmentProblem: the registry has no such release or cannot be reached; the message
            carries pip's own reason (its ``ERROR:`` lines, or the failing step's last line). Also
            when the cache folder cannot be made (no home directory, read-only, a file in the way).
    """
    try:
        cache = cache or cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
    except (RuntimeError, OSError) as exc:  # no home directory (an arbitrary uid), read-only HOME, a file in the way
        where = cache or "~/.cache/fp4patch/releases"
        reason = getattr(exc, "strerror", None) or exc
        raise EnvironmentProblem(f"{where}: cannot use the download cache ({reason}); set FP4PATCH_CACHE to a writable folder") from None
    with FileLock(str(cache / f".{canonicalize_name(name)}-{version}.lock")):
        found = _find_archive(cache, name, version)
        if found:
            return found
        base = [python or sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", str(cache)]
        done = subprocess.run([*base, "--only-binary=:all:", f"{name}=={version}"], capture_output=True, text=True, check=False)
        found = _find_archive(cache, name, version)
        if found:
            return found
        with tempfile.TemporaryDirectory(prefix=".fp4patch-sdist-", dir=cache) as scratch:
            command = [*base, "--no-binary=:all:", "--no-build-isolation", "--no-clean", f"{name}=={version}"]
            done = subprocess.run(command, capture_output=True, text=True, check=False, env={**os.environ, "TMPDIR": scratch})
            found = _find_archive(cache, name, version) or _pack_unpacked_sdist(Path(scratch), name, version, cache)
        if found:
            return found
        raise EnvironmentProblem(f"{name}=={version}: cannot download from the package registry (pip: {pip_reason(done.stderr)}); check the version and network")


def _pack_unpacked_sdist(scratch: Path, name: str, version: str, cache: Path) -> Path | None:
    """Pack the sdist tree of ``name==version`` that pip unpacked under ``scratch`` (found by its
    ``PKG-INFO``) into ``cache/<name>-<version>.tar.gz``; None when there is none."""
    wanted = (canonicalize_name(name), canonicalize_version(version))
    for pkg_info in sorted([*scratch.glob("*/PKG-INFO"), *scratch.glob("*/*/PKG-INFO")]):
        headers = _pkg_info(pkg_info)
        if (canonicalize_name(headers.get("Name", "")), canonicalize_version(headers.get("Version", ""))) != wanted:
            continue
        stem = f"{canonicalize_name(name).replace('-', '_')}-{version}"
        target = cache / f"{stem}.tar.gz"
        partial = cache / f".{stem}.tar.gz.partial"
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(pkg_info.parent, arcname=stem, filter=lambda member: _sdist_member(member, stem))
        partial.replace(target)
        return target
    return None


def _sdist_member(member: tarfile.TarInfo, stem: str) -> tarfile.TarInfo | None:
    """What of pip's unpacked tree goes back into the cached sdist: not what pip's failed metadata
    step left behind (``build/``: flashinfer 0.2.6's setup.py links ``build/aot-ops-package-dir``
    to an absolute path, which ``tarfile``'s data filter refuses on unpack), nor any link that
    points outside the tree."""
    if member.name == f"{stem}/build" or member.name.startswith(f"{stem}/build/"):
        return None
    if member.issym() or member.islnk():
        target = os.path.normpath(os.path.join(os.path.dirname(member.name), member.linkname))
        if os.path.isabs(member.linkname) or not (target == stem or target.startswith(stem + "/")):
            return None
    return member


def _pkg_info(path: Path) -> dict[str, str]:
    """The headers of a ``PKG-INFO`` (core metadata) file; the first value of each."""
    from email.parser import HeaderParser

    message = HeaderParser().parsestr(path.read_text(encoding="utf-8", errors="replace"))
    return {key: value for key, value in reversed(message.items())}


def pip_reason(stderr: str) -> str:
    """pip's own reason for a failure, one line, from its stderr: its ``ERROR:`` lines (the last
    two: "Could not find a version …", "No matching distribution …"), else the last line of a
    failed subprocess's output (the build backend's exception), else pip's last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    if errors:  # the versions pip saw make a line of hundreds of characters: the catalog lists them
        return re.sub(r" \(from versions: [^)]*\)", "", " ".join(errors[-2:]))
    if "[end of output]" in lines:
        output = lines[: lines.index("[end of output]")]
        if output:
            return output[-1]
    noise = ("hint:", "note:", "╰─>", "×", "│")
    meaningful = [line for line in lines if not line.startswith(noise) and not line.startswith("WARNING:")]
    return (meaningful or lines or ["no output"])[-1]


def _one_line(exc: BaseException) -> str:
    """``exc``'s message on one line (tarfile's ``ReadError`` lists each compression it tried on a line of its own)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _get_again(archive: Path) -> str:
    """What gets a good copy of an ``archive`` that cannot be unpacked: fetching the release again when it is fp4patch's
    download (:func:`cache_dir`), else downloading it again (a file given with ``verify --wheel/--sdist``)."""
    try:
        archive.resolve().relative_to(cache_dir().resolve())
    except (ValueError, OSError, RuntimeError):
        return "download it again"
    return "delete it from the cache and fetch the release again"


def unpack(archive: Path, destination: Path, sources_only: bool = False, keep: frozenset[str] | None = None) -> Path:
    """Unpack ``archive`` (wheel or sdist) into ``destination`` and return the site-packages dir.

    A wheel is extracted as is (its ``.dist-info`` included); with ``sources_only``, only its
    Python sources, the small data files its import reads (:func:`is_source`) and ``.dist-info``
    (what the static checks read and an import needs: a 0.7.x wheel unpacks to ~700 MB in all,
    mostly CUDA sources and binaries), and the files of ``keep`` (site-packages-relative paths;
    default :func:`fingerprinted_native`: the C++ launcher sources the built-in specs fingerprint,
    under ``flashinfer/data/csrc/``). For an sdist, the top-level
    packages are copied and a ``<name>-<version>.dist-info/METADATA`` is written from PKG-INFO.

    Raises:
        EnvironmentProblem: the archive is neither a wheel nor an sdist, or cannot be read as one (empty, junk,
            truncated, a damaged member, a link out of the tree): one line naming it, and what gets a good copy.
    """
    destination.mkdir(parents=True, exist_ok=True)
    if archive.suffix == ".whl":
        import zlib

        try:
            with zipfile.ZipFile(archive) as wheel:
                kept = fingerprinted_native() if keep is None else keep
                members = [n for n in wheel.namelist() if not sources_only or is_source(n) or ".dist-info/" in n or n in kept]
                wheel.extractall(destination, members)
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:  # empty, junk or truncated; a member that does not inflate
            raise EnvironmentProblem(f"{archive}: cannot unpack: not a wheel (zip) file, or a damaged one ({_one_line(exc)}); {_get_again(archive)}") from None
        return destination
    if archive.name.endswith(".tar.gz"):
        scratch = destination.parent / (destination.name + ".sdist")
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(scratch, filter="data")
        except (tarfile.TarError, OSError) as exc:  # FilterError included: a link out of the tree, an absolute path
            raise EnvironmentProblem(f"{archive}: cannot unpack ({_one_line(exc)}); {_get_again(archive)}") from None
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
