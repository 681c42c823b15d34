"""Find the target environment's site-packages and the installed distribution, without importing it.

Importing ``flashinfer`` imports torch and may start a JIT build, so the distribution is
found through :mod:`importlib.metadata` over the target interpreter's ``sys.path``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EnvironmentProblem

if TYPE_CHECKING:
    import subprocess
    from importlib import metadata

    from packaging.version import Version

#: Top-level package assumed when the metadata names none (``top_level.txt``, RECORD); the target interpreter is
#: also asked where it would import each of these from (:data:`_IMPORTS`).
_DEFAULT_PACKAGES = {"flashinfer-python": ("flashinfer",)}

#: Defines ``imports(names)``: for each importable name, ``[file, entry]``: the file the import system would load
#: (``__init__.py``, or the folder of a namespace package), found by ``importlib.util.find_spec`` (which runs no
#: code of the package), and the ``sys.path`` entry as written that holds it (``""``: the current directory, as
#: ``python -c``/``-m`` put it first), or None when no entry holds it (an import hook). Run in the target
#: interpreter (:data:`_PROBE`) and, for fp4patch's own environment, here.
_IMPORTS = """
def imports(names):
    import os, sys
    from importlib.util import find_spec
    found = {}
    for name in names:
        try:
            spec = find_spec(name)
        except Exception:
            continue
        if spec is None:
            continue
        where = spec.origin if spec.has_location else next(iter(spec.submodule_search_locations or ()), None)
        if not where:
            continue
        where = os.path.abspath(where)
        root = os.path.dirname(os.path.dirname(where) if os.path.basename(where).startswith('__init__.') else where)
        entry = next((p for p in sys.path if isinstance(p, str) and os.path.abspath(p or os.curdir) == root), None)
        found[name] = [where, entry]
    return found
