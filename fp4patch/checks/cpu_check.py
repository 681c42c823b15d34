"""Check, on CPU, a target whose code differs from every release it was verified on (``needs-check``).

On a release the catalog does not list, a spec whose code differs from its verified evidence but
whose wrapper keeps the verified signature (:mod:`fp4patch.catalog.evidence`) is applied only after this
check, in a throw-away copy, never in the user's site-packages:

1. the distribution's Python sources (every ``.py`` of the packages the specs patch) and its
   ``.dist-info`` are copied into a temporary site-packages (:func:`copy_sources`), and the selection is
   applied there, the specs to check as if they had passed (:func:`provisional`);
2. in the target interpreter (``--python``; torch needed there, a CPU build is enough), with that
   copy first on ``sys.path``:

   * the fake of each custom op is compared with the wrapper's own output allocation over the op's
     case grid (``patches/<distribution>/grids/<function>.py``; :mod:`fp4patch.checks.fake_check`): the
     wrapper runs eagerly on fake CUDA tensors with only the kernel launch replaced, the op's entry
     runs into its fake; every output's shape, stride and dtype (or the error raised) must be equal;
   * every function the spec makes traceable compiles with ``torch.compile(fullgraph=True)`` as one
     graph (the scan's call, :mod:`fp4patch.checks.trace`), and for ``fp4-quantize-fullgraph`` every case
     of the trace probe passes.

Outputs the C++ launcher allocates (the TRT-LLM-Gen MoE's ``do_finalize=False`` outputs) come back
``not_visible``: the CPU cannot see them. Where the target's ``mirrors`` name the code that makes them —
the launcher's allocation and return statements (``path.cu:Class.method[names]``, :mod:`fp4patch.catalog.native`)
and the Python statements that allocate the buffers the kernel returns and return its result
(``qualname[names]``, :func:`fp4patch.catalog.fingerprint.statements_naming`) — and every such piece equals the
verified release's, that equality stands for them ("the outputs the C++ launcher allocates as verified on
0.6.x", the basis's ``launcher``) and the rest of the function is checked as above; where a piece differs,
the spec is refused naming the file and the function; so is a function none of whose cases the CPU could
see (the FP8 MoE before 0.6.5, whose launcher allocates every output). A not-visible case in which the fake raises
FlashInfer's kind of error while the wrapper returns (past the kernel) is a refusal the release no longer
makes: no evidence stands for it.

A spec passes when all of that holds: its basis becomes ``checked`` ("checked on CPU for 0.7.5").
Otherwise it becomes ``changed``, naming the case and output that differ, the function that does not
compile, or why it cannot be checked (no case grid for the function, outputs the kernel allocates,
which the CPU cannot see); ``apply`` then refuses it like drift. When the check cannot run at all (no
torch in the target interpreter) the spec stays ``needs-check``, its basis saying why and what to pass
(``unchecked``), and ``apply`` refuses it as ``needs-check``: the word ``status`` uses too.

The engine orders the steps (:meth:`fp4patch.engine.Engine.check_on_cpu`: it resolves the specs, copies, applies
the copy with an engine of its own, and keeps the outcome); this module takes values — the specs, their
resolutions, the distribution, the interpreter, the copy — and returns the new bases. It never sees an engine.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..catalog.releases import is_source
from ..errors import EnvironmentProblem, Fp4PatchError

if TYPE_CHECKING:
    from ..catalog.evidence import Basis, Resolution
    from ..catalog.spec import Spec
    from ..engine.sources import Sources
    from ..target.environment import InstalledDistribution, TargetEnvironment

#: The spec whose functions the trace probe (``trace_probe.py``, 33 fp4_quantize cases) also checks.
TRACED_SPEC = "fp4-quantize-fullgraph"


def announcement(dist: InstalledDistribution, needs: list[Spec]) -> str:
    """The note :meth:`fp4patch.engine.Engine.check_on_cpu` gives before checking ``needs``: what is checked, and
    where. Never raises.

    Args:
        dist (InstalledDistribution): the installed distribution (its name and version are named).
        needs (list[Spec]): the specs in ``needs-check`` on it.
    """
    names = ", ".join(s.id for s in needs)
    return (
        f"{dist.name} {dist.version} is not a release fp4patch was verified on and the code of {names} differs from it; "
        "checking it on CPU in a temporary copy (the fake against the wrapper's own allocation, the fullgraph trace)"
    )


def copy_sources(sources: Sources, specs: Iterable[Spec], destination: Path) -> Path:
    """Copy the sources of every top-level package ``specs`` patch (``flashinfer/``: what
    :func:`fp4patch.catalog.releases.is_source` keeps, as released: :meth:`fp4patch.engine.sources.Sources.released_bytes`,
    fp4patch's backups of files it patched) and the metadata folder
    of ``sources.dist`` into ``destination``; returns ``destination`` (a site-packages).

    Args:
        sources (Sources): the installed files of the distribution, as this command reads them.
        specs (Iterable[Spec]): every spec of the distribution (their targets name the packages).
        destination (Path): the folder to fill (made if missing).

    Raises:
        FileSystemError: a file cannot be read.
    """
    dist = sources.dist
    site = dist.site_packages
    packages = sorted({Path(t.file).parts[0] for s in specs for t in s.targets if t.file})
    destination.mkdir(parents=True, exist_ok=True)
    for package in packages:
        root = site / package
        if not root.is_dir():
            continue
        for path in root.rglob("*"):
            relative = path.relative_to(site).as_posix()
            if not is_source(relative) or "__pycache__" in path.parts or not path.is_file():
                continue
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            data = sources.released_bytes(relative)
            target.write_bytes(data if data is not None else path.read_bytes())
    info = Path(str(getattr(dist.dist, "_path", "") or ""))
    if info.is_dir():
        shutil.copytree(info, destination / info.name, dirs_exist_ok=True)
    return destination


def provisional(bases: Mapping[str, Basis]) -> dict[str, Basis]:
    """spec id -> its basis from ``bases`` (``Mapping[str, Basis]``: spec id -> the ``needs-check`` basis) made
    ``checked``: what the copy is applied with, so that the specs to check take part there as if their check had
    passed. Never raises."""
    from dataclasses import replace

    from ..catalog.evidence import CHECKED

    return {spec_id: replace(basis, kind=CHECKED) for spec_id, basis in bases.items()}


def failed(basis: Basis, reason: str) -> Basis:
    """``basis`` (:class:`~fp4patch.catalog.evidence.Basis`, a ``needs-check`` one) made ``changed``: where the code
    differs, and that the CPU check failed for ``reason`` (str). ``apply`` then refuses the spec like drift. Never
    raises."""
    from dataclasses import replace

    from ..catalog.evidence import CHANGED

    where = f"the code differs in {', '.join(basis.changes[:3])}" if basis.changes else "the code differs"
    return replace(basis, kind=CHANGED, changes=(f"{where}, and the CPU check failed: {reason}",))


def not_applied(bases: Mapping[str, Basis], error: Fp4PatchError) -> dict[str, Basis]:
    """spec id -> its ``changed`` basis when the selection did not apply to the copy. Never raises.

    Args:
        bases (Mapping[str, Basis]): spec id -> the ``needs-check`` basis of each spec checked.
        error (Fp4PatchError): what the copy's ``apply``, or :func:`copy_sources`, raised.
    """
    return {spec_id: failed(basis, f"the selection does not apply to a copy ({error})") for spec_id, basis in bases.items()}


def check(
    needs: list[Spec], resolutions: Mapping[str, Resolution], dist: InstalledDistribution, env: TargetEnvironment, site: Path
) -> dict[str, Basis]:
    """Check each spec of ``needs`` on CPU in ``site``, a temporary site-packages the selection is applied to
    already (:func:`copy_sources`, then the engine's apply of the copy with :func:`provisional` bases); returns
    spec id -> its new basis: ``checked``, or ``changed`` with the reason, or still ``needs-check`` with
    ``unchecked`` saying why the check could not run and what to pass.

    Args:
        needs (list[Spec]): the specs in ``needs-check`` on the installed release.
        resolutions (Mapping[str, Resolution]): spec id -> the resolution of each spec of ``needs`` on the
            installed release (their targets and ``needs-check`` basis: :meth:`fp4patch.engine.Engine.resolve`).
        dist (InstalledDistribution): the installed distribution (its C++ launcher sources are read where the
            copy lacks them).
        env (TargetEnvironment): the interpreter that runs the probes (torch needed there; a CPU build is enough).
        site (Path): the applied copy.

    Never raises for a failed check or a probe that cannot run (that is a ``changed`` basis naming the reason);
    the installed files are only read.
    """
    from dataclasses import replace

    from ..catalog.evidence import CHECKED

    bases = {s.id: resolutions[s.id].basis for s in needs}
    launcher: dict[str, list[str]] = {}
    try:
        problems = _fake_problems(needs, resolutions, dist, env, site, launcher)
    except _NotRunHere as exc:
        # not a finding: the spec stays needs-check (status, apply and verify say so alike), with what to do
        return {
            s.id: replace(bases[s.id], unchecked=(
                f"the CPU check could not run in {env.python} ({exc}); pass `--python PATH`, an interpreter with torch (a CPU "
                f"build is enough; with --site-packages it checks that directory), or leave the spec out with `--skip {s.id}`"
            ))
            for s in needs
        }
    problems = _merge(problems, _trace_problems(needs, env, site))
    outcome: dict[str, Basis] = {}
    for spec in needs:
        found = problems.get(spec.id, [])
        outcome[spec.id] = failed(bases[spec.id], "; ".join(found[:3])) if found else replace(bases[spec.id], kind=CHECKED, launcher=tuple(launcher.get(spec.id, ())))
    return outcome


class _NotRunHere(Exception):
    """The fake check cannot run in the target interpreter (no torch there): say so, not "it failed"."""


def _merge(a: dict[str, list[str]], b: dict[str, list[str]]) -> dict[str, list[str]]:
    return {k: [*a.get(k, []), *b.get(k, [])] for k in {*a, *b}}


def unseen_pieces(target) -> list[str]:
    """The pieces of ``target``'s ``mirrors`` that say how the outputs the CPU check cannot see are made: those with a
    statement selection (``path.cu:Class.method[names]`` in the C++ launcher, ``qualname[names]`` in Python: the
    allocation of the buffers the kernel returns and what is returned; :func:`fp4patch.catalog.fingerprint.is_selection`)."""
    from ..catalog.fingerprint import is_selection, target_pieces

    return [p for p in target_pieces(target) if is_selection(p)]


def launcher_evidence(basis: Basis, target) -> tuple[list[str], list[str]]:
    """``(same, differs)``: the pieces of :func:`unseen_pieces` whose code equals the verified release's
    (``basis.release``: not among ``basis.changes``), and those that differ (a piece missing on one side only
    differs; missing on both is the same code: a method neither release defines)."""
    pieces = unseen_pieces(target)
    differs = [p for p in pieces if p in basis.changes]
    return [p for p in pieces if p not in differs], differs


def _absent_files(dist: InstalledDistribution, pieces: list[str]) -> list[str]:
    """The files (site-packages-relative) of ``pieces`` that ``dist`` does not hold: a piece of an absent file reads
    as differing (:func:`launcher_evidence`), which is true but says nothing of why."""
    from ..catalog.fingerprint import split_piece

    files = dict.fromkeys(split_piece(piece, "")[0] for piece in pieces)
    return [f for f in files if not dist.locate(f).is_file()]


def _launcher_note(pieces: list[str]) -> str:
    """``file: A.b[x], c[return]`` for pieces of one or more files."""
    from ..catalog.fingerprint import split_piece

    by_file: dict[str, list[str]] = {}
    for piece in pieces:
        file, qualname = split_piece(piece, "")
        by_file.setdefault(file, []).append(qualname)
    return "; ".join(f"{file}: {', '.join(names)}" for file, names in by_file.items())


def _fake_problems(
    needs: list[Spec], resolutions: Mapping[str, Resolution], dist: InstalledDistribution, env, site: Path, launcher: dict[str, list[str]] | None = None
) -> dict[str, list[str]]:
    """spec id -> what the fake check found wrong for its custom ops (empty lists when fine); ``resolutions``, ``dist``
    as :func:`check` takes them. A function whose
    only finding is outputs the C++ launcher allocates passes where its target's launcher pieces all equal the
    verified release's (:func:`launcher_evidence`); those pieces go into ``launcher`` (spec id -> piece names)."""
    from .fake_check import requests_for, run_fake_check

    problems: dict[str, list[str]] = {s.id: [] for s in needs}
    owners: dict[str, str] = {}
    targets: dict[str, object] = {}
    requests = []
    for spec in needs:
        for target in resolutions[spec.id].targets:
            if target.status:
                continue
            kinds = [kind for kind, _ in target.operation_specs]
            if "custom-op" not in kinds:
                problems[spec.id].append(f"no CPU check exists for a {'/'.join(dict.fromkeys(kinds))} operation; re-verify the spec on this release")
                continue
            for request in requests_for(spec, target):
                if not request.grid.is_file():
                    problems[spec.id].append(f"no case grid for {request.function} ({request.grid.name}), so its fake cannot be checked")
                    continue
                owners[request.function] = spec.id
                targets[request.function] = target
                requests.append(request)
    if not requests:
        return problems
    try:
        results = run_fake_check(env, site, requests)
    except EnvironmentProblem as exc:  # no torch there: the check did not run, which is not a finding
        raise _NotRunHere(str(exc)) from exc
    except Fp4PatchError as exc:
        for request in requests:
            problems[owners[request.function]].append(f"the fake check could not run ({exc})")
        return problems
    for function, result in results.items():
        if result.ok:
            continue
        spec_id = owners[function]
        only_unseen = result.not_visible and not (result.error or result.failures or result.unchecked or result.fake_raised)
        if result.fake_raised and not (result.error or result.failures or result.unchecked):
            problems[spec_id].append(
                f"{function}: the fake refuses {result.fake_raised[0]!r} where the wrapper returns past the kernel "
                f"({len(result.fake_raised)} case(s); the outputs of such calls come from the kernel, which the CPU cannot see)"
            )
            continue
        seen = result.compared - len(result.not_visible)
        if only_unseen and seen < 1:  # nothing of the call was seen on CPU: no evidence can stand for all of it
            problems[spec_id].append(f"{function}: {result.summary()}, and no case of it could be seen on CPU")
            continue
        if only_unseen:
            basis = resolutions[spec_id].basis
            same, differs = launcher_evidence(basis, targets[function]) if basis is not None else ([], [])
            if same and not differs:
                if launcher is not None:
                    launcher.setdefault(spec_id, []).extend(p for p in same if p not in launcher.get(spec_id, []))
                continue
            if differs:
                missing = _absent_files(dist, differs)
                changed = (
                    f"the file that allocates them is missing from this install: {', '.join(missing)} (FlashInfer's wheels "
                    f"ship the C++ launcher's sources; reinstall flashinfer-python, or leave the spec out with --skip {spec_id})"
                    if missing else f"the code that allocates them changed since {basis.release}: {_launcher_note(differs)}"
                )
                problems[spec_id].append(f"{function}: {result.summary()}, and {changed}")
                continue
        problems[spec_id].append(f"{function}: {result.summary()}")
    return problems


def _trace_problems(needs: list[Spec], env, site: Path) -> dict[str, list[str]]:
    """spec id -> the functions it makes traceable that do not compile as one graph (and, for
    ``fp4-quantize-fullgraph``, the trace probe's failing cases)."""
    from .trace import entries_for_specs, run_probe, run_scan, scan_entries

    problems: dict[str, list[str]] = {s.id: [] for s in needs}
    ids = {s.id for s in needs}
    names = entries_for_specs(ids)
    owner = {e["name"]: e["spec"] for e in scan_entries()}
    try:
        if names:
            for result in run_scan(env, site, only=names)["results"]:
                if not result.get("passed"):
                    problems[owner[result["name"]]].append(f"{result['name']} does not compile as one graph ({result.get('error') or result['status']})")
        if TRACED_SPEC in ids:
            cases = run_probe(env, site)
            bad = [c for c in cases if not c.get("passed")]
            if bad or not cases:
                first = bad[0] if bad else {"name": "no case", "error": "the trace probe ran no case"}
                problems[TRACED_SPEC].append(f"trace probe {len(cases) - len(bad)}/{len(cases)} cases (first failure {first['name']}: {first.get('error') or 'layout differs'})")
    except Fp4PatchError as exc:
        for spec_id in ids:
            problems[spec_id].append(f"the fullgraph trace could not run ({exc})")
    return problems
