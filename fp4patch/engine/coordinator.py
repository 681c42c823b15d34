"""Plan, apply, verify and revert specs on one installed distribution: the coordinator.

:class:`Engine` holds what one command knows about the distribution and orders the parts, each
in a module named for what it does. Data flows down: a part takes values (specs, a resolution, the
reports, a plan, an :class:`~fp4patch.engine.advice.Advice` that words the commands a message advises) and
returns values; none imports the engine (``make lint``):

====================  ===========================================================================
:mod:`.selection`     which specs and targets take part: ``--spec``/``--skip``, conflicts, the
                      ``--strict`` policy, the targets a spec keeps from its recorded basis
:mod:`.sources`       the installed files: parsed once per contents, released bytes
:mod:`.report`        the state of one spec (:class:`SpecReport`) in steps :meth:`report` orders, reads only
:mod:`fp4patch.checks.cpu_check`  a ``needs-check`` spec checked on CPU in a copy :meth:`check_on_cpu` applies
:mod:`.advice`        the commands a message advises, on this environment with these specs
:mod:`.plan`          new bytes in memory (:class:`FilePlan`), the preflight, the change to journal
:mod:`.journal`       every write recorded before the first, carried out step by step, undone on error
:mod:`.recovery`      a killed run finished or cleaned up; the "interrupted" note
:mod:`.install_record`  RECORD: the baseline of a first patch, "another install?"
:mod:`.bytecode`      pyc files made current, stale ones found
:mod:`.lock`          one writer per environment
====================  ===========================================================================

Each public method reads as the sequence it runs. ``apply``, under the lock: recover, check
``needs-check`` specs on CPU, conflicts with the applied specs, plan, preflight, journal,
bytecode. ``revert``, under the lock: recover, the specs to remove, plan the
originals, journal. Plans never write; besides the journal the engine writes in two places, both
here and said on ``notify``: discarding fp4patch's record of another install (:meth:`_current_manifest`,
and ``revert --force`` of such a record). Reports are plain data; the CLI renders them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..catalog.spec import Spec, Target
from ..errors import FileSystemError, Fp4PatchError
from ..states import APPLICABLE, APPLIED, DRIFTED, NEEDS_CHECK, NOT_NEEDED, NOT_TARGETED, OBSOLETE, SATISFIED, UNSUPPORTED
from ..target.environment import InstalledDistribution
from .advice import Advice
from .install_record import other_install
from .journal import run
from .lock import UnwritableLock, environment_lock
from .manifest import Manifest, ManifestStore
from .plan import ApplyRequest, FilePlan, apply_change, check_apply, check_result, plan_file, revert_change, stamp_set
from .recovery import journal_note, recover
from .report import SpecReport, TargetReport, check_resolved, obsolete_report, recorded_applied, recording
from .selection import (
    check_applied_conflicts,
    check_conflicts,
    left_out,
    planned_targets,
    recorded_resolution,
    removed_specs,
    select_specs,
    takes_part,
)
from .sources import Sources

if TYPE_CHECKING:
    from ..catalog.catalog_file import Catalog
    from ..catalog.evidence import Basis, Resolution
    from ..target.environment import TargetEnvironment

#: Re-exported for the CLI, against, compat and the tests, which import them from here.
__all__ = [
    "APPLICABLE", "APPLIED", "DRIFTED", "NEEDS_CHECK", "NOT_NEEDED", "NOT_TARGETED", "OBSOLETE", "SATISFIED", "UNSUPPORTED",
    "Engine", "FilePlan", "SpecReport", "TargetReport", "check_conflicts", "select_specs",
]


class Engine:
    """Apply/verify/revert ``specs`` (all for one distribution) on ``dist``."""

    def __init__(
        self,
        dist: InstalledDistribution,
        specs: list[Spec],
        notify: Callable[[str], None] | None = None,
        catalog: Catalog | None = None,
        target_env: TargetEnvironment | None = None,
        *,
        resolutions: Mapping[str, Resolution] | None = None,
        checked: Mapping[str, Basis] | None = None,
        evidenced: Mapping[str, set[str]] | None = None,
        advice: Advice = Advice(),
    ) -> None:
        """An engine for ``specs`` on ``dist``; reads nothing yet, never raises.

        Args:
            dist (InstalledDistribution): the installed distribution.
            specs (list[Spec]): every spec of that distribution.
            notify (Callable[[str], None] | None): where notes go; None: stderr.
            catalog (Catalog | None): the release catalog; None: the built-in one, loaded on first use.
            target_env (TargetEnvironment | None): the interpreter of the CPU checks; None: the running one.
            resolutions (Mapping[str, Resolution] | None): spec id -> a resolution to take as made already
                (:meth:`resolve` answers it): the CPU check's copy takes exactly the
                targets the installed release took.
            checked (Mapping[str, Basis] | None): the initial :attr:`checked` (copied).
            evidenced (Mapping[str, set[str]] | None): the initial :attr:`evidenced` (copied); None: the catalog's.
            advice (Advice): the options naming this environment and the specs as the command was given them,
                repeated in every command a message advises (:meth:`command`); none by default.
        """
        self.dist = dist
        self.specs = specs
        #: The release catalog and its evidence (loaded on first use: the built-in one by default).
        self._catalog = catalog
        #: The interpreter whose torch checks a needs-check target on CPU (:mod:`fp4patch.checks.cpu_check`);
        #: None: the one running fp4patch.
        self.target_env = target_env
        self._resolutions: dict[str, Resolution] = dict(resolutions or {})
        self._reports: dict[str, SpecReport] = {}
        #: spec id -> the outcome of the CPU check ``apply`` ran for it (a ``checked`` or ``changed`` basis).
        self.checked: dict[str, Basis] = dict(checked or {})
        #: spec id -> target specifiers that count as carrying evidence (``make compat``'s replay of
        #: past releases; None: those with evidence in :attr:`catalog`).
        self.evidenced: dict[str, set[str]] | None = dict(evidenced) if evidenced is not None else None
        self.store = ManifestStore(dist.site_packages, dist.name)
        #: Where notes go (lock waits, recovered runs, discarded records): stderr by default.
        self.notify = notify or _stderr
        #: The installed files as this command reads them (:mod:`fp4patch.engine.sources`).
        self.sources = Sources(dist, self.store)
        #: Files the last revert found holding their original bytes already (record dropped, nothing written).
        self.dropped: list[str] = []
        #: The set token the last :meth:`plan` stamped its files with (:mod:`fp4patch.engine.set_stamp`); None: none patched.
        self.set_token: str | None = None
        #: The options naming this environment and the specs, repeated in every command a message advises
        #: (:meth:`command`) so that it works as written; the parts that word such a message take it.
        self.advice = advice

    def command(self, subcommand: str, *words: str) -> str:
        """``fp4patch <subcommand> <environment options> <specs options> <words>``, shell-quoted
        (:func:`shlex.join`): a command a message advises, acting on this environment with these
        specs (``clean`` reads no specs, so it gets no ``--specs-dir``): :meth:`fp4patch.engine.advice.Advice.command`."""
        return self.advice.command(subcommand, *words)

    @property
    def target_python(self) -> str | None:
        """The interpreter the user named with ``--python`` (:attr:`advice`), else None: the reinstall
        advice names it."""
        options = list(self.advice.environment_options)
        return options[options.index("--python") + 1] if "--python" in options else None

    def apply_refusal(self, files: Iterable[str]) -> str | None:
        """The refusal an ``apply`` writing ``files`` (site-packages-relative; those of the specs that are not applied)
        would end in before any write, for what ``status`` and ``verify`` can tell without planning: symbolic links
        among them (:func:`fp4patch.engine.plan.link_refusal`, the same line). None when there are none. Reads only."""
        from .plan import link_refusal

        return link_refusal(self.dist, [self.dist.locate(f) for f in sorted(set(files)) if f], self.target_python)

    @property
    def catalog(self) -> Catalog:
        """The release catalog with its evidence (:mod:`fp4patch.catalog`)."""
        if self._catalog is None:
            from ..catalog.catalog_file import load_catalog

            self._catalog = load_catalog(self.dist.name)
        return self._catalog

    # ------------------------------------------------------------------ reading
    def resolve(self, spec: Spec) -> Resolution:
        """The targets ``spec`` takes on the installed release and why (:func:`fp4patch.catalog.evidence.resolve`).

        A spec recorded in this install's manifest keeps the basis it was applied on
        (:func:`fp4patch.engine.selection.recorded_resolution`: its files hold the patched code now, which
        no fingerprint of the release would match); a spec ``apply`` checked on CPU in this command
        carries that outcome. Resolved once per spec until :meth:`forget_reads`.
        """
        from ..catalog.evidence import Resolution

        if spec.id not in self._resolutions:
            resolution = recorded_resolution(spec, self.store, self.dist)
            if resolution is None:
                from ..catalog.evidence import resolve
                from ..catalog.fingerprint import ModuleReader

                evidenced = self.evidenced.get(spec.id, set()) if self.evidenced is not None else None
                resolution = resolve(spec, self.dist.version, self.catalog, ModuleReader(self.dist.site_packages, self.sources.released_bytes), evidenced)
            self._resolutions[spec.id] = resolution
        resolution = self._resolutions[spec.id]
        if spec.id in self.checked:
            return Resolution(resolution.targets, self.checked[spec.id])
        return resolution

    def report(self, spec: Spec) -> SpecReport:
        """Check ``spec`` against the installed files (reads only; :mod:`fp4patch.engine.report`), once per spec until
        the files change or its CPU check changes its basis: planning asks for each
        report several times (conflicts, CPU checks, targets, what is left out), each a walk of the trees.

        In the order of :mod:`fp4patch.engine.report`: fp4patch's record (the fast path), ``obsolete-when``, then the
        targets the spec resolves to. The spec is resolved only where a step needs its targets.
        """
        if spec.id not in self._reports:
            manifest = recording(spec, self.sources)
            report = recorded_applied(spec, self.sources, manifest, self.resolve(spec)) if manifest is not None else None
            if report is None:
                report = obsolete_report(spec, self.sources)
            if report is None:
                report = check_resolved(spec, self.sources, self.resolve(spec))
            self._reports[spec.id] = report
        return self._reports[spec.id]

    def interrupted(self) -> str | None:
        """A one-line note when ``verify`` must fail for a reason outside the spec states: an
        apply/revert was interrupted or is running now (:func:`fp4patch.engine.recovery.journal_note`), or a
        target file has stale bytecode that Python would run instead of it (:meth:`stale_bytecode`);
        reads only."""
        return journal_note(self.store, self.advice) or self.stale_bytecode()

    def bytecode_files(self) -> list[str]:
        """Site-packages-relative paths of every existing file that a spec of this distribution
        targets at the installed version: those whose bytecode fp4patch keeps current."""
        files = {t.file for s in self.specs for t in self.resolve(s).targets if t.file and not t.status}
        return sorted(f for f in files if self.dist.locate(f).is_file())

    def stale_bytecode(self) -> str | None:
        """A one-line problem when a pyc of a file fp4patch patches (:meth:`bytecode_files`) would
        run instead of the file on disk (:func:`fp4patch.engine.bytecode.stale_note`); None when none would. Reads only."""
        from .bytecode import stale_note

        return stale_note(self.dist, self.bytecode_files(), self.command("apply"))

    def changed_since_apply(self) -> list[str]:
        """Site-packages-relative paths of the files fp4patch's record says it patched that now hold
        neither the bytes it wrote nor the original ones (a hand edit, another tool): ``apply`` refuses
        them (:func:`fp4patch.engine.plan.check_apply`) until ``revert --force`` puts the original back. [] when
        there is no record, or it was written for another install or version (an upgrade). Reads only."""
        from .files import sha256

        manifest = self.store.load()
        if manifest is None or manifest.version != str(self.dist.version) or self.stale_record() is not None:
            return []  # no record, or one of another install (an upgrade): its bytes say nothing of these files
        changed = []
        for relative, record in manifest.files.items():
            path = self.dist.locate(relative)
            if path.is_file() and sha256(path.read_bytes()) not in (record.patched_sha256, record.original_sha256):
                changed.append(relative)
        return sorted(changed)

    def stale_record(self) -> str | None:
        """One line when fp4patch's record here was written for another install of the
        distribution (:func:`fp4patch.engine.leftovers.stale_note`); None otherwise. Reads only."""
        from .leftovers import stale_note

        return stale_note(self.store.root, self.advice)

    # ------------------------------------------------------------------ planning
    def plan(self, specs: list[Spec], required: frozenset[str] | set[str] = frozenset(), unchecked: bool = False) -> dict[str, FilePlan]:
        """Transform every file targeted by ``specs`` in memory: site-packages-relative path → its plan.

        The policy for partly covered releases (:func:`fp4patch.engine.selection.planned_targets`): a spec
        declared ``unsupported`` on this release is left out unless it is in ``required`` (named with
        ``--spec``, or every spec with ``--strict``); ``not-needed`` and ``obsolete`` specs need
        nothing. ``unchecked``: plan ``needs-check`` specs as if their CPU check had passed (``diff``
        shows what ``apply`` would write); else they are problems like drift.

        Raises:
            DriftError: a spec is drifted, not targeted at this version, needs a CPU check, or is
                required but unsupported (the message names each, and the ``--skip`` that leaves it
                out); a target file is not valid Python; a result does not compile. Nothing is written.
        """
        reports = {s.id: self.report(s) for s in specs}
        # a spec that takes part was resolved by its report already (the resolution is read again, not the files)
        resolutions = {s.id: self.resolve(s) for s in specs if takes_part(reports[s.id], required)}
        by_file = planned_targets(specs, reports, resolutions, required, unchecked, self.dist, self.advice)
        plans = {rel: plan_file(self.sources, rel, pairs, check=False) for rel, pairs in by_file.items()}
        # every file the apply leaves patched carries the set's stamp (fp4patch.engine.set_stamp), also one patched before
        manifest = self.store.load()
        if manifest is not None and other_install(manifest, self.dist):
            manifest = None  # another install's record: its files are not this install's set
        plans, self.set_token = stamp_set(self.sources, plans, manifest)
        for file_plan in plans.values():  # the bytes to write must compile: the stamp included, as the bytecode checks compile them
            check_result(file_plan.path, file_plan.patched)
        return plans

    def diff(self, specs: list[Spec], required: frozenset[str] | set[str] = frozenset()) -> list[FilePlan]:
        """The files ``apply`` would change, with their new contents (writes nothing). A
        ``needs-check`` spec is shown as ``apply`` would write it once its CPU check passes."""
        return [p for p in self.plan(specs, required, unchecked=True).values() if p.changes]

    # ------------------------------------------------------------------ writing
    def apply(
        self,
        specs: list[Spec],
        allow_modified: bool = False,
        required: frozenset[str] | set[str] = frozenset(),
    ) -> list[FilePlan]:
        """Patch the installed files; returns the plans of the files written.

        Holds the environment's lock, first finishes an operation that was interrupted
        (:func:`fp4patch.engine.recovery.recover`), then checks on CPU every spec in ``needs-check`` (a
        release the catalog does not list whose code differs from the verified one:
        :meth:`check_on_cpu`), then plans, checks and writes through a journal. ``required``: the
        spec ids that must apply even where declared ``unsupported`` (:meth:`plan`). 

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
            # read-only site-packages: fine when everything is applied already, else this error — said before any
            # file is parsed when fp4patch's record shows a write is needed
            self._refuse_unrecorded(specs, required, exc)
            written = self._apply(specs, allow_modified, refuse_writes=exc, required=required)
            self._refresh_stale_bytecode()
            return written
        try:
            recover(self.store, self.dist, self.notify)
            self.check_on_cpu(specs, required)
            written = self._apply(specs, allow_modified, required=required)
            self._refresh_stale_bytecode()
            return written
        finally:
            lock.__exit__(None, None, None)

    def _refuse_unrecorded(self, specs: list[Spec], required: frozenset[str] | set[str], refusal: Exception) -> None:
        """Raise ``refusal`` (the site-packages does not accept writes) unless fp4patch's record shows every selected
        spec applied: recorded by this install's manifest, each file it targets here holding the bytes fp4patch
        wrote. Reads the record, the targets (no parse) and the bytes of the files they name: an apply that would
        have to write is refused before any file is parsed (a read-only image took 21 s to refuse before)."""
        from .files import sha256

        manifest = self.store.load()
        if manifest is None or other_install(manifest, self.dist):
            raise refusal
        for spec in specs:
            targets = [t for t in self.resolve(spec).targets if t.file and not t.status]
            if not targets:
                continue  # declared here (not needed, unsupported): it writes nothing
            if spec.id not in manifest.specs:
                raise refusal
            for target in targets:
                record = manifest.files.get(target.file)
                if record is None:
                    continue  # recorded without a change to this file (not needed or obsolete on this release)
                path = self.dist.locate(target.file)
                if not path.is_file() or sha256(path.read_bytes()) != record.patched_sha256:
                    raise refusal

    def check_on_cpu(self, specs: list[Spec], required: frozenset[str] | set[str] = frozenset()) -> dict[str, Basis]:
        """Check every spec of ``specs`` in ``needs-check`` on CPU (:mod:`fp4patch.checks.cpu_check`) and keep the
        outcome in :attr:`checked`: a ``checked`` basis (apply it), or a ``changed`` one naming what failed (the
        spec is then ``drifted``). Returns the outcomes of this call.

        The distribution's Python sources are copied into a temporary site-packages
        (:func:`fp4patch.checks.cpu_check.copy_sources`), the selection is applied there by an engine of the copy
        (:meth:`_apply_to_copy`), and the probes run in :attr:`target_env` (torch needed there:
        :func:`fp4patch.checks.cpu_check.check`); the installed files are only read.
        """
        if self.catalog.lists(self.dist.version):
            return {}  # a listed release takes its targets by version: none needs a check (and no file is parsed here)
        needs = [s for s in specs if s.id not in self.checked and self.report(s).state == NEEDS_CHECK]
        if not needs:
            return {}
        import tempfile

        from ..checks.cpu_check import announcement, check, copy_sources, not_applied
        from ..target.environment import current

        # the copy gets what would apply with them: not a spec that is drifted, declared or not targeted here
        # (apply refuses those itself, and a user leaves them out with --skip: the check must still answer)
        others = [s for s in specs if s.id not in {n.id for n in needs} and self.report(s).state in (APPLICABLE, APPLIED)]
        resolutions = {s.id: self.resolve(s) for s in needs}
        bases = {spec_id: resolution.basis for spec_id, resolution in resolutions.items()}
        self.notify(announcement(self.dist, needs))
        env = self.target_env or current()
        with tempfile.TemporaryDirectory(prefix="fp4patch-check-") as scratch:
            try:
                site = copy_sources(self.sources, self.specs, Path(scratch) / "site-packages")
                self._apply_to_copy(site, others + needs, bases, required, env)
            except Fp4PatchError as exc:
                outcome = not_applied(bases, exc)
            else:
                outcome = check(needs, resolutions, self.dist, env, site)
        self.checked.update(outcome)
        for spec_id in outcome:
            self._reports.pop(spec_id, None)  # its basis changed: checked, or changed (then drifted)
        return outcome

    def _apply_to_copy(
        self, site: Path, selection: list[Spec], bases: dict[str, Basis], required: frozenset[str] | set[str], env: TargetEnvironment
    ) -> None:
        """Apply ``selection`` to the copy of the distribution in ``site`` (:meth:`check_on_cpu`) with an engine of
        the copy that takes exactly the targets this one took (the ones checked), the specs of ``bases`` (spec id ->
        their ``needs-check`` basis) provisionally checked (:func:`fp4patch.checks.cpu_check.provisional`).

        Raises:
            Fp4PatchError: the selection does not apply to the copy (any error of :meth:`apply`).
        """
        from ..checks.cpu_check import provisional
        from ..target.environment import find_distribution, from_site_packages

        for spec in selection:
            self.resolve(spec)
        copy = Engine(
            find_distribution(from_site_packages(site), self.dist.name), self.specs, lambda message: None, self.catalog, env,
            resolutions=self._resolutions, checked=provisional(bases), evidenced=self.evidenced,
        )
        copy.apply(selection, allow_modified=True, required=required)

    def _apply(
        self, specs: list[Spec], allow_modified: bool, refuse_writes: Exception | None = None, required: frozenset[str] | set[str] = frozenset()
    ) -> list[FilePlan]:
        """The writing part of :meth:`apply` (under the lock, or without one and ``refuse_writes``:
        raised when anything is to be written)."""
        manifest = self._current_manifest()
        check_applied_conflicts(specs, self.specs, manifest, self.advice)
        plans = self.plan(specs, required)
        reinstalled = check_apply(self.dist, plans, manifest, allow_modified, self.notify, self.advice, self.target_python)
        # a spec left out (declared unsupported here, not required) is not recorded: it was not applied
        taken = [s for s in specs if not left_out(self.report(s), required)]
        request = ApplyRequest(
            plans=plans, manifest=manifest, reinstalled=reinstalled, requested=sorted({s.id for s in specs}),
            taken={s.id: self.resolve(s).basis for s in taken}, set_token=self.set_token,
        )
        change = apply_change(self.dist, self.store, request)
        if change is None:
            return []
        if refuse_writes is not None:
            raise refuse_writes
        change.check_writable(self.store)
        run(self.store, self.dist, change.journal, change.undo, change.previous)
        written = [p for p in plans.values() if p.changes]
        self._reports.clear()  # the files changed: every report is read again (from the seeded trees below)
        for plan in written:  # the reports after it read these trees instead of parsing again
            if plan.module is not None:
                self.sources.seed(plan.path, plan.patched, plan.module, plan.appended)
        return written

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
        """The writing part of :meth:`revert` (under the lock)."""
        manifest = self.store.load()
        if manifest is None:
            return []
        if other_install(manifest, self.dist):
            self._discard_other_install(manifest, force)
            return []
        removing = removed_specs(manifest, ids)
        remaining = [s for s in self.specs if s.id in set(manifest.specs) - removing]
        kept: dict[str, list[tuple[Spec, Target]]] = {}  # file -> the (spec, target) pairs of the specs that stay
        for spec in remaining:
            for target in self.resolve(spec).targets:
                kept.setdefault(target.file, []).append((spec, target))
        change, touched = revert_change(self.sources, manifest, removing, remaining, kept, force, self.notify, self.dropped)
        change.check_writable(self.store)
        run(self.store, self.dist, change.journal, change.undo, change.previous)
        self._reports.clear()  # the files changed: every report is read again
        return touched

    # ------------------------------------------------------------------ the lock, bytecode, another install's record
    def _locked(self):
        return environment_lock(
            self.store.lock_path,
            f"{self.dist.name} in {self.dist.site_packages}",
            self.notify,
            remove_when=lambda: True,
        )

    def _refresh_stale_bytecode(self) -> None:
        """Rewrite (or remove) bytecode that would run instead of a target file
        (:func:`fp4patch.engine.bytecode.refresh_stale`); says which on ``notify``.

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
            self._reports.clear()
            return None
        return manifest

    def _discard_other_install(self, manifest: Manifest, force: bool) -> None:
        """``revert`` of a record written for another install: refused, or with ``force``
        discarded (no file restored), saying so.

        Raises:
            FileSystemError: without ``force``; the message names both commands that remove it.
        """
        installed = str(self.dist.version)
        now = f"{installed} is installed" if manifest.version != installed else f"{installed} was reinstalled since (its RECORD differs)"
        if not force:
            raise FileSystemError(
                f"{self.store.path}: the backups are for {self.dist.name} {manifest.version} but {now}"
                f"{' (upgraded or reinstalled)' if manifest.version != installed else ''}; not restoring them — `{self.command('revert', '--force')}` discards that record, "
                f"`{self.command('apply')}` replaces it"
            )
        self.notify(f"discarded fp4patch's record of {self.dist.name} {manifest.version} ({now}); no file restored")
        self.store.remove()


def _stderr(message: str) -> None:
    sys.stderr.write(f"fp4patch: {message}\n")
    sys.stderr.flush()
