"""The state of one spec on the installed files, as plain data the CLI renders; reads only.

The engine (:meth:`fp4patch.engine.Engine.report`) asks in this order; the first that answers decides:

1. :func:`recorded_applied`: ``applied`` without parsing, when fp4patch's manifest records the spec in every
   target file (:func:`recording`) and each file still has the patched sha256 recorded when fp4patch wrote it
   (the fast path);
2. :func:`obsolete_report`: ``obsolete``, when an ``[[obsolete-when]]`` condition of the spec holds on the
   installed files;
3. :func:`check_resolved`: ``not-targeted`` / ``drifted``, when the spec takes no target on this release or its
   code changed from the evidence (the resolution given: :mod:`fp4patch.catalog.evidence`); else each target's
   operations checked structurally on the parsed file, combined (:func:`combine`: any drift wins, then not
   applied), ``needs-check`` where the target still waits for its CPU check.

Each takes values (the spec, the installed files, the manifest, the spec's resolution) and returns a report or
None; the engine resolves a spec only where a step needs its targets. The state names are :mod:`fp4patch.states`'; ``--json`` prints :meth:`SpecReport.to_json`
(``docs/json-schema.json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import FileSystemError
from ..states import APPLICABLE, APPLIED, DRIFTED, NEEDS_CHECK, NOT_NEEDED, NOT_TARGETED, OBSOLETE, UNSUPPORTED
from .files import read_bytes, sha256

if TYPE_CHECKING:
    from ..catalog.evidence import Basis, Resolution
    from ..catalog.spec import ObsoleteWhen, Spec, Target
    from .manifest import Manifest
    from .sources import Sources


@dataclass
class TargetReport:
    """State of one spec target on the installed files.

    Attributes:
        file: site-packages-relative path ("" for status targets).
        state: ``applied``, ``applicable``, ``drifted``, ``not-needed`` or ``unsupported``.
        operations: ``(description, state, detail)`` for each operation.
        reason: for status targets, and for a missing file.
    """

    file: str
    state: str
    operations: list[tuple[str, str, str]] = field(default_factory=list)
    reason: str = ""


@dataclass
class SpecReport:
    """State of one spec on the installed distribution (the worst of its targets).

    ``basis`` says why its targets apply (:class:`fp4patch.catalog.evidence.Basis`): for a release the
    catalog does not list, the evidence they were taken on ("as verified on 0.7.4, same code").
    """

    spec: Spec
    state: str
    targets: list[TargetReport] = field(default_factory=list)
    basis: Basis | None = None

    def to_json(self) -> dict:
        """The report as ``--json`` prints it (one item of ``specs``; see docs/json-schema.json)."""
        return {
            "id": self.spec.id,
            "state": self.state,
            "default": self.spec.default,
            "summary": self.spec.summary,
            "detail": self.detail,
            "basis": self.basis.to_json() if self.basis is not None else None,
            "targets": [
                {
                    "file": t.file,
                    "state": t.state,
                    "reason": t.reason,
                    "operations": [{"operation": d, "state": s, "detail": x} for d, s, x in t.operations],
                }
                for t in self.targets
            ],
        }

    @property
    def detail(self) -> str:
        """The first reason or drift detail, for one-line output."""
        if self.state == NEEDS_CHECK and self.basis is not None:
            return self.basis.describe()
        for target in self.targets:
            if target.reason:
                return target.reason
            for description, state, detail in target.operations:
                if state == DRIFTED:
                    return f"{description}: {detail}"
        return ""


def recording(spec: Spec, sources: Sources) -> Manifest | None:
    """fp4patch's manifest of ``sources.dist`` (``sources``: :class:`~fp4patch.engine.sources.Sources`) when it was
    written for the installed version and records ``spec`` (:class:`~fp4patch.catalog.spec.Spec`; then
    :func:`recorded_applied` may answer); None otherwise, also when it cannot be read (a
    :class:`~fp4patch.errors.FileSystemError` is not raised: the files are then checked structurally). Reads the
    manifest only."""
    dist, store = sources.dist, sources.store
    try:
        manifest = store.load()
    except FileSystemError:
        return None
    if manifest is None or manifest.version != str(dist.version) or spec.id not in manifest.specs:
        return None
    return manifest


def recorded_applied(spec: Spec, sources: Sources, manifest: Manifest, resolution: Resolution) -> SpecReport | None:
    """Fast path: ``applied`` without parsing, when ``manifest`` records ``spec`` in every target file of
    ``resolution`` and each file's sha256 still equals the patched hash recorded when fp4patch wrote it. Anything
    else (a changed file, one the manifest does not name) returns None and the files are checked structurally.

    Args:
        spec (Spec): the spec.
        sources (Sources): the installed files.
        manifest (Manifest): this version's record of ``spec`` (:func:`recording`).
        resolution (Resolution): the targets ``spec`` takes here (:meth:`fp4patch.engine.Engine.resolve`).

    Raises:
        FileSystemError: a target file exists but cannot be read.
    """
    dist = sources.dist
    targets = resolution.targets
    reports = []
    for target in targets:
        if target.status:
            reports.append(TargetReport("", target.status, reason=target.reason))
            continue
        record = manifest.files.get(target.file)
        path = dist.locate(target.file)
        if record is None or spec.id not in record.specs or not path.is_file():
            return None
        data = read_bytes(path)
        if sha256(data) != record.patched_sha256:
            return None
        reports.append(TargetReport(target.file, APPLIED))
    if not any(r.state == APPLIED for r in reports):
        return None
    return SpecReport(spec, combine([r.state for r in reports]), reports, resolution.basis)


def obsolete_report(spec: Spec, sources: Sources) -> SpecReport | None:
    """``obsolete`` (step 2 of the module docstring) when an ``[[obsolete-when]]`` condition of ``spec``
    (:class:`~fp4patch.catalog.spec.Spec`) holds on the installed files (``sources``: :class:`~fp4patch.engine.sources.Sources`);
    None otherwise. Reads the files the conditions name.

    Raises:
        DriftError: such a file is not valid Python.
        FileSystemError: such a file cannot be read.
    """
    obsolete = _obsolete(spec, sources)
    if obsolete is None:
        return None
    return SpecReport(spec, OBSOLETE, [TargetReport(obsolete.file, OBSOLETE, reason=obsolete.reason)])


def _obsolete(spec: Spec, sources: Sources) -> ObsoleteWhen | None:
    """The first ``obsolete-when`` condition of ``spec`` that the installed files meet, or None."""
    from ..codemods.base import called_names, find_functions, import_aliases

    dist = sources.dist
    for condition in spec.obsolete_when:
        if not condition.versions.contains(dist.version, prereleases=True):
            continue
        loaded = sources.load_for_check(dist.locate(condition.file))
        if loaded is None:
            continue
        module = loaded[1]
        aliases = import_aliases(module)
        for function in find_functions(module, condition.function):
            if set(condition.calls) <= called_names(function, aliases):
                return condition
    return None


def check_resolved(spec: Spec, sources: Sources, resolution: Resolution) -> SpecReport:
    """Check ``spec`` against the installed files of ``sources.dist`` on the targets of ``resolution`` (step 3 of
    the module docstring: after neither :func:`recorded_applied` nor :func:`obsolete_report` answered); reads only.

    Args:
        spec (Spec): the spec to check.
        sources (Sources): the installed files, as this command reads them.
        resolution (Resolution): the targets ``spec`` takes on the installed release and why
            (:meth:`fp4patch.engine.Engine.resolve`).

    Raises:
        DriftError: a target file is not valid Python.
        FileSystemError: a target file cannot be read.
    """
    from ..catalog.evidence import CHANGED

    targets, basis = resolution.targets, resolution.basis
    if not targets:
        return SpecReport(spec, NOT_TARGETED, basis=basis)
    if basis is not None and basis.kind == CHANGED:
        reason = f"{sources.dist.version}: {basis.describe()}"
        return SpecReport(spec, DRIFTED, [TargetReport(t.file, DRIFTED, reason=reason) for t in targets], basis)
    reports = []
    for target in targets:
        if target.status:
            reason = target.reason if basis is None or not basis.describe() else f"{target.reason} ({basis.describe()})"
            reports.append(TargetReport("", target.status, reason=reason))
            continue
        reports.append(check_target(target, sources))
    state = combine([r.state for r in reports])
    if state == APPLICABLE and basis is not None and basis.kind == NEEDS_CHECK:
        state = NEEDS_CHECK
    return SpecReport(spec, state, reports, basis)


def check_target(target: Target, sources: Sources) -> TargetReport:
    """Each operation of ``target`` checked on its file as it is (reading only), combined."""
    path = sources.dist.locate(target.file)
    loaded = sources.load_for_check(path)
    if loaded is None:
        return TargetReport(target.file, DRIFTED, reason=f"file {target.file} not found")
    _, module, appended = loaded
    operations = []
    for op in target.operations:  # each checked on the file as it is: reading only
        if appended and _appended(op, appended):  # apply added it as text, after the tree it seeded (Sources.seed)
            operations.append((op.describe(), APPLIED, ""))
            continue
        check = op.cached_check(module)
        operations.append((op.describe(), check.state.value, check.detail))
    return TargetReport(target.file, combine([s for _, s, _ in operations]), operations)


def _appended(op, appended: tuple[str, ...]) -> bool:
    """Whether ``op`` is a block that ``apply`` added at the end as one of the texts ``appended``."""
    from .plan import appended_text

    text = appended_text(op)
    return text is not None and text in appended


def combine(states: list[str]) -> str:
    """The state of several targets/operations together: any drift wins, then not-applied."""
    for state in (DRIFTED, UNSUPPORTED, APPLICABLE):
        if state in states:
            return state
    if states and all(s == NOT_NEEDED for s in states):
        return NOT_NEEDED
    return APPLIED
