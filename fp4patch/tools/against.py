"""``fp4patch verify --against``: will our patches still apply to a release we are about to move to?

The release (``flashinfer-python==X`` from the registry, or a local ``--wheel``/``--sdist``
file) is unpacked into a temporary directory, never into an environment. There:

1. each selected spec is checked on the pristine files (``applicable`` counts as ok, like
   ``verify --applicable``: the release is not patched yet);
2. the specs that are applicable are applied to the temporary copy, which proves the planned
   result parses and compiles, and checked again (they must now be ``applied``);
3. with ``--trace`` and a wheel, the CPU trace probe runs in this interpreter (or ``--python``)
   with the temporary copy first on its ``sys.path`` (the probe's ``--path``), then the scan's call of
   every function whose fullgraph spec was applied (``trace_functions``; each must compile as one
   graph). An sdist is not traced: before 0.5.0 only
   sdists exist, and their compiled parts need a CUDA toolchain; the report says so.

The release is also looked up in the catalog (:mod:`fp4patch.catalog`): the report says
plainly when it is newer than every known release. The temporary directory is removed at the end.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..catalog.catalog_file import Catalog, load_catalog
from ..catalog.releases import fetch, unpack
from ..catalog.spec import Spec
from ..engine.coordinator import APPLICABLE, APPLIED, NEEDS_CHECK, Engine, SpecReport
from ..errors import DriftError, UsageError
from ..states import accepted
from ..target.environment import TargetEnvironment, current, find_distribution, from_site_packages

SDIST_TRACE_SKIPPED = "not traced: an sdist (its compiled parts need a CUDA toolchain; wheels exist from 0.5.0)"


@dataclass
class AgainstReport:
    """What ``verify --against`` found; plain data for the CLI."""

    source: str
    archive: Path
    kind: str  # "wheel" or "sdist"
    distribution: str
    version: str
    catalog: str  # "known", "newer" or "unknown"
    catalog_message: str
    pristine: list[SpecReport]
    after_apply: list[SpecReport] = field(default_factory=list)
    apply_error: str = ""
    trace: list[dict[str, Any]] | None = None
    trace_note: str = ""
    trace_functions: list[dict[str, Any]] | None = None
    #: spec ids that must apply even where declared unsupported (``--spec``, ``--strict``)
    required: frozenset[str] = frozenset()

    def _ok(self, report: SpecReport, also: frozenset[str] = frozenset()) -> bool:
        return report.state in also or accepted(report.state, report.spec.id in self.required)

    @property
    def static_ok(self) -> bool:
        if self.apply_error or not all(self._ok(r, frozenset({APPLICABLE, NEEDS_CHECK})) for r in self.pristine):
            return False
        return all(self._ok(r) for r in self.after_apply)

    @property
    def ok(self) -> bool:
        trace_ok = self.trace is None or (bool(self.trace) and all(c.get("passed") for c in self.trace))
        functions_ok = all(r.get("passed") for r in self.trace_functions or [])
        return self.static_ok and trace_ok and functions_ok

    @property
    def drifted(self) -> list[str]:
        """One line per spec that would not apply: ``id: state: detail``."""
        also = frozenset({APPLICABLE, NEEDS_CHECK})
        lines = [f"{r.spec.id}: {r.state}: {r.detail}".rstrip(": ") for r in self.pristine if not self._ok(r, also)]
        if self.apply_error:
            lines.append(f"apply: {self.apply_error}")
        failed = {r.spec.id for r in self.pristine if not self._ok(r, also)}
        lines += [
            f"{r.spec.id}: after apply: {r.state}: {r.detail}".rstrip(": ")
            for r in self.after_apply
            if not self._ok(r) and r.spec.id not in failed
        ]
        return lines


def resolve_archive(
    requirement: str | None, wheel: Path | None, sdist: Path | None, distribution: str, catalog: Catalog | None = None
) -> tuple[str, Path]:
    """``(source, archive)`` from exactly one of the three options; downloads into the cache.

    ``catalog``: the release catalog of ``distribution`` (:func:`fp4patch.catalog.load_catalog`); a final
    version inside its range that it does not list was never released, which is said before any download.

    Raises:
        UsageError: none or several given, not ``NAME==VERSION``, another distribution, a version
            the catalog knows was never released, a file of the wrong kind or missing.
        EnvironmentProblem: the registry has no such release.
    """
    given = [x for x in (requirement, wheel, sdist) if x]
    if len(given) != 1:
        raise UsageError("give one of --against NAME==VERSION, --wheel FILE, --sdist FILE")
    if requirement:
        try:
            req = Requirement(requirement)
        except InvalidRequirement:
            raise UsageError(f"--against {requirement!r}: expected {distribution}==VERSION") from None
        pins = [s for s in req.specifier if s.operator == "=="]
        if len(pins) != 1 or len(req.specifier) != 1 or "*" in pins[0].version:
            raise UsageError(f"--against {requirement!r}: pin one exact version, e.g. {distribution}==0.7.4")
        if canonicalize_name(req.name) != distribution:
            raise UsageError(f"--against {requirement!r}: the selected specs patch {distribution}")
        if catalog is not None:
            _check_released(requirement, pins[0].version, catalog)
        return requirement, fetch(distribution, pins[0].version)
    path = Path(wheel or sdist)  # type: ignore[arg-type]
    expected = ".whl" if wheel else ".tar.gz"
    if not path.name.endswith(expected):
        raise UsageError(f"{path}: {'--wheel' if wheel else '--sdist'} needs a {expected} file")
    if not path.is_file():
        raise UsageError(f"{path}: file not found")
    return str(path), path.resolve()


def _check_released(requirement: str, version: str, catalog: Catalog) -> None:
    """Refuse a final version between the catalog's first and latest release that it does not list: the
    catalog holds every release on the registry up to its latest (``make compat``), so it was never published.
    A pre-release, a development or local version, or one newer than the catalog is left to the download.

    Raises:
        UsageError: naming the releases around it.
    """
    from packaging.version import InvalidVersion, Version

    try:
        wanted = Version(version)
    except InvalidVersion:
        raise UsageError(f"--against {requirement!r}: {version!r} is not a version (PEP 440), e.g. {catalog.latest.version}") from None
    first, latest = catalog.releases[0].version, catalog.latest.version
    if wanted.is_prerelease or wanted.is_devrelease or wanted.local or not first <= wanted <= latest or catalog.lists(wanted):
        return
    below = catalog.nearest(wanted)
    above = next((r.version for r in catalog.releases if r.version > wanted), None)
    around = " and ".join(str(v) for v in (below.version if below else None, above) if v is not None)
    raise UsageError(
        f"--against {requirement!r}: {catalog.distribution} {wanted} was never released (the catalog lists every registry "
        f"release up to {latest}); the releases around it are {around}: pin one of them"
    )


def check_against(
    source: str,
    archive: Path,
    specs: list[Spec],
    selected: list[Spec],
    trace: bool = False,
    trace_env: TargetEnvironment | None = None,
    specs_dir: Path | None = None,
    required: frozenset[str] = frozenset(),
    skip: frozenset[str] | set[str] = frozenset(),
) -> AgainstReport:
    """Unpack ``archive`` into a temporary directory and check ``selected`` there (see module doc).

    A spec whose code differs from every release it was verified on (``needs-check``: a release the
    catalog does not list) is checked on CPU as ``apply`` would, in ``trace_env`` (default: this
    interpreter). ``required``: spec ids that must apply even where declared ``unsupported``. ``skip``: the
    ids left out with ``--skip``; the trace probe's ``fp4_quantize`` cases go with ``fp4-quantize-fullgraph``.
    """
    distribution = selected[0].distribution
    kind = "wheel" if archive.name.endswith(".whl") else "sdist"
    with tempfile.TemporaryDirectory(prefix="fp4patch-against-") as scratch:
        # the static checks read Python sources only; the trace imports the whole package
        site = unpack(archive, Path(scratch) / "site-packages", sources_only=not trace)
        dist = find_distribution(from_site_packages(site), distribution)
        catalog = load_catalog(distribution, specs_dir)
        where, message = catalog.describe(dist.version)
        engine = Engine(dist, [s for s in specs if s.distribution == distribution], None, catalog, trace_env)
        pristine = [engine.report(s) for s in selected]
        report = AgainstReport(source, archive, kind, distribution, str(dist.version), where, message, pristine, required=frozenset(required))
        # apply what can be applied, even when another spec is drifted: the report shows both
        to_apply = [r.spec for r in pristine if r.state in (APPLICABLE, NEEDS_CHECK)]
        try:
            if to_apply:
                engine.check_on_cpu(to_apply, required)
                to_apply = [s for s in to_apply if engine.report(s).state == APPLICABLE]
                report.pristine = [engine.report(s) for s in selected]
            if to_apply:
                engine.apply(to_apply, required=required)
        except DriftError as exc:
            report.apply_error = str(exc)
        else:
            report.after_apply = [engine.report(s) for s in selected]
        if trace:
            if kind != "wheel":
                report.trace_note = SDIST_TRACE_SKIPPED
            elif not report.static_ok:
                report.trace_note = "not traced: the specs do not apply to this release"
            else:
                from ..checks.cpu_check import TRACED_SPEC
                from ..checks.trace import entries_for_specs, run_probe, run_scan

                if TRACED_SPEC not in skip:
                    report.trace = run_probe(trace_env or current(), dist.site_packages)
                else:  # its cases go with fp4-quantize-fullgraph, left out as in verify --trace --skip
                    report.trace_note = f"the trace probe's fp4_quantize cases are {TRACED_SPEC}'s, left out with --skip {TRACED_SPEC}"
                names = entries_for_specs({r.spec.id for r in report.after_apply if r.state == APPLIED})
                if names:  # every patched function: the scan's call compiles as one graph
                    report.trace_functions = run_scan(trace_env or current(), dist.site_packages, only=names)["results"]
    return report
