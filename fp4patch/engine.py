"""Plan, apply, verify and revert specs on one installed distribution.

The engine reads each target file once, runs the operations of every selected spec over the
libcst tree in memory, checks that the result parses and compiles, and only then writes.
Reports are plain data (:class:`SpecReport`); the CLI renders them.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .environment import InstalledDistribution
from .errors import DriftError, FileSystemError, UsageError
from .install_record import check_baseline, other_install, record_sha256
from .files import check_writable, fault_point, read_bytes, sha256
from .journal import run
from .lock import UnwritableLock, environment_lock
from .manifest import FileRecord, Journal, JournalFile, Manifest, ManifestStore
from .recovery import journal_note, recover
from .report import SpecReport, TargetReport, check_spec, combine  # noqa: F401 (TargetReport re-exported)
from .sources import Sources
from .spec import Spec, Target

from .states import APPLICABLE, APPLIED, DRIFTED, NEEDS_CHECK, NOT_NEEDED, NOT_TARGETED, OBSOLETE, SATISFIED, UNSUPPORTED  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from .catalog import Catalog
    from .environment import TargetEnvironment
    from .evidence import Basis, Resolution


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


def select_specs(specs: list[Spec], ids: list[str] | None, skip: list[str] | None = None) -> list[Spec]:
    """The specs named by ``ids`` (default: those marked ``default``), plus what they require,
    without those named by ``skip`` (``--skip``: leave a spec out by name, e.g. one that does not
    apply to the installed release).

    Raises:
        UsageError: an unknown id (in ``ids`` or ``skip``), two selected specs that conflict, or a
            skipped spec that a selected one requires.
    """
    by_id = {s.id: s for s in specs}
    unknown = [i for i in [*(ids or []), *(skip or [])] if i not in by_id]
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], list(by_id), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UsageError(f"unknown spec {unknown[0]!r}; {hint}known: {', '.join(by_id)} (see `fp4patch status`)")
    if ids:
        chosen = list(dict.fromkeys(ids))
    else:
        chosen = [s.id for s in specs if s.default]
    queue = list(chosen)
    while queue:
        for needed in by_id[queue.pop()].requires:
            if needed not in chosen:
                chosen.append(needed)
                queue.append(needed)
    for left_out in skip or []:
        needing = [i for i in chosen if left_out in by_id[i].requires and i not in (skip or [])]
        if needing:
            raise UsageError(f"--skip {left_out}: {needing[0]!r} requires it; skip that one too, or keep {left_out!r}")
    chosen = [i for i in chosen if i not in (skip or [])]
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

    def __init__(
        self,
        dist: InstalledDistribution,
        specs: list[Spec],
        notify: Callable[[str], None] | None = None,
        catalog: Catalog | None = None,
        target_env: TargetEnvironment | None = None,
    ) -> None:
        self.dist = dist
        self.specs = specs
        #: The release catalog and its evidence (loaded on first use: the built-in one by default).
        self._catalog = catalog
        #: The interpreter whose torch checks a needs-check target on CPU (:mod:`fp4patch.cpu_check`);
        #: None: the one running fp4patch.
        self.target_env = target_env
        self._resolutions: dict[str, Resolution] = {}
        #: spec id -> the outcome of the CPU check ``apply`` ran for it (a ``checked`` or ``changed`` basis).
        self.checked: dict[str, Basis] = {}
        #: spec id -> target specifiers that count as carrying evidence (``make compat``'s replay of
        #: past releases; None: those with evidence in :attr:`catalog`).
        self.evidenced: dict[str, set[str]] | None = None
        self.store = ManifestStore(dist.site_packages, dist.name)
        #: Where notes go (lock waits, recovered runs, discarded records): stderr by default.
        self.notify = notify or _stderr
        #: The installed files as this command reads them (:mod:`fp4patch.sources`).
        self.sources = Sources(dist, self.store)
        #: Every file a report read: path relative to site-packages (absolute when outside) →
        #: sha256 of the bytes read, or None when it was missing. The recorded verdict's key.
        self.inputs = self.sources.inputs
        #: Files the last revert found holding their original bytes already (record dropped, nothing written).
        self.dropped: list[str] = []
        #: The options naming this environment (``--python P`` or ``--site-packages D``) and the specs
        #: (``--specs-dir D``) as the command was given them (set by the CLI), repeated in every command
        #: a message advises (:meth:`command`) so that it works as written.
        self.environment_options: tuple[str, ...] = ()
        self.specs_options: tuple[str, ...] = ()

    def command(self, subcommand: str, *words: str) -> str:
        """``fp4patch <subcommand> <environment options> <specs options> <words>``, shell-quoted
        (:func:`shlex.join`): a command a message advises, acting on this environment with these
        specs (``clean`` reads no specs, so it gets no ``--specs-dir``)."""
        import shlex

        specs = self.specs_options if subcommand != "clean" else ()
        return shlex.join(["fp4patch", subcommand, *self.environment_options, *specs, *words])

    @property
    def catalog(self) -> Catalog:
        """The release catalog with its evidence (:mod:`fp4patch.catalog`)."""
        if self._catalog is None:
            from .catalog import load_catalog

            self._catalog = load_catalog(self.dist.name)
        return self._catalog

    def resolve(self, spec: Spec) -> Resolution:
        """The targets ``spec`` takes on the installed release and why (:func:`fp4patch.evidence.resolve`).

        A spec recorded in this install's manifest keeps the basis it was applied on (its files hold
        the patched code now, which no fingerprint of the release would match); a spec ``apply``
        checked on CPU in this command carries that outcome.
        """
        from .evidence import Resolution

        if spec.id not in self._resolutions:
            resolution = self._recorded_resolution(spec)
            if resolution is None:
                from .evidence import resolve
                from .fingerprint import ModuleReader

                evidenced = self.evidenced.get(spec.id, set()) if self.evidenced is not None else None
                resolution = resolve(spec, self.dist.version, self.catalog, ModuleReader(self.dist.site_packages, self.sources.released_bytes), evidenced)
            self._resolutions[spec.id] = resolution
        resolution = self._resolutions[spec.id]
        if spec.id in self.checked:
            return Resolution(resolution.targets, self.checked[spec.id])
        return resolution

    def forget_reads(self) -> None:
        """Start :attr:`inputs` afresh (and read the files again): before reports whose inputs key a verdict."""
        self.inputs.clear()
        self._resolutions.clear()

    def _recorded_resolution(self, spec: Spec) -> Resolution | None:
        from .evidence import Basis, Resolution

        try:
            manifest = self.store.load()
        except FileSystemError:
            return None
        if manifest is None or spec.id not in manifest.basis or other_install(manifest, self.dist):
            return None
        basis = Basis.from_json(manifest.basis[spec.id])
        wanted = set(basis.target.split("; "))
        targets = [t for t in spec.targets if str(t.versions) in wanted]
        return Resolution(targets, basis) if targets else None

    def report(self, spec: Spec) -> SpecReport:
        """Check ``spec`` against the installed files (reads only; :func:`fp4patch.report.check_spec`)."""
        return check_spec(spec, self.sources, self.resolve)

    # ------------------------------------------------------------------ planning
    def plan(self, specs: list[Spec], required: frozenset[str] | set[str] = frozenset(), unchecked: bool = False) -> dict[str, FilePlan]:
        """Transform every file targeted by ``specs`` in memory.

        The policy for partly covered releases (:func:`fp4patch.states.accepted`): a spec declared
        ``unsupported`` on this release is left out unless it is in ``required`` (named with
        ``--spec``, or every spec with ``--strict``); ``not-needed`` and ``obsolete`` specs need
        nothing. ``unchecked``: plan ``needs-check`` specs as if their CPU check had passed (``diff``
        shows what ``apply`` would write); else they are problems like drift.

        Raises:
            DriftError: a spec is drifted, not targeted at this version, needs a CPU check, or is
                required but unsupported; nothing is written. The message names each, and the
                ``--skip`` that leaves it out.
        """
        problems, skippable, changed = [], [], False
        by_file: dict[str, list[tuple[Spec, Target]]] = {}
        for spec in specs:
            report = self.report(spec)
            if report.state in (OBSOLETE, NOT_NEEDED):
                continue
            if report.state == UNSUPPORTED and spec.id not in required:
                continue  # left out: listed with its reason by apply and verify
            if report.state in (DRIFTED, UNSUPPORTED) or (report.state == NEEDS_CHECK and not unchecked):
                problems.append(f"{spec.id}: {report.state}: {report.detail}")
                skippable.append(spec.id)
                changed = changed or (report.basis is not None and report.basis.kind in ("changed", "needs-check"))
            elif report.state == NOT_TARGETED:
                problems.append(f"{spec.id}: no target for {self.dist.name} {self.dist.version}")
                skippable.append(spec.id)
            for target in self.resolve(spec).targets:
                if not target.status:
                    by_file.setdefault(target.file, []).append((spec, target))
        if problems:
            skip = self.command("apply", *(w for i in skippable for w in ("--skip", i)))
            raise DriftError(
                f"{self.dist.name} {self.dist.version}: " + "; ".join(problems)
                + f" — nothing written; `{skip}` leaves {'it' if len(skippable) == 1 else 'them'} out (see `{self.command('verify')}`"
                + (f"; `{self.command('verify', '--show-changes')}` shows what changed)" if changed else ")")
            )
        return {rel: self._plan_file(rel, pairs) for rel, pairs in by_file.items()}

    def _plan_file(self, relative: str, pairs: list[tuple[Spec, Target]], base: bytes | None = None) -> FilePlan:
        import libcst as cst

        path = self.dist.locate(relative)
        if base is None:
            loaded = self.sources.load_module(path)
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
    def diff(self, specs: list[Spec], required: frozenset[str] | set[str] = frozenset()) -> list[FilePlan]:
        """The files ``apply`` would change, with their new contents (writes nothing). A
        ``needs-check`` spec is shown as ``apply`` would write it once its CPU check passes."""
        return [p for p in self.plan(specs, required, unchecked=True).values() if p.changes]

    def apply(
        self,
        specs: list[Spec],
        allow_modified: bool = False,
        on_success: Callable[[], None] | None = None,
        required: frozenset[str] | set[str] = frozenset(),
    ) -> list[FilePlan]:
        """Patch the installed files; returns the plans of the files written.

        Holds the environment's lock, first finishes an operation that was interrupted (see
        :meth:`_recover`), then checks on CPU every spec in ``needs-check`` (a release the catalog
        does not list whose code differs from the verified one: :meth:`check_on_cpu`), then plans,
        checks and writes through a journal. ``required``: the spec ids that must apply even where
        declared ``unsupported`` (:meth:`plan`). ``on_success`` runs after a successful apply with
        the lock still held (the CLI records verify's verdict there: another writer waiting for
        the lock would take its temporary file for the leftover of a killed run); not on a
        read-only site-packages, where nothing is written.

        Raises:
            DriftError: a selected spec is drifted, not targeted, failed its CPU check, or is
                required but unsupported.
            UsageError: a selected spec conflicts with one already applied.
            FileSystemError: a file differs from the distribution's RECORD (unless
                ``allow_modified``) or changed since a previous apply, or cannot be written; no
                file is changed.
        """
        try:
            lock = self._locked()
            lock.__enter__()
        except FileSystemError as exc:
            if not isinstance(exc, UnwritableLock):
                raise
            # read-only site-packages: fine when everything is applied already, else this error
            written = self._apply(specs, allow_modified, refuse_writes=exc, required=required)
            self._refresh_stale_bytecode()
            return written
        try:
            recover(self.store, self.dist, self.notify)
            self.check_on_cpu(specs, required)
            written = self._apply(specs, allow_modified, required=required)
            self._refresh_stale_bytecode()
            if on_success is not None:
                on_success()
            return written
        finally:
            lock.__exit__(None, None, None)

    def check_on_cpu(self, specs: list[Spec], required: frozenset[str] | set[str] = frozenset()) -> dict[str, Basis]:
        """Check every spec of ``specs`` in ``needs-check`` on CPU (:func:`fp4patch.cpu_check.check`)
        and keep the outcome in :attr:`checked`: a ``checked`` basis (apply it), or a ``changed`` one
        naming what failed (the spec is then ``drifted``). Returns the outcomes of this call.

        The check copies the distribution's Python sources into a temporary site-packages, applies
        the selection there and runs the probes in :attr:`target_env` (torch needed there); the
        installed files are only read.
        """
        needs = [s for s in specs if s.id not in self.checked and self.report(s).state == NEEDS_CHECK]
        if not needs:
            return {}
        from .cpu_check import check

        # the copy gets what would apply with them: not a spec that is drifted, declared or not targeted here
        # (apply refuses those itself, and a user leaves them out with --skip: the check must still answer)
        others = [s for s in specs if s.id not in {n.id for n in needs} and self.report(s).state in (APPLICABLE, APPLIED)]
        outcome = check(self, needs, others + needs, required)
        self.checked.update(outcome)
        return outcome

    def _apply(
        self, specs: list[Spec], allow_modified: bool, refuse_writes: Exception | None = None, required: frozenset[str] | set[str] = frozenset()
    ) -> list[FilePlan]:
        manifest = self._current_manifest()
        if manifest:
            applied = [s for s in self.specs if s.id in manifest.specs]
            requested = {s.id for s in specs}
            for spec in specs:
                for other in set(spec.conflicts) & set(manifest.specs):
                    raise UsageError(f"spec {spec.id!r} conflicts with {other!r}, which is applied; run `{self.command('revert', '--spec', other)}` first")
            for spec in applied:
                for other in set(spec.conflicts) & requested:
                    raise UsageError(f"spec {other!r} conflicts with {spec.id!r}, which is applied; run `{self.command('revert', '--spec', spec.id)}` first")
        plans = self.plan(specs, required)
        fault_point("plan")
        writes = [p for p in plans.values() if p.changes]
        links = [plan.path for plan in writes if plan.path.is_symlink()]
        if links:
            # uv's --link-mode=symlink links every file of the install into uv's cache: name them all at once
            # and the reinstall that gives regular files (never write through a link into a shared cache).
            pinned = f"{self.dist.name}=={self.dist.version}"
            what = (
                f"{links[0]}: is a symbolic link to {os.readlink(links[0])}"
                if len(links) == 1
                else f"{', '.join(map(str, links))}: are symbolic links (first to {os.readlink(links[0])})"
            )
            raise FileSystemError(
                f"{what}; fp4patch patches regular files only — reinstall with copies "
                f"(`uv pip install --reinstall --no-deps --link-mode=copy {pinned}`; pip installs copies: "
                f"`pip install --force-reinstall --no-deps {pinned}`), or replace each link by a copy of its file, then apply"
            )
        manifest = manifest or Manifest(self.dist.name, str(self.dist.version))
        previous = manifest if self.store.path.exists() else None
        reinstalled: set[str] = set()
        for plan in writes:
            record = manifest.files.get(plan.relative)
            current = sha256(plan.current)
            if record and current == record.original_sha256 != record.patched_sha256:
                reinstalled.add(plan.relative)  # reinstalled since apply: patch it afresh
                self.notify(f"{plan.path}: holds the original bytes again (reinstalled?); patching it afresh")
            elif record and current != record.patched_sha256:
                raise FileSystemError(
                    f"{plan.path}: changed since fp4patch patched it; reinstall {self.dist.name} or run `{self.command('revert', '--force')}`"
                )
            elif not record and not allow_modified:
                check_baseline(self.dist, plan.relative, plan.path, plan.current)
        # a spec left out (declared unsupported here, not required) is not recorded: it was not applied
        taken = [s for s in specs if not (self.report(s).state == UNSUPPORTED and s.id not in required)]
        applied_ids = sorted(set(manifest.specs) | {s.id for s in taken})
        basis = dict(manifest.basis)
        for spec in taken:
            resolved = self.resolve(spec).basis
            if resolved is not None and resolved.kind not in ("listed", "no-target"):
                basis[spec.id] = resolved.to_record()  # the evidence it was applied on ("as verified on 0.7.4, same code")
        new_manifest = Manifest(
            self.dist.name, str(self.dist.version), applied_ids, dict(manifest.files), record_sha256=record_sha256(self.dist.dist), basis=basis
        )
        for plan in plans.values():
            old = None if plan.relative in reinstalled else manifest.files.get(plan.relative)
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
        if refuse_writes is not None:
            raise refuse_writes
        for plan in writes:
            check_writable(plan.path)
        self._check_state_writable()
        fresh = [p for p in writes if p.relative not in manifest.files or p.relative in reinstalled]
        journal = Journal(
            "apply",
            self.dist.name,
            str(self.dist.version),
            sorted({s.id for s in specs}),
            files=[
                JournalFile(p.relative, sha256(p.current), sha256(p.patched), p.path.stat().st_mode & 0o7777, Journal.encode(p.patched))
                for p in writes
            ],
            backups={p.relative: Journal.encode(p.current) for p in fresh},
            manifest=asdict(new_manifest),
        )
        run(self.store, self.dist, journal, undo=[(p.path, p.current) for p in writes], previous=previous)
        return writes

    def revert(self, ids: list[str] | None, force: bool = False) -> list[str]:
        """Restore originals byte for byte; returns the relative paths restored or rewritten (files
        that already held their original bytes only lose their record: see :attr:`dropped`).

        With ``ids``, only those specs are removed: their files are restored and the remaining
        applied specs are applied again on the originals. Holds the environment's lock and
        finishes an interrupted operation first. A record written for another version of the
        distribution (an upgrade replaced the files) is refused; with ``force`` it is discarded
        and nothing is restored.

        Raises:
            UsageError: an id that is not applied.
            FileSystemError: a file whose sha256 is not the recorded patched one (unless
                ``force``), a missing or altered backup, backups of another version, or a failed
                write; nothing is changed.
        """
        if not self.store.lock_path.parent.exists():
            return []  # nothing recorded, nothing interrupted: no lock needed (read-only images too)
        with self._locked():
            recover(self.store, self.dist, self.notify)
            return self._revert(ids, force)

    def _revert(self, ids: list[str] | None, force: bool) -> list[str]:
        manifest = self.store.load()
        if manifest is None:
            return []
        installed = str(self.dist.version)
        if other_install(manifest, self.dist):
            now = f"{installed} is installed" if manifest.version != installed else f"{installed} was reinstalled since (its RECORD differs)"
            if not force:
                raise FileSystemError(
                    f"{self.store.path}: the backups are for {self.dist.name} {manifest.version} but {now}"
                    f"{' (upgraded or reinstalled)' if manifest.version != installed else ''}; not restoring them — `{self.command('revert', '--force')}` discards that record, "
                    f"`{self.command('apply')}` replaces it"
                )
            self.notify(f"discarded fp4patch's record of {self.dist.name} {manifest.version} ({now}); no file restored")
            self.store.remove()
            return []
        removing = set(manifest.specs if not ids else ids)
        unknown = removing - set(manifest.specs)
        if unknown:
            # a recorded spec that changed no file (not needed on this release) is not called applied
            applied = manifest.applied_specs()
            idle = [s for s in manifest.specs if s not in applied]
            raise UsageError(
                f"spec {min(unknown)!r} is not applied here (applied: {', '.join(applied) or 'none'}"
                f"{'; recorded, changed no file: ' + ', '.join(idle) if idle else ''})"
            )
        remaining = [s for s in self.specs if s.id in set(manifest.specs) - removing]
        writes, records, touched, dropped = [], dict(manifest.files), [], []
        for relative, record in manifest.files.items():
            if not removing & set(record.specs):
                continue
            path = self.dist.locate(relative)
            current = read_bytes(path) if path.exists() else b""
            keep = [(s, t) for s in remaining for t in self.resolve(s).targets if t.file == relative]
            if sha256(current) == record.original_sha256 and not keep:
                self.notify(f"{path}: already holds the original bytes (reinstalled?); dropping its record")
                del records[relative]
                dropped.append(relative)
                self.dropped.append(relative)
                continue
            touched.append(relative)
            if sha256(current) != record.patched_sha256 and not force:
                raise FileSystemError(
                    f"{path}: changed since apply (sha256 differs from the manifest); not restoring — "
                    f"reinstall {self.dist.name}, or use --force to restore the backup anyway"
                )
            original = self.store.read_backup(relative)
            if sha256(original) != record.original_sha256:
                raise FileSystemError(f"{self.store.backup_path(relative)}: backup altered (sha256 mismatch); reinstall {self.dist.name}")
            if keep:
                new = self._plan_file(relative, keep, base=original).patched
                records[relative] = FileRecord(record.original_sha256, sha256(new), sorted({s.id for s, _ in keep}), record.mode)
            else:
                new = original
                del records[relative]
                dropped.append(relative)
            writes.append((relative, path, current, new, record.mode))
        for _, path, *_ in writes:
            check_writable(path)
        self._check_state_writable()
        kept_basis = {k: v for k, v in manifest.basis.items() if k in {s.id for s in remaining}}
        new_manifest = (
            Manifest(
                manifest.distribution, manifest.version, sorted(s.id for s in remaining), records, record_sha256=manifest.record_sha256, basis=kept_basis
            )
            if records
            else None
        )
        journal = Journal(
            "revert",
            self.dist.name,
            installed,
            sorted(removing),
            files=[JournalFile(rel, sha256(cur), sha256(new), mode, Journal.encode(new)) for rel, _, cur, new, mode in writes],
            manifest=asdict(new_manifest) if new_manifest else None,
            drop_backups=dropped if new_manifest else [],
        )
        from .verdict import remove

        remove(self.dist.site_packages, self.dist.name)  # verify's recorded answer is about to go stale
        run(self.store, self.dist, journal, undo=[(path, cur) for _, path, cur, _, _ in writes], previous=manifest)
        return touched

    # ------------------------------------------------------------------ journal and lock
    def _locked(self):
        return environment_lock(
            self.store.lock_path,
            f"{self.dist.name} in {self.dist.site_packages}",
            self.notify,
            remove_when=lambda: True,
        )

    def interrupted(self) -> str | None:
        """A one-line note when ``verify`` must fail for a reason outside the spec states: an
        apply/revert was interrupted (or is running now), or a target file has stale bytecode that
        Python would run instead of it (:meth:`stale_bytecode`); reads only."""
        return journal_note(self.store, self.command) or self.stale_bytecode()

    def bytecode_files(self) -> list[str]:
        """Site-packages-relative paths of every existing file that a spec of this distribution
        targets at the installed version: those whose bytecode fp4patch keeps current."""
        files = {t.file for s in self.specs for t in self.resolve(s).targets if t.file and not t.status}
        return sorted(f for f in files if self.dist.locate(f).is_file())

    def stale_bytecode(self) -> str | None:
        """A one-line problem when a pyc of a file fp4patch patches (:meth:`bytecode_files`) would
        run instead of the file on disk (:func:`fp4patch.bytecode.stale_note`, which notes every pyc
        path it could load in :attr:`inputs`); None when none would. Reads only."""
        from .bytecode import stale_note

        return stale_note(self.dist, self.bytecode_files(), self.sources.note, self.command("apply"))

    def _refresh_stale_bytecode(self) -> None:
        """Rewrite (or remove) bytecode that would run instead of a target file
        (:func:`fp4patch.bytecode.refresh_stale`); says which on ``notify``.

        Raises:
            FileSystemError: a stale bytecode file can be neither rewritten nor removed.
        """
        from .bytecode import refresh_stale

        refresh_stale(self.dist, self.bytecode_files(), self.notify)

    def _current_manifest(self) -> Manifest | None:
        """The manifest if it belongs to the installed version; a stale one (upgrade) is discarded, saying so."""
        manifest = self.store.load()
        if manifest and other_install(manifest, self.dist):
            now = "installed now" if manifest.version != str(self.dist.version) else "reinstalled since (its RECORD differs)"
            self.notify(
                f"discarding fp4patch's record of {self.dist.name} {manifest.version} in {self.store.root}: "
                f"{self.dist.version} is {now} (upgraded or reinstalled), so its backups no longer apply"
            )
            self.store.remove()
            return None
        return manifest

    def stale_record(self) -> str | None:
        """One line when fp4patch's record here was written for another install of the
        distribution (upgraded, or reinstalled with another RECORD): what it is and what removes
        it; None otherwise (also when there is none, or it cannot be read). Reads only."""
        from .leftovers import STALE, describe

        if not self.store.root.is_dir():
            return None
        state = describe(self.store.root)
        if state.kind != STALE:
            return None
        return f"{state.reason}; `{self.command('apply')}` replaces it, `{self.command('clean')}` removes it"

    def _check_state_writable(self) -> None:
        """The manifest directory (or the nearest existing parent) must accept new files."""
        directory = self.store.root
        while not directory.exists():
            directory = directory.parent
        check_writable(directory / "manifest.json")


def _stderr(message: str) -> None:
    sys.stderr.write(f"fp4patch: {message}\n")
    sys.stderr.flush()


def _check_result(path: Path, data: bytes) -> None:
    """The patched bytes must compile (CPython); else nothing is written.

    Not parsed again with libcst: the bytes are libcst's own printing of a tree made of parsed
    source and parsed snippets, which libcst reads back (its round-trip guarantee); compiling is the
    check that the edit is valid Python (a re-parse cost about 0.1 CPU-second per file).
    """
    try:
        compile(data, str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        raise DriftError(f"{path}: patched result does not compile ({exc}); the spec's code is wrong for this version — nothing written") from None