"""

#: What the target interpreter is asked: its import path, its executable, where it keeps bytecode
#: (``sys.pycache_prefix``, absolute; None when pycs live in ``__pycache__``) under which tag, where it would
#: import the packages fp4patch patches from (:data:`_IMPORTS`), and its ``PYTHONPATH``.
_PROBE = _IMPORTS + (
    "import json, os, sys; p = getattr(sys, 'pycache_prefix', None); print(json.dumps({'path': sys.path, "
    "'executable': sys.executable, 'pycache_prefix': p and os.path.abspath(p), 'cache_tag': sys.implementation.cache_tag, "
    f"'imports': imports({sorted({n for names in _DEFAULT_PACKAGES.values() for n in names})!r}), "
    "'pythonpath': os.environ.get('PYTHONPATH', '')}))"
)


@dataclass(frozen=True)
class TargetEnvironment:
    """Where fp4patch looks for distributions.

    Attributes:
        paths: import search path of the target interpreter (``sys.path`` order).
        python: the target interpreter as given (``--python``; used to run ``verify --trace``, so a
            wrapper script's flags and environment apply); ``sys.executable`` by default.
        description: how the environment was given, for messages.
        pycache_prefix: the target interpreter's ``sys.pycache_prefix`` (``PYTHONPYCACHEPREFIX``),
            absolute, or None: where it reads and writes bytecode instead of ``__pycache__``.
            For ``--site-packages`` and the default environment, this interpreter's.
        cache_tag: the target interpreter's ``sys.implementation.cache_tag`` (``cpython-311``).
        torch_paths: where torch is looked up for the supported-torch check, when not ``paths``
            (``--site-packages D --python P``: D, then P's import path).
        options: the command-line options that name this environment (``("--python", P)``,
            ``("--site-packages", D)``, or ``()`` for fp4patch's own), repeated in the commands
            fp4patch's messages advise so that they act on the same environment.
        imports: where the target interpreter would import the packages fp4patch patches from, as
            ``(package, file, sys.path entry or None)`` (:data:`_IMPORTS`); empty when not asked (``--site-packages``:
            the directory alone is read, and the probes put it first on their path).
        pythonpath: the target interpreter's ``PYTHONPATH`` (to say where a shadowing copy comes from).
    """

    paths: tuple[str, ...]
    python: str
    description: str
    pycache_prefix: str | None = None
    cache_tag: str | None = None
    options: tuple[str, ...] = ()
    #: Where the interpreter that imports the patched files finds torch, when not ``paths``: with
    #: ``--site-packages D --python P``, D then P's path (P runs what D's FlashInfer compiles).
    torch_paths: tuple[str, ...] = ()
    imports: tuple[tuple[str, str, str | None], ...] = ()
    pythonpath: str = ""

    @property
    def bytecode_prefixes(self) -> tuple[str, ...]:
        """Pycache prefixes whose bytecode of a patched file must be kept current: the target's
        and this interpreter's (a site-packages shared by both), without duplicates."""
        own = sys.pycache_prefix and os.path.abspath(sys.pycache_prefix)
        return tuple(dict.fromkeys(p for p in (self.pycache_prefix, own) if p))

    @property
    def cache_tags(self) -> tuple[str, ...]:
        """Cache tags of the target interpreter and of this one."""
        return tuple(dict.fromkeys(t for t in (self.cache_tag, sys.implementation.cache_tag) if t))


@dataclass(frozen=True)
class InstalledDistribution:
    """An installed distribution as :mod:`importlib.metadata` sees it.

    Attributes:
        name: canonical distribution name (``flashinfer-python``).
        version: its version, from the distribution's METADATA.
        site_packages: the directory its files are relative to (the parent of its dist-info).
        dist: the underlying :class:`importlib.metadata.Distribution`.
        bytecode_prefixes: pycache prefixes to keep current (:attr:`TargetEnvironment.bytecode_prefixes`).
        cache_tags: cache tags whose bytecode is checked (:attr:`TargetEnvironment.cache_tags`).
    """

    name: str
    version: Version
    site_packages: Path
    dist: metadata.Distribution
    bytecode_prefixes: tuple[str, ...] = ()
    cache_tags: tuple[str, ...] = ()

    def locate(self, relative: str) -> Path:
        """Absolute path of a file given relative to site-packages."""
        return self.site_packages / relative

    def spellings(self, relative: str) -> list[Path]:
        """``relative`` under site-packages as resolved and as found on the target's ``sys.path``
        (they differ through a symlink, e.g. a venv's ``lib64``): a pycache prefix mirrors the latter."""
        found = Path(os.path.abspath(str(self.dist.locate_file(relative))))
        return list(dict.fromkeys([self.locate(relative), found]))


def start_probe(python: str) -> subprocess.Popen:
    """Start interpreter ``python`` printing its ``sys.path`` (for :func:`from_python`), so that
    the caller can do other work while it starts (about 20 ms for a plain venv).

    Raises:
        OSError: ``python`` cannot be executed.
    """
    import subprocess

    return subprocess.Popen([python, "-c", _PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def from_python(python: str, started: subprocess.Popen | None = None) -> TargetEnvironment:
    """The environment of interpreter ``python`` (e.g. ``/opt/venv/bin/python``); ``started`` is
    its :func:`start_probe` process when already started. Waits 60 s at most.

    Raises:
        EnvironmentProblem: the interpreter cannot be run or does not answer.
    """
    import subprocess

    if os.path.isdir(python):
        venv = next((os.path.join(python, "bin", n) for n in ("python", "python3") if os.path.isfile(os.path.join(python, "bin", n))), None)
        hint = f"pass --python {venv}" if venv else "pass --python PATH to a Python executable"
        raise EnvironmentProblem(f"{python}: is a directory, not an interpreter; {hint}")
    try:
        process = started or start_probe(python)
        try:
            stdout, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentProblem(f"{python}: cannot run this interpreter ({exc}); pass --python PATH to a Python executable") from None
    if process.returncode != 0:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvironmentProblem(f"{python}: interpreter failed ({last}); pass --python PATH to a working Python")
    try:
        info = json.loads(stdout.strip().splitlines()[-1])
        paths, executable = info["path"], info["executable"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise EnvironmentProblem(f"{python}: did not answer like a Python interpreter (no sys.path printed); pass --python PATH to a Python executable") from None
    # The probe of verify --trace is started as the user starts the target (``python`` itself, not
    # the ``sys.executable`` behind it): a wrapper's flags (-I, -OO) and environment then apply to it too.
    del executable
    return TargetEnvironment(
        tuple(p for p in paths if p), python, f"python {python}", info.get("pycache_prefix"), info.get("cache_tag"), ("--python", str(python)),
        imports=_imports_answer(info.get("imports")), pythonpath=str(info.get("pythonpath") or ""),
    )


def _imports_answer(found: object) -> tuple[tuple[str, str, str | None], ...]:
    """The probe's ``imports`` (``{package: [file, entry]}``) as :attr:`TargetEnvironment.imports`; anything
    malformed is left out (an odd interpreter: no refusal rather than a wrong one)."""
    if not isinstance(found, dict):
        return ()
    return tuple(
        (name, value[0], value[1] if isinstance(value[1], str) else None)
        for name, value in sorted(found.items())
        if isinstance(name, str) and isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)
    )


def from_site_packages(directory: str | Path) -> TargetEnvironment:
    """An environment made of one site-packages directory (``--site-packages DIR``).

    Raises:
        EnvironmentProblem: ``directory`` does not exist, or is a file (a zip archive said so).
    """
    import zipfile

    path = Path(directory)
    if path.is_file() and zipfile.is_zipfile(path):
        raise EnvironmentProblem(
            f"{path}: a zip archive, not a site-packages directory; fp4patch patches files on disk only — install the distribution unzipped"
        )
    if path.exists() and not path.is_dir():
        raise EnvironmentProblem(f"{path}: a file, not a site-packages directory; pass an existing --site-packages DIR")
    if not path.is_dir():
        raise EnvironmentProblem(f"{path}: site-packages directory not found; pass an existing --site-packages DIR")
    return TargetEnvironment((str(path.resolve()),), sys.executable, f"site-packages {path}", *_own_bytecode(), ("--site-packages", str(directory)))


def current() -> TargetEnvironment:
    """The environment of the interpreter running fp4patch."""
    namespace: dict = {}
    exec(_IMPORTS, namespace)  # the same question as the target probe's, asked here
    packages = sorted({n for names in _DEFAULT_PACKAGES.values() for n in names})
    return TargetEnvironment(
        tuple(p for p in sys.path if p), sys.executable, f"python {sys.executable}", *_own_bytecode(),
        imports=_imports_answer(namespace["imports"](packages)), pythonpath=os.environ.get("PYTHONPATH", ""),
    )


def _own_bytecode() -> tuple[str | None, str]:
    """This interpreter's ``(pycache prefix, cache tag)``: the best guess for a target given by
    ``--site-packages`` (run in the same environment, it sees the same ``PYTHONPYCACHEPREFIX``)."""
    return (sys.pycache_prefix and os.path.abspath(sys.pycache_prefix)), sys.implementation.cache_tag


def resolve(python: str | None, site_packages: str | Path | None) -> TargetEnvironment:
    """The environment named by ``--python`` or ``--site-packages`` (default: this interpreter's); both
    together: :func:`checked_with`.

    Raises:
        EnvironmentProblem: see :func:`from_python` and :func:`from_site_packages`.
    """
    if python and site_packages:
        return checked_with(from_site_packages(site_packages), from_python(python))
    return from_python(python) if python else from_site_packages(site_packages) if site_packages else current()


def checked_with(site: TargetEnvironment, interpreter: TargetEnvironment) -> TargetEnvironment:
    """``--site-packages D --python P``: the files of ``site`` (D alone on the path: the distribution found and
    patched there), with ``interpreter`` (P) running what needs torch — the CPU check of a release fp4patch does
    not know, ``verify --trace``, ``scan`` — with D first on its ``sys.path``, and its bytecode settings. For
    fp4patch installed without torch, patching a site-packages that another interpreter (one with torch, a CPU
    build is enough) imports."""
    return TargetEnvironment(
        site.paths,
        interpreter.python,
        f"{site.description} (checked with {interpreter.description})",
        interpreter.pycache_prefix,
        interpreter.cache_tag,
        (*site.options, *interpreter.options),
        (*site.paths, *interpreter.paths),
    )


def locate_distribution(env: TargetEnvironment, name: str) -> metadata.Distribution | None:
    """The distribution ``name`` (any spelling) that the import system finds first on ``env.paths``,
    by :mod:`importlib.metadata`'s own name matching (``distributions(name=..., path=...)``, as
    ``importlib.metadata.distribution`` does); None when it is not installed there."""
    from importlib import metadata

    return next(iter(metadata.distributions(name=name, path=list(env.paths))), None)


class NotInstalled(EnvironmentProblem):
    """Distribution ``name`` is not installed in ``env`` (:func:`find_distribution`).

    The message says how to install it. The CLI, which prints every error, adds what fp4patch left
    there for it, if anything (:func:`fp4patch.engine.leftovers.gone_note`): this module does not look at
    fp4patch's state directories.

    Attributes:
        env: the environment searched.
        name: the distribution's name as asked for.
    """

    def __init__(self, env: TargetEnvironment, name: str) -> None:
        super().__init__(
            f"{name} is not installed in {env.description}; install it (pip install --no-deps {name}, or with its CUDA dependencies: pip install {name}) "
            "or pass --python / --site-packages"
        )
        self.env = env
        self.name = name


def find_distribution(env: TargetEnvironment, name: str) -> InstalledDistribution:
    """Find distribution ``name`` (any spelling) in ``env``, as the import system would: first on the path.

    Raises:
        NotInstalled: the distribution is not installed there (an :class:`EnvironmentProblem`).
        EnvironmentProblem: it is an editable or zipped install, or its version is not a PEP 440 version.
    """
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    dist = locate_distribution(env, name)
    if dist is None:
        raise NotInstalled(env, name)
    _refuse_stray_metadata(dist, name)
    try:
        version = Version(dist.version)
    except InvalidVersion:
        raise EnvironmentProblem(f"{dist_folder(dist)}: installed version {dist.version!r} of {name} is not a PEP 440 version") from None
    _refuse_unsupported_install(dist, name)
    site_packages = Path(str(dist.locate_file(""))).resolve()
    shadowed = shadowing(env, dist, site_packages)
    if shadowed:
        raise EnvironmentProblem(shadowed)
    return InstalledDistribution(canonicalize_name(name), version, site_packages, dist, env.bytecode_prefixes, env.cache_tags)


def shadowing(env: TargetEnvironment, dist: metadata.Distribution, site_packages: Path) -> str | None:
    """The one-line refusal when ``env``'s interpreter would import a package of ``dist`` (``flashinfer``) from
    somewhere other than ``site_packages``, where fp4patch reads and patches it (a copy on ``PYTHONPATH``, in the
    current directory, added by a ``.pth`` file or found by an import hook, without metadata of its own), else None.
    fp4patch's answer would be about files that interpreter never runs. It names the file imported, why it comes
    first, and what to do."""
    known = set(_top_level(dist))
    for package, file, entry in env.imports:
        if package not in known:
            continue
        root = Path(os.path.dirname(os.path.dirname(file)) if os.path.basename(file).startswith("__init__.") else os.path.dirname(file))
        if root.resolve() == site_packages:
            continue
        why, todo = _why_first(env, root, entry)
        return (
            f"{file}: {env.python} imports {package} from here ({why}), not from {site_packages}, where fp4patch reads and "
            f"patches {dist.metadata['Name']} {dist.version}; {todo}, so that the installed {package} is imported"
        )
    return None


def _why_first(env: TargetEnvironment, root: Path, entry: str | None) -> tuple[str, str]:
    """Why ``root`` (a directory holding the package) comes before site-packages on ``env``'s import path, and what
    to do about it: ``(why, what to do)``."""
    def same(path: str) -> bool:
        return bool(path) and Path(os.path.abspath(path)).resolve() == root.resolve()

    if entry is None:
        return "an import hook on sys.meta_path finds it, not a sys.path entry", "remove that hook (a .pth file or sitecustomize installs it)"
    if any(same(p) for p in env.pythonpath.split(os.pathsep)):
        return f"{root} is on PYTHONPATH", f"remove {root} from PYTHONPATH"
    if entry == "" or same(os.getcwd()):
        return f"{root} is the current directory, first on sys.path for `python -c` and `python -m`", "run from another directory"
    for directory in env.paths:
        for pth in sorted(Path(directory).glob("*.pth")) if os.path.isdir(directory) else ():
            try:
                lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            for line in (line.strip() for line in lines):
                # a path line, or an executed one that names the folder (``import sys; sys.path.insert(0, "...")``)
                named = str(root) in line if line.startswith(("import ", "import\t")) else line and not line.startswith("#") and same(
                    os.path.join(directory, line))
                if named:
                    return f"{pth} adds {root} to sys.path", f"remove that line from {pth}"
    return f"{root} is on sys.path, put there by sitecustomize or the interpreter's settings", f"take {root} off the interpreter's sys.path"


def dist_folder(dist: metadata.Distribution) -> str:
    """The ``.dist-info``/``.egg-info`` folder ``dist`` was read from (for messages)."""
    return str(getattr(dist, "_path", None) or dist.locate_file(""))


def _refuse_stray_metadata(dist: metadata.Distribution, name: str) -> None:
    """Several metadata folders of ``name`` in the directory where the import system finds it first
    (a ``.dist-info`` left by an interrupted install or uninstall beside the real one), or one
    without a version: which one describes the installed files cannot be told.

    Raises:
        EnvironmentProblem: naming each folder and what it says.
    """
    from importlib import metadata

    base = dist.locate_file("")
    siblings = list(metadata.distributions(name=name, path=[str(base)]))
    if len(siblings) < 2 and dist.version is not None:
        return
    if len(siblings) < 2:
        raise EnvironmentProblem(
            f"{dist_folder(dist)}: metadata of {name} without a version (no METADATA file, or no Version in it: "
            f"left by an interrupted install or uninstall?); reinstall {name} (pip install --force-reinstall {name})"
        )
    def says(d: metadata.Distribution) -> str:
        if d.version:
            return f"version {d.version}"
        return "no version (no METADATA file)" if d.read_text("METADATA") is None else "no version (METADATA without a Version field)"

    described = "; ".join(f"{Path(dist_folder(d)).name}: {says(d)}" for d in siblings)
    raise EnvironmentProblem(
        f"{base}: {len(siblings)} metadata folders of {name} ({described}); "
        f"remove the stray one (left by an interrupted install or uninstall), or reinstall {name}"
    )


def _refuse_unsupported_install(dist: metadata.Distribution, name: str) -> None:
    """Editable installs and distributions inside an archive cannot be patched in place.

    Raises:
        EnvironmentProblem: ``dist`` lives in a zip/egg file on the path, or is an editable or
            ``setup.py develop`` install (:func:`editable_install`), whatever metadata the installer
            wrote: one line naming the kind and where its files are.
    """
    base = dist.locate_file("")
    if not isinstance(base, Path) or not Path(str(base)).is_dir():
        raise EnvironmentProblem(
            f"{name} is installed inside an archive ({base}); fp4patch patches files on disk only — "
            f"install it unzipped (pip install {name}) and run fp4patch again"
        )
    found = editable_install(dist)
    if found is not None:
        kind, where = found
        raise EnvironmentProblem(
            f"{name} is {kind} install: its files are in {where}, not in site-packages; fp4patch does not patch "
            f"editable installs — patch or fix the checkout itself, or install a wheel (pip install --no-deps {name}=={dist.version})"
        )


def editable_install(dist: metadata.Distribution) -> tuple[str, str] | None:
    """``(kind, where its files are)`` when ``dist`` is installed in development mode, else None.

    Recognised, whatever metadata the installer wrote (an older installer writes no
    ``direct_url.json``):

    * ``direct_url.json`` with ``dir_info.editable`` (PEP 610): "an editable", at its ``url``;
    * a PEP 660 editable by setuptools: a ``__editable__.*.pth`` / ``__editable___*_finder.py`` in
      RECORD; the finder's ``MAPPING`` names the package directories;
    * ``setup.py develop`` / ``pip install -e`` with an old setuptools: ``*.egg-info`` metadata in a
      source tree (beside ``setup.py`` or ``pyproject.toml``, or in its ``src/`` folder), or an ``<name>.egg-link`` in the
      site-packages;
    * metadata in site-packages whose top-level package is not there but in a directory that a
      ``.pth`` file of that site-packages adds to the path.
    """
    import re

    try:
        text = dist.read_text("direct_url.json")
        direct = json.loads(text) if text else {}
    except (OSError, ValueError):
        direct = {}
    if isinstance(direct, dict) and isinstance(direct.get("dir_info"), dict) and direct["dir_info"].get("editable"):
        return "an editable", str(direct.get("url", "a source checkout"))
    base = Path(str(dist.locate_file("")))
    folder = Path(dist_folder(dist))
    # dist.files builds a path object per RECORD entry (15,000 for 0.7.4: a third of a second per command); only
    # entries named __editable__* count here, so the files are listed only when the metadata mentions one
    listing = "".join(dist.read_text(name) or "" for name in ("RECORD", "installed-files.txt", "SOURCES.txt"))
    files = [str(f) for f in (dist.files or [])] if "__editable__" in listing else []
    for entry in files:
        if re.match(r"__editable___.*_finder\.py$", Path(entry).name):
            finder = base / entry
            try:
                mapping = re.search(r"MAPPING[^=]*=\s*(\{[^}]*\})", finder.read_text(encoding="utf-8"))
                where = ", ".join(sorted(set(re.findall(r":\s*'([^']+)'", mapping.group(1))))) if mapping else ""
            except OSError:
                where = ""
            return "an editable (setuptools, PEP 660)", where or f"the source tree named in {finder}"
        if re.match(r"__editable__\..*\.pth$", Path(entry).name):
            pth = base / entry
            try:
                lines = [line.strip() for line in pth.read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith(("#", "import "))]
            except OSError:
                lines = []
            return "an editable (setuptools, PEP 660)", ", ".join(lines) or f"the source tree named in {pth}"
    # the checkout's own folder, or its src/ folder (src layout: setup.py one level up; break-it run, 2026-12-02)
    trees = [folder.parent, *([folder.parent.parent] if folder.parent.name == "src" else [])]
    if folder.name.endswith(".egg-info") and any((t / f).is_file() for t in trees for f in ("setup.py", "pyproject.toml", "setup.cfg")):
        return "a development (setup.py develop)", str(folder.parent)
    packages = _top_level(dist)
    for package in packages:
        if (base / package).exists() or (base / f"{package}.py").exists():
            continue
        for pth in sorted(base.glob("*.pth")):
            try:
                lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                line = line.strip()
                if not line or line.startswith(("#", "import")):
                    continue
                target = (base / line).resolve() if not Path(line).is_absolute() else Path(line)
                if (target / package).is_dir():
                    return "a development (.pth)", f"{target / package} (added to the path by {pth})"
        for link in sorted(base.glob("*.egg-link")):
            try:
                target = link.read_text(encoding="utf-8").splitlines()[0].strip()
            except (OSError, IndexError):
                continue
            if (Path(target) / package).is_dir():
                return "a development (setup.py develop, egg-link)", target
    return None


def _top_level(dist: metadata.Distribution) -> tuple[str, ...]:
    """The import package fp4patch patches of ``dist`` (``flashinfer`` for flashinfer-python), else
    those ``top_level.txt`` names."""
    from packaging.utils import canonicalize_name

    known = _DEFAULT_PACKAGES.get(canonicalize_name(dist.metadata["Name"] or ""))
    if known:
        return known
    try:
        text = dist.read_text("top_level.txt")
    except OSError:
        text = None
    return tuple(text.split()) if text else ()
