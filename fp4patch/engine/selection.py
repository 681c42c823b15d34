"""Which specs, and which of their targets, take part in a command; reads only.

- :func:`select_specs`: the ids given (``--spec``; default: the specs marked ``default``), what they
  ``require``, less ``--skip``; two selected specs that ``conflict`` are refused
  (:func:`check_conflicts`), and so is one that conflicts with a spec already applied
  (:func:`check_applied_conflicts`).
- :func:`recorded_resolution`: the targets a spec applied here keeps — the ones its recorded
  ``basis`` in the manifest names — where the evidence (:func:`fp4patch.catalog.evidence.resolve`) can no
  longer answer (the files hold the patched code, which no fingerprint of a release matches).
- :func:`planned_targets`: the policy for a partly covered release, ``--skip`` and ``--strict``:
  which reports ``apply`` and ``diff`` plan (:func:`takes_part`), which they leave out (:func:`left_out`)
  and which they refuse, with the ``--skip`` command that leaves those out.

Every function takes values — specs, reports, resolutions, the manifest, an :class:`~fp4patch.engine.advice.Advice`
that words the commands a message advises — and returns values or raises; none calls back into the engine.
- :func:`removed_specs`: what ``revert --spec`` removes, refusing a spec that is not applied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..errors import DriftError, FileSystemError, UsageError
from ..states import DRIFTED, NEEDS_CHECK, NOT_NEEDED, NOT_TARGETED, OBSOLETE, UNSUPPORTED
from .install_record import other_install

if TYPE_CHECKING:
    from ..catalog.evidence import Resolution
    from ..catalog.spec import Spec, Target
    from ..target.environment import InstalledDistribution
    from .advice import Advice
    from .manifest import Manifest, ManifestStore
    from .report import SpecReport


def select_specs(specs: list[Spec], ids: list[str] | None, skip: list[str] | None = None) -> list[Spec]:
    """The specs named by ``ids`` (default: those marked ``default``), plus what they require,
    without those named by ``skip`` (``--skip``: leave a spec out by name, e.g. one that does not
    apply to the installed release).

    Raises:
        UsageError: an unknown id (in ``ids`` or ``skip``), two selected specs that conflict, or a
            skipped spec that a selected one requires.
    """
    by_id = {s.id: s for s in specs}
    check_known([*(ids or []), *(skip or [])], list(by_id))
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
    for left_out_id in skip or []:
        needing = [i for i in chosen if left_out_id in by_id[i].requires and i not in (skip or [])]
        if needing:
            raise UsageError(f"--skip {left_out_id}: {needing[0]!r} requires it; skip that one too, or keep {left_out_id!r}")
    chosen = [i for i in chosen if i not in (skip or [])]
    check_conflicts([by_id[i] for i in chosen], set(chosen))
    return [by_id[i] for i in sorted(chosen)]


def check_known(ids: list[str], known: list[str]) -> None:
    """Refuse the first of ``ids`` (spec ids as given) that is not in ``known`` (every loaded spec's id), with the
    known id it most likely means: the same one in another case (spec ids are lower case), else the closest
    spelling (:func:`difflib.get_close_matches`). Every command that takes ``--spec`` or ``--skip`` says the same.

    Raises:
        UsageError: ``unknown spec 'x'; did you mean 'y'?``, and where the known ids are listed.
    """
    unknown = [i for i in ids if i not in known]
    if not unknown:
        return
    name = unknown[0]
    close, same = closest_spelling(name, known)
    hint = f"did you mean {close!r}{' (spec ids are lower case)' if same else ''}? " if close else ""
    raise UsageError(f"unknown spec {name!r}; {hint}`fp4patch status` lists the {len(known)} known specs")


def closest_spelling(name: str, known: list[str], normal: Callable[[str], str] = str.lower) -> tuple[str | None, bool]:
    """The name of ``known`` that ``name`` (which names none) most likely means, and whether it is the same name once
    both are ``normal``-ised (case; ``-``/``_`` for scan entries): the first such name, else the closest spelling
    among the normalised names (:func:`difflib.get_close_matches`, cutoff 0.6), else ``(None, False)``. Shared by
    ``--spec``/``--skip`` (:func:`check_known`) and ``scan --function``."""
    import difflib

    by_normal: dict[str, str] = {}
    for candidate in known:
        by_normal.setdefault(normal(candidate), candidate)
    if normal(name) in by_normal:
        return by_normal[normal(name)], True
    close = difflib.get_close_matches(normal(name), list(by_normal), n=1, cutoff=0.6)
    return (by_normal[close[0]], False) if close else (None, False)


def check_conflicts(selected: list[Spec], present: set[str], where: str = "selected together") -> None:
    """Raise :class:`UsageError` when a spec in ``selected`` conflicts with an id in ``present``."""
    for spec in selected:
        for other in spec.conflicts:
            if other in present:
                raise UsageError(f"spec {spec.id!r} conflicts with {other!r} ({where}); choose one with --spec")


def check_applied_conflicts(specs: list[Spec], known: list[Spec], manifest: Manifest | None, advice: Advice) -> None:
    """Refuse applying ``specs`` next to a spec the ``manifest`` records as applied that conflicts
    with one of them (either side may declare it).

    Args:
        specs (list[Spec]): the specs to apply.
        known (list[Spec]): every spec of the distribution.
        manifest (Manifest | None): this install's record (None: nothing applied).
        advice (Advice): words the ``revert`` the message advises (:class:`fp4patch.engine.advice.Advice`: the options
            the command was given).

    Raises:
        UsageError: a conflict with an applied spec.
    """
    if not manifest:
        return
    applied = [s for s in known if s.id in manifest.specs]
    requested = {s.id for s in specs}
    for spec in specs:
        for other in set(spec.conflicts) & set(manifest.specs):
            raise UsageError(f"spec {spec.id!r} conflicts with {other!r}, which is applied; run `{advice.command('revert', '--spec', other)}` first")
    for spec in applied:
        for other in set(spec.conflicts) & requested:
            raise UsageError(f"spec {other!r} conflicts with {spec.id!r}, which is applied; run `{advice.command('revert', '--spec', spec.id)}` first")


def recorded_resolution(spec: Spec, store: ManifestStore, dist: InstalledDistribution) -> Resolution | None:
    """The targets ``spec`` took when it was applied to this install, with the basis recorded then
    (the manifest's ``basis``, e.g. "as verified on 0.7.4, same code"); None when the manifest of
    this install (:func:`fp4patch.engine.install_record.other_install`) records none for it, cannot be
    read, or names no target the spec still has."""
    from ..catalog.evidence import Basis, Resolution

    try:
        manifest = store.load()
    except FileSystemError:
        return None
    if manifest is None or spec.id not in manifest.basis or other_install(manifest, dist):
        return None
    basis = Basis.from_json(manifest.basis[spec.id])
    wanted = set(basis.target.split("; "))
    targets = [placed(t, basis) for t in spec.targets if str(t.versions) in wanted]
    return Resolution(targets, basis) if targets else None


def placed(target: Target, basis) -> Target:
    """``target`` as a recorded :class:`~fp4patch.catalog.evidence.Basis` applied it: at the file the function moved to
    (``basis.moved``), carrying the parameters the release added (``basis.carried``,
    :func:`fp4patch.catalog.evidence.carried_target`); ``target`` itself when the basis records neither."""
    from dataclasses import replace

    from ..catalog.evidence import carried_target

    if target.status:
        return target
    if basis.moved and target.file == basis.moved[0]:
        target = replace(target, file=basis.moved[1], _operations=None)
    return carried_target(target, basis.carried, basis.version, basis.release)


def left_out(report: SpecReport, required: frozenset[str] | set[str]) -> bool:
    """True for a spec declared ``unsupported`` on this release and not ``required`` (named with
    ``--spec``, or every spec with ``--strict``): ``apply`` leaves it out, lists it with its
    reason and does not record it (:func:`fp4patch.states.accepted`)."""
    return report.state == UNSUPPORTED and report.spec.id not in required


def takes_part(report: SpecReport, required: frozenset[str] | set[str]) -> bool:
    """Whether the spec of ``report`` (:class:`~fp4patch.engine.report.SpecReport`) takes part in a plan
    (:func:`planned_targets`): not ``obsolete`` or ``not-needed`` (nothing to do) and not :func:`left_out`
    (``required``: the spec ids that must apply). Its resolution is needed only then. Never raises."""
    return report.state not in (OBSOLETE, NOT_NEEDED) and not left_out(report, required)


def planned_targets(
    specs: list[Spec],
    reports: Mapping[str, SpecReport],
    resolutions: Mapping[str, Resolution],
    required: frozenset[str] | set[str],
    unchecked: bool,
    dist: InstalledDistribution,
    advice: Advice,
) -> dict[str, list[tuple[Spec, Target]]]:
    """Site-packages-relative file → the ``(spec, target)`` pairs that patch it, for every spec of
    ``specs`` that :func:`takes_part`. ``unchecked``: a ``needs-check`` spec takes part as if its CPU
    check had passed (``diff``); else it is refused like drift.

    Args:
        specs (list[Spec]): the selected specs, in order.
        reports (Mapping[str, SpecReport]): spec id -> its report on the installed files
            (:meth:`fp4patch.engine.Engine.report`), for every spec of ``specs``.
        resolutions (Mapping[str, Resolution]): spec id -> the targets it takes here
            (:meth:`fp4patch.engine.Engine.resolve`), for every spec of ``specs`` that :func:`takes_part`
            (others may be missing).
        required (frozenset[str] | set[str]): the spec ids that must apply even where declared ``unsupported``
            (``--spec``, ``--strict``).
        unchecked (bool): plan ``needs-check`` specs (``diff``) instead of refusing them.
        dist (InstalledDistribution): the installed distribution (named in the message).
        advice (Advice): words the ``--skip`` commands the message advises (:class:`fp4patch.engine.advice.Advice`).

    Raises:
        DriftError: a spec is drifted, not targeted at this version, needs a CPU check, or is
            required but unsupported; nothing is written. The message names each, and the
            ``--skip`` command that leaves them out.
        KeyError: a spec of ``specs`` without its report, or one that takes part without its resolution.
    """
    problems, skippable, changed = [], [], False
    by_file: dict[str, list[tuple[Spec, Target]]] = {}
    for spec in specs:
        state = reports[spec.id]
        if not takes_part(state, required):
            continue  # nothing to do, or left out: listed with its reason by apply and verify
        if state.state in (DRIFTED, UNSUPPORTED) or (state.state == NEEDS_CHECK and not unchecked):
            problems.append(f"{spec.id}: {state.state}: {state.detail}")
            skippable.append(spec.id)
            changed = changed or (state.basis is not None and state.basis.kind in ("changed", "needs-check"))
        elif state.state == NOT_TARGETED:
            problems.append(f"{spec.id}: no target for {dist.name} {dist.version}")
            skippable.append(spec.id)
        for target in resolutions[spec.id].targets:
            if not target.status:
                by_file.setdefault(target.file, []).append((spec, target))
    if problems:
        words = [w for i in skippable for w in ("--skip", i)]
        skip = advice.command("apply", *words)
        raise DriftError(
            f"{dist.name} {dist.version}: " + "; ".join(problems)
            + f" — nothing written; `{skip}` leaves {'it' if len(skippable) == 1 else 'them'} out, and `{advice.command('verify', *words)}` "
            + "checks the rest"
            + (f" (`{advice.command('verify', '--show-changes')}` shows what changed)" if changed else "")
        )
    return by_file


def removed_specs(manifest: Manifest, ids: list[str] | None) -> set[str]:
    """The spec ids ``revert`` removes: ``ids`` (``--spec``), or every spec ``manifest`` records.

    Raises:
        UsageError: an id the manifest does not record; the message lists the applied specs (and
            those recorded that changed no file, not needed on this release).
    """
    removing = set(manifest.specs if not ids else ids)
    unknown = removing - set(manifest.specs)
    if unknown:
        # a recorded spec that changed no file (not needed on this release) is not called applied
        applied = manifest.applied_specs()
        idle = [s for s in manifest.specs if s not in applied]
        listed = f"applied: {', '.join(applied) or 'none'}" if len(applied) <= 3 else f"{len(applied)} specs applied"
        raise UsageError(
            f"spec {min(unknown)!r} is not applied here ({listed}"
            f"{'; ' + str(len(idle)) + ' recorded that changed no file' if idle else ''}); `fp4patch status` lists them"
        )
    return removing
