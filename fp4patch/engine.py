"""Plan, apply, verify and revert specs on one installed distribution.

The engine reads each target file once, runs the operations of every selected spec over the
libcst tree in memory, checks that the result parses and compiles, and only then writes.
Reports are plain data (:class:`SpecReport`); the CLI renders them.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from .environment import InstalledDistribution
from .errors import DriftError, FileSystemError, UsageError
from .files import atomic_write, check_writable, read_bytes, remove_bytecode, sha256
from .manifest import FileRecord, Manifest, ManifestStore
from .operations import OpState
from .operations.base import called_names, find_functions, import_aliases
from .spec import Spec, Target

APPLIED, APPLICABLE, DRIFTED = "applied", "applicable", "drifted"
NOT_TARGETED, NOT_NEEDED, UNSUPPORTED = "not-targeted", "not-needed", "unsupported"
OBSOLETE = "obsolete"
#: States in which a spec needs nothing more on this release.
SATISFIED = frozenset({APPLIED, NOT_NEEDED, OBSOLETE})


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
    """State of one spec on the installed distribution (the worst of its targets)."""

    spec: Spec
    state: str
    targets: list[TargetReport] = field(default_factory=list)

    @property
    def detail(self) -> str:
        """The first reason or drift detail, for one-line output."""
        for target in self.targets:
            if target.reason:
                return target.reason
            for description, state, detail in target.operations:
                if state == DRIFTED:
                    return f"{description}: {detail}"
        return ""


@dataclass
class FilePlan:
    """One file to patch: what is on disk now and what it becomes."""

    relative: str
    path: Path
    current: bytes
    patched: bytes
    specs: list[str]
    encoding: str = "utf-8"

    @property
    def changes(self) -> bool:
        """True when ``patched`` differs from ``current``."""
        return self.current != self.patched

    def unified_diff(self) -> str:
        """Unified diff ``a/<relative>`` → ``b/<relative>`` (empty when nothing changes)."""
        old = self.current.decode(self.encoding, errors="surrogateescape").splitlines(keepends=True)
        new = self.patched.decode(self.encoding, errors="surrogateescape").splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, new, f"a/{self.relative}", f"b/{self.relative}"))


def select_specs(specs: list[Spec], ids: list[str] | None) -> list[Spec]:
    """The specs named by ``ids`` (default: those marked ``default``), plus what they require.

    Raises:
        UsageError: an unknown id, or two selected specs that conflict.
    """
    by_id = {s.id: s for s in specs}
    if ids:
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            raise UsageError(f"unknown spec {unknown[0]!r}; known: {', '.join(by_id)} (see `fp4patch status`)")
        chosen = list(dict.fromkeys(ids))
    else:
        chosen = [s.id for s in specs if s.default]
    queue = list(chosen)
    while queue:
        for needed in by_id[queue.pop()].requires:
            if needed not in chosen:
                chosen.append(needed)
                queue.append(needed)
    check_conflicts([by_id[i] for i in chosen], set(chosen))
    return [by_id[i] for i in sorted(chosen)]


def check_conflicts(selected: list[Spec], present: set[str], where: str = "selected together") -> None:
    """Raise :class:`UsageError` when a spec in ``selected`` conflicts with an id in ``present``."""
    for spec in selected:
        for other in spec.conflicts:
            if other in present:
                raise UsageError(f"spec {spec.id!r} conflicts with {other!r} ({where}); choose one with --spec")


class Engine:
    """Apply/verify/revert ``specs`` (all for one distribution) on ``dist``."""

    def __init__(self, dist: InstalledDistribution, specs: list[Spec]) -> None:
        self.dist = dist
        self.specs = specs
        self.store = ManifestStore(dist.site_packages, dist.name)

    # ------------------------------------------------------------------ reading
    def _load_module(self, path: Path) -> tuple[bytes, cst.Module] | None:
        if not path.is_file():
            return None
        data = read_bytes(path)
        try:
            return data, cst.parse_module(data)
        except cst.ParserSyntaxError as exc:
            raise DriftError(f"{path}:{exc.raw_line}: not valid Python ({exc.message}); reinstall the distribution") from None

    def report(self, spec: Spec) -> SpecReport:
        """Check ``spec`` against the installed files (reads only)."""
        obsolete = self._obsolete(spec)
        if obsolete:
            return SpecReport(spec, OBSOLETE, [TargetReport(obsolete.file, OBSOLETE, reason=obsolete.reason)])
        targets = spec.targets_for(self.dist.version)
        if not targets:
            return SpecReport(spec, NOT_TARGETED)
        reports = []
        for target in targets:
            if target.status:
                reports.append(TargetReport("", target.status, reason=target.reason))
                continue
            reports.append(self._check_target(target))
        return SpecReport(spec, _combine([r.state for r in reports]), reports)

    def _obsolete(self, spec: Spec):
        """The first ``obsolete-when`` condition of ``spec`` that the installed files meet, or None."""
        for condition in spec.obsolete_when:
            if not condition.versions.contains(self.dist.version, prereleases=True):
                continue
            loaded = self._load_module(self.dist.locate(condition.file))
            if loaded is None:
                continue
            module = loaded[1]
            aliases = import_aliases(module)
            for function in find_functions(module, condition.function):
                if set(condition.calls) <= called_names(function, aliases):
                    return condition
        return None

    def _check_target(self, target: Target) -> TargetReport:
        loaded = self._load_module(self.dist.locate(target.file))
        if loaded is None:
            return TargetReport(target.file, DRIFTED, reason=f"file {target.file} not found")
        _, module = loaded
        operations = []
        for op in target.operations:
            check = op.check(module)
            operations.append((op.describe(), check.state.value, check.detail))
            if check.state is OpState.APPLIED:
                module = op.apply(module)  # later operations see the earlier ones' results
            elif check.state is OpState.APPLICABLE:
                module = op.apply(module)
        return TargetReport(target.file, _combine([s for _, s, _ in operations]), operations)

    # ------------------------------------------------------------------ planning
    def plan(self, specs: list[Spec]) -> dict[str, FilePlan]:
        """Transform every file targeted by ``specs`` in memory.

        Raises:
            DriftError: a spec is drifted or not targeted at this version (nothing is written).
        """
        problems = []
        by_file: dict[str, list[tuple[Spec, Target]]] = {}
        for spec in specs:
            report = self.report(spec)
            if report.state == OBSOLETE:
                continue
            if report.state in (DRIFTED, UNSUPPORTED):
                problems.append(f"{spec.id}: {report.state}: {report.detail}")
            elif report.state == NOT_TARGETED:
                problems.append(f"{spec.id}: no target for {self.dist.name} {self.dist.version}")
            for target in spec.targets_for(self.dist.version):
                if not target.status:
                    by_file.setdefault(target.file, []).append((spec, target))
        if problems:
            raise DriftError(f"{self.dist.name} {self.dist.version}: " + "; ".join(problems) + " — nothing written (see `fp4patch verify`)")
        return {rel: self._plan_file(rel, pairs) for rel, pairs in by_file.items()}

    def _plan_file(self, relative: str, pairs: list[tuple[Spec, Target]], base: bytes | None = None) -> FilePlan:
        path = self.dist.locate(relative)
        if base is None:
            loaded = self._load_module(path)
            assert loaded is not None
            current, module = loaded
        else:
            current, module = base, cst.parse_module(base)
        for _, target in pairs:
            for op in target.operations:
                module = op.apply(module)
        patched = module.bytes
        _check_result(path, patched)
        return FilePlan(relative, path, current, patched, sorted({s.id for s, _ in pairs}), module.encoding)

    # ------------------------------------------------------------------ commands
    def diff(self, specs: list[Spec]) -> list[FilePlan]:
        """The files ``apply`` would change, with their new contents (writes nothing)."""
        return [p for p in self.plan(specs).values() if p.changes]

    def apply(self, specs: list[Spec]) -> list[FilePlan]:
        """Patch the installed files; returns the plans of the files written.

        Raises:
            DriftError: a selected spec is drifted or not targeted.
            UsageError: a selected spec conflicts with one already applied.
            FileSystemError: a file changed since a previous apply, or cannot be written; no file
                is changed.
        """
        manifest = self._current_manifest()
        if manifest:
            check_conflicts(specs, set(manifest.specs), "already applied; revert it first")
        plans = self.plan(specs)
        writes = [p for p in plans.values() if p.changes]
        manifest = manifest or Manifest(self.dist.name, str(self.dist.version))
        for plan in writes:
            record = manifest.files.get(plan.relative)
            if record and sha256(plan.current) != record.patched_sha256:
                raise FileSystemError(
                    f"{plan.path}: changed since fp4patch patched it; reinstall {self.dist.name} or run `fp4patch revert --force`"
                )
        applied_ids = sorted(set(manifest.specs) | {s.id for s in specs})
        new_manifest = Manifest(self.dist.name, str(self.dist.version), applied_ids, dict(manifest.files))
        for plan in plans.values():
            old = manifest.files.get(plan.relative)
            original = old.original_sha256 if old else sha256(plan.current)
            if old is None and not plan.changes:
                continue  # already patched by hand or upstream: nothing to restore
            mode = plan.path.stat().st_mode & 0o7777
            specs_in = sorted(set(old.specs if old else []) | set(plan.specs))
            new_manifest.files[plan.relative] = FileRecord(original, sha256(plan.patched), specs_in, mode)
        if not writes and self.store.path.exists() and new_manifest == manifest:
            return []  # nothing to do, and nothing to record: no write at all
        if not writes and not new_manifest.files:
            return []  # every selected spec is obsolete, not needed, or already in the files
        for plan in writes:
            check_writable(plan.path)
        self._check_state_writable()
        fresh = [p.relative for p in writes if p.relative not in manifest.files]
        try:
            for relative in fresh:
                self.store.write_backup(relative, plans[relative].current)
            self._write_all([(p.path, p.current, p.patched) for p in writes], finish=lambda: self.store.save(new_manifest))
        except FileSystemError:
            if not self.store.path.exists():
                self.store.remove()  # leave no state directory behind a failed first apply
            else:
                for relative in fresh:
                    self.store.backup_path(relative).unlink(missing_ok=True)
            raise
        return writes

    def revert(self, ids: list[str] | None, force: bool = False) -> list[str]:
        """Restore originals byte for byte; returns the relative paths restored or rewritten.

        With ``ids``, only those specs are removed: their files are restored and the remaining
        applied specs are applied again on the originals.

        Raises:
            UsageError: an id that is not applied.
            FileSystemError: a file whose sha256 is not the recorded patched one (unless
                ``force``), a missing or altered backup, or a failed write; nothing is changed.
        """
        manifest = self.store.load()
        if manifest is None:
            return []
        removing = set(manifest.specs if not ids else ids)
        unknown = removing - set(manifest.specs)
        if unknown:
            raise UsageError(f"spec {sorted(unknown)[0]!r} is not applied here (applied: {', '.join(manifest.specs) or 'none'})")
        remaining = [s for s in self.specs if s.id in set(manifest.specs) - removing]
        writes, records = [], dict(manifest.files)
        for relative, record in manifest.files.items():
            if not removing & set(record.specs):
                continue
            path = self.dist.locate(relative)
            current = read_bytes(path) if path.exists() else b""
            if sha256(current) != record.patched_sha256 and not force:
                raise FileSystemError(
                    f"{path}: changed since apply (sha256 differs from the manifest); not restoring — "
                    f"reinstall {self.dist.name}, or use --force to restore the backup anyway"
                )
            original = self.store.read_backup(relative)
            if sha256(original) != record.original_sha256:
                raise FileSystemError(f"{self.store.backup_path(relative)}: backup altered (sha256 mismatch); reinstall {self.dist.name}")
            keep = [(s, t) for s in remaining for t in s.targets_for(self.dist.version) if t.file == relative]
            if keep:
                new = self._plan_file(relative, keep, base=original).patched
                records[relative] = FileRecord(record.original_sha256, sha256(new), sorted({s.id for s, _ in keep}), record.mode)
            else:
                new = original
                del records[relative]
            writes.append((path, current, new, record.mode))
        for path, *_ in writes:
            check_writable(path)
        self._check_state_writable()
        if records:
            finish = lambda: self.store.save(Manifest(manifest.distribution, manifest.version, sorted(s.id for s in remaining), records))  # noqa: E731
        else:
            finish = self.store.remove
        self._write_all([(p, c, n) for p, c, n, _ in writes], modes=[mode for *_, mode in writes], finish=finish)
        return [str(p.relative_to(self.dist.site_packages)) for p, *_ in writes]

    def _current_manifest(self) -> Manifest | None:
        """The manifest if it belongs to the installed version; a stale one (upgrade) is dropped."""
        manifest = self.store.load()
        if manifest and manifest.version != str(self.dist.version):
            self.store.remove()
            return None
        return manifest

    def _check_state_writable(self) -> None:
        """The manifest directory (or the nearest existing parent) must accept new files."""
        directory = self.store.root
        while not directory.exists():
            directory = directory.parent
        check_writable(directory / "manifest.json")

    def _write_all(self, writes: list[tuple[Path, bytes, bytes]], modes: list[int] | None = None, finish=None) -> None:
        """Write every file and then run ``finish`` (the manifest), or none: on a failure, already
        written files get their old bytes back."""
        done: list[tuple[Path, bytes]] = []
        try:
            for i, (path, old, new) in enumerate(writes):
                atomic_write(path, new, mode=modes[i] if modes else None)
                done.append((path, old))
            if finish is not None:
                finish()
        except FileSystemError:
            for path, old in reversed(done):
                atomic_write(path, old)
            raise
        for path, _, _ in writes:
            remove_bytecode(path)


def _check_result(path: Path, data: bytes) -> None:
    """The patched bytes must parse (libcst) and compile (CPython); else nothing is written."""
    try:
        cst.parse_module(data)
        compile(data, str(path), "exec", dont_inherit=True)
    except (cst.ParserSyntaxError, SyntaxError, ValueError) as exc:
        raise DriftError(f"{path}: patched result does not compile ({exc}); the spec's code is wrong for this version — nothing written") from None


def _combine(states: list[str]) -> str:
    """The state of several targets/operations together: any drift wins, then not-applied."""
    for state in (DRIFTED, UNSUPPORTED, APPLICABLE):
        if state in states:
            return state
    if states and all(s == NOT_NEEDED for s in states):
        return NOT_NEEDED
    return APPLIED
