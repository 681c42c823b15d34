"""The recorded verdict: what ``verify`` answers right after ``apply``, and every input it depends on.

``apply`` writes ``<site-packages>/.fp4patch/<distribution>/verdict.json`` when it succeeds: the
spec reports that ``verify`` prints for the same selection, keyed by everything those reports
are a function of:

- the selection as requested (``--spec`` ids, ``--specs-dir``),
- fp4patch's version and the sha256 of its own sources and of every file in the specs directory,
- the versions of the libraries that parse and match (libcst, packaging),
- the distribution (name, version, site-packages directory) as :mod:`importlib.metadata` finds it,
- the target interpreter's pycache prefix and cache tag (with this interpreter's), and every pyc
  path of a target file they give (:func:`fp4patch.engine.bytecode.stale_note`),
- the sha256 of fp4patch's manifest and of every file the reports read (or that it was missing).

``verify`` (:func:`lookup`) recomputes the key and prints the recorded reports only when all of it
is equal and no apply/revert journal is present; anything else (a changed byte, another
version, a different selection, an upgraded fp4patch, a record that cannot be read) is a miss
and ``verify`` checks the files itself. A stale or hand-made record therefore costs time, never
a wrong answer from fp4patch's own logic. Only records whose every spec is accepted are used
(satisfied, or a default spec declared unsupported on this release: :func:`fp4patch.states.accepted`).

This module imports no typer, libcst or spec loader: the command-line fast path
(:mod:`fp4patch.cli.entry`) runs it before them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..errors import Fp4PatchError
from ..locations import PACKAGE_DIR, STATE_DIR, builtin_specs_dir
from ..states import accepted
from ..target.environment import TargetEnvironment, locate_distribution, shadowing
from .manifest import ManifestStore

if TYPE_CHECKING:
    from ..target.environment import InstalledDistribution

SCHEMA = 1
FILE_NAME = "verdict.json"
#: Libraries whose behaviour the reports depend on; their installed versions are part of the key.
DEPENDENCIES = ("libcst", "packaging")


@dataclass(frozen=True)
class Request:
    """A selection as the user asked for it.

    Attributes:
        spec_ids: the ``--spec`` ids in the order given, or None for the default selection.
        specs_dir: ``--specs-dir`` resolved to an absolute path, or None for the built-in specs.
        strict: ``--strict`` (every selected spec must apply; none may be left out as unsupported).
        skip: the ``--skip`` ids in the order given.
    """

    spec_ids: tuple[str, ...] | None
    specs_dir: str | None
    strict: bool = False
    skip: tuple[str, ...] = ()

    @classmethod
    def of(cls, spec_ids: Iterable[str] | None, specs_dir: str | Path | None, strict: bool = False, skip: Iterable[str] | None = None) -> Request:
        """From the command-line values (``--spec`` list or None, ``--specs-dir`` or None, ``--strict``, ``--skip`` list)."""
        return cls(tuple(spec_ids) if spec_ids else None, str(Path(specs_dir).resolve()) if specs_dir else None, strict, tuple(skip or ()))

    @property
    def required(self) -> bool:
        """True when every selected spec must apply (named with ``--spec``, or ``--strict``): none
        may then be left out as declared ``unsupported`` (:func:`fp4patch.states.accepted`)."""
        return self.strict or self.spec_ids is not None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"spec_ids": list(self.spec_ids) if self.spec_ids is not None else None, "specs_dir": self.specs_dir}
        if self.strict or self.skip:
            data.update(strict=self.strict, skip=list(self.skip))
        return data


def _file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def inputs_digest(request: Request) -> str:
    """Hex sha256 over fp4patch's sources (``*.py`` under the package) and every file of the specs
    directory (``--specs-dir`` or the built-in one), each as relative path and contents.

    Raises:
        OSError: a file cannot be read.
    """
    digest = hashlib.sha256(f"fp4patch {__version__}\n".encode())
    specs_dir = Path(request.specs_dir) if request.specs_dir else builtin_specs_dir()
    for label, root, pattern in (("source", PACKAGE_DIR, "*.py"), ("spec", specs_dir, "*")):
        if not root.is_dir():
            digest.update(f"{label} missing {root}\n".encode())
            continue
        for path in sorted(p for p in root.rglob(pattern) if p.is_file() and "__pycache__" not in p.parts):
            digest.update(f"{label} {path.relative_to(root).as_posix()} {hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


def dependency_versions() -> dict[str, str | None]:
    """Installed versions of :data:`DEPENDENCIES` in this interpreter (None when missing)."""
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for name in DEPENDENCIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def path_for(site_packages: Path, distribution: str) -> Path:
    """Where the verdict of ``distribution`` in ``site_packages`` is recorded (beside its manifest)."""
    return ManifestStore(site_packages, distribution).root / FILE_NAME


def record(
    dist: InstalledDistribution,
    store: ManifestStore,
    inputs: dict[str, str | None],
    interrupted: Callable[[], str | None],
    request: Request,
    reports: list[dict[str, Any]],
    header: dict[str, Any],
    status: dict[str, Any] | None = None,
) -> bool:
    """Record ``reports`` (``--json`` dicts, computed for ``request`` right now) as the verdict of
    ``dist`` (fp4patch's state in ``store``), keyed by ``inputs`` (every file those reports read:
    site-packages-relative path or absolute path → sha256 or None; the engine's
    :attr:`~fp4patch.engine.Engine.inputs`).

    ``interrupted`` is the engine's :meth:`~fp4patch.engine.Engine.interrupted`, called only when
    every report is accepted: a note there (an interrupted operation, stale bytecode) records
    nothing; its pyc reads join ``inputs`` before they are written. Written atomically; a verdict
    with an unsatisfied spec, an interrupted operation, or a site-packages that refuses the write
    records nothing (it is only a cache). Returns True when a verdict is on disk afterwards.

    ``status``: what a plain ``status`` prints, computed now with the same reads (``reports`` of every known spec,
    the ``recorded`` spec ids of the manifest, whether the catalog ``listed`` the release): a plain ``apply`` records
    it, so that ``status`` answers from the verdict too (:mod:`fp4patch.cli.entry`).
    """
    if not reports or not all(accepted(r["state"], request.required) for r in reports) or interrupted():
        remove(dist.site_packages, dist.name)
        return False
    try:
        return _write(dist, store, inputs, request, reports, header, status)
    except (OSError, Fp4PatchError):
        return False


def _write(
    dist: InstalledDistribution, store: ManifestStore, inputs: dict[str, str | None], request: Request, reports: list[dict[str, Any]],
    header: dict[str, Any], status: dict[str, Any] | None = None,
) -> bool:
    from .files import atomic_write, sha256

    manifest = store.path.read_bytes() if store.path.is_file() else None
    data = {
        "schema": SCHEMA,
        "fp4patch": __version__,
        "inputs_digest": inputs_digest(request),
        "dependencies": dependency_versions(),
        "request": request.to_json(),
        "distribution": dist.name,
        "version": str(dist.version),
        "installed_version": dist.dist.version,  # as METADATA spells it (compared without packaging)
        "site_packages": str(dist.site_packages),
        # where the target loads bytecode from (its pycache prefix) and under which tags: the pyc
        # paths in "files" were derived from these
        "bytecode": {"prefixes": list(dist.bytecode_prefixes), "tags": list(dist.cache_tags)},
        "manifest_sha256": sha256(manifest) if manifest is not None else None,
        "files": dict(sorted(inputs.items())),
        "header": header,
        "specs": reports,
    }
    if status is not None:
        data["status"] = status
    path = path_for(dist.site_packages, dist.name)
    encoded = (json.dumps(data, indent=1) + "\n").encode()  # key order kept: --json prints it back
    if path.is_file() and path.read_bytes() == encoded:
        return True  # the same verdict is already recorded: write nothing
    if not path.parent.is_dir():
        return False  # nothing applied here (no state directory): do not create one for a cache
    atomic_write(path, encoded, mode=0o644)
    return True


def remove(site_packages: Path, distribution: str) -> None:
    """Delete the recorded verdict of ``distribution`` (nothing when there is none or it cannot be deleted)."""
    try:
        path_for(site_packages, distribution).unlink(missing_ok=True)
    except OSError:
        pass


@dataclass(frozen=True)
class Verdict:
    """A recorded verdict that matches the environment now.

    Attributes:
        header: ``schema``, ``distribution``, ``version``, ``site_packages`` as ``--json`` prints them.
        reports: the spec reports (``--json`` dicts), every one in a satisfied state.
        site_packages: the distribution's site-packages directory.
    """

    header: dict[str, Any]
    reports: list[dict[str, Any]]
    site_packages: Path
    #: what a plain ``status`` prints (``reports``, ``recorded``, ``listed``), when a plain ``apply`` recorded it
    status: dict[str, Any] | None = None


def lookup(env: TargetEnvironment, request: Request) -> Verdict | None:
    """The verdict recorded in ``env`` for ``request`` if every input of it is unchanged, else None.

    Candidates are ``.fp4patch/*/verdict.json`` in the directories of ``env.paths``; the one used
    must name the distribution that :func:`fp4patch.target.environment.locate_distribution` finds first
    on the path (as ``find_distribution`` does for the full check), at the recorded version and
    site-packages, and the target must import the distribution's package from there (not a copy that shadows it:
    :func:`fp4patch.target.environment.shadowing`). Never raises for a bad or stale
    record (that is a miss); never writes. A target whose torch is below the supported range
    (:mod:`fp4patch.target.torch_support`; installed since the verdict was recorded) is a miss too, so that the
    command refuses it. ``FP4PATCH_NO_VERDICT=1`` in the environment makes
    every lookup a miss (``verify`` then always checks the files itself).
    """
    if os.environ.get("FP4PATCH_NO_VERDICT"):
        return None
    from ..target.torch_support import installed_torch, supported

    torch = installed_torch(env)
    if torch is not None and not supported(torch):
        return None  # a torch below the floor since (a downgrade): the full command refuses it in one line
    digest = None
    for entry in env.paths:
        state = Path(entry) / STATE_DIR
        if not state.is_dir():
            continue
        for path in sorted(state.glob(f"*/{FILE_NAME}")):
            try:
                data = json.loads(path.read_bytes())
                if data.get("schema") != SCHEMA or data.get("request") != request.to_json() or data.get("fp4patch") != __version__:
                    continue
                if digest is None:
                    digest = inputs_digest(request)
                if data["inputs_digest"] != digest or data["dependencies"] != dependency_versions():
                    continue
                if not data["specs"] or not all(accepted(r["state"], request.required) for r in data["specs"]):
                    continue
                dist = locate_distribution(env, data["distribution"])
                if dist is None or dist.version != data["installed_version"]:
                    continue
                site_packages = Path(str(dist.locate_file(""))).resolve()
                if str(site_packages) != data["site_packages"] or shadowing(env, dist, site_packages):
                    continue  # another site-packages, or the target imports the package from elsewhere: the full command says so
                if data["bytecode"] != {"prefixes": list(env.bytecode_prefixes), "tags": list(env.cache_tags)}:
                    continue  # another pycache prefix or interpreter: other pyc paths to check
                store = ManifestStore(site_packages, data["distribution"])
                if path.resolve() != (store.root / FILE_NAME).resolve() or store.journal_path.exists():
                    continue
                if _file_sha256(store.path) != data["manifest_sha256"]:
                    continue
                if any(_file_sha256(_locate(site_packages, name)) != sha for name, sha in data["files"].items()):
                    continue
                return Verdict(data["header"], data["specs"], site_packages, data.get("status"))
            except (OSError, ValueError, KeyError, TypeError, AttributeError, Fp4PatchError):
                continue
    return None


def _locate(site_packages: Path, name: str) -> Path:
    path = Path(name)
    return path if path.is_absolute() else site_packages / name
