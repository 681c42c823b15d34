"""The catalog of known releases and the evidence of each target: ``patches/<distribution>/catalog.json`` (not a spec).

``releases`` lists every release of the distribution on the package registry, oldest first, with
the archive the registry has (``wheel`` or ``sdist``) and the file that defines ``fp4_quantize``
(``false`` when the release has none, ``null`` when its archive cannot be fetched). ``verify
--against`` uses it to say when a release is newer than anything known, and ``make compat``
sweeps every release in it.

``evidence`` records, per spec, what code each of its targets was verified on: one entry per
distinct code, with the releases ``make compat`` applied, traced and reverted it on, the digest of
each piece of code the target depends on (:mod:`fp4patch.catalog.fingerprint`) and the wrapper's
signature. A release the catalog does not list (a newer, pre-, dev or post release, a local
label) takes the target whose evidence equals its code (:mod:`fp4patch.catalog.evidence`). ``make compat``
writes it (:func:`evidence_text`); a test checks it against the real releases.

It is JSON, so spec loading (``*.toml``) never sees it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import SpecError
from ..locations import builtin_specs_dir

CATALOG_NAME = "catalog.json"


@dataclass(frozen=True)
class Release:
    """One catalog entry.

    Attributes:
        version: the release.
        archive: ``wheel`` or ``sdist`` (what the registry has).
        fp4_quantize: the file defining ``fp4_quantize``; ``""`` when the release has none;
            ``None`` when unknown (the archive cannot be fetched).
        note: why, when something is unusual.
    """

    version: Version
    archive: str
    fp4_quantize: str | None
    note: str = ""

    @property
    def has_fp4_quantize(self) -> bool:
        return bool(self.fp4_quantize)


@dataclass(frozen=True)
class Evidence:
    """One code a spec target was verified on (an entry of the catalog's ``evidence``).

    Attributes:
        target: the target's version specifier as ``str(SpecifierSet)`` prints it (``<0.7.5,>=0.7.4``).
        releases: the catalog releases ``make compat`` verified the target on with this code, oldest first.
        code: piece name -> 12-hex digest (:class:`fp4patch.catalog.fingerprint.Fingerprint.pieces`).
        signature: the edited function's parameters as ``[name, kind, default]`` rows
            (:func:`fp4patch.catalog.fingerprint.signature`), ``[]`` for targets that edit none.
        traced: what ``make compat`` compiled on those releases (wheels, default specs): ``{"ops": [op names],
            "probe": 12 hex}``, the rendered ops' identities (``fp4patch::<function>_<8 hex>``) and the digest of
            what the probes compiled for the spec there (:func:`fp4patch.checks.trace.probe_digest`); None where nothing
            was traced (an sdist, a spec outside the default set). ``tests/test_evidence_traced.py`` fails when
            either is no longer what fp4patch would render and run.
    """

    target: str
    releases: tuple[Version, ...]
    code: dict[str, str]
    signature: tuple[tuple[str, str, str], ...] = ()
    traced: dict | None = None

    @property
    def latest(self) -> Version:
        return self.releases[-1]

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "releases": [str(v) for v in self.releases],
            "code": dict(self.code),
            "signature": [list(row) for row in self.signature],
            **({"traced": {"ops": list(self.traced["ops"]), "probe": self.traced["probe"]}} if self.traced else {}),
        }


@dataclass
class Catalog:
    """Every known release of ``distribution``, oldest first, and the evidence of each spec's targets."""

    distribution: str
    releases: list[Release]
    path: Path
    #: spec id -> the codes its targets were verified on (see :class:`Evidence`).
    evidence: dict[str, list[Evidence]] = field(default_factory=dict)

    def lists(self, version: Version | str) -> bool:
        """True when ``version`` is a release of the catalog, exactly (``0.7.4+cu130`` is not ``0.7.4``)."""
        return self.get(version) is not None

    def nearest(self, version: Version | str) -> Release | None:
        """The newest catalog release at or below ``version`` (by PEP 440 order), or None."""
        v = Version(str(version))
        below = [r for r in self.releases if r.version <= v]
        return below[-1] if below else None

    def get(self, version: Version | str) -> Release | None:
        """The entry for ``version`` (compared as versions: ``0.6.0`` == ``0.6``), or None."""
        wanted = Version(str(version))
        return next((r for r in self.releases if r.version == wanted), None)

    @property
    def latest(self) -> Release:
        return self.releases[-1]

    def describe(self, version: Version | str) -> tuple[str, str]:
        """``(where, message)``: where is ``known``, ``newer`` (than every entry) or ``unknown``."""
        v = Version(str(version))
        if self.get(v):
            return "known", f"{self.distribution} {v} is in the catalog ({len(self.releases)} releases, up to {self.latest.version})"
        placed = (
            "each spec takes the target verified on the same code, else the nearest known release's target once it is checked on CPU"
        )
        if v > self.latest.version:
            return "newer", (
                f"{self.distribution} {v} is newer than every release in the catalog (latest known: {self.latest.version}); {placed}"
            )
        return "unknown", f"{self.distribution} {v} is not in the catalog (not a registry release; latest known: {self.latest.version}); {placed}"


def catalog_path(distribution: str, specs_dir: Path | None = None) -> Path:
    """``<specs_dir>/<distribution>/catalog.json``, falling back to the built-in one."""
    name = canonicalize_name(distribution)
    for base in filter(None, [specs_dir, builtin_specs_dir()]):
        candidate = Path(base) / name / CATALOG_NAME
        if candidate.is_file():
            return candidate
    return builtin_specs_dir() / name / CATALOG_NAME


def load_catalog(distribution: str = "flashinfer-python", specs_dir: Path | None = None) -> Catalog:
    """Load and check the catalog of ``distribution``.

    Raises:
        SpecError: the file is missing, not JSON, or an entry is malformed or out of order.
    """
    path = catalog_path(distribution, specs_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"{path}:1: cannot read the release catalog ({exc.strerror})") from None
    except ValueError as exc:
        raise SpecError(f"{path}:{getattr(exc, 'lineno', 1)}: release catalog is not valid JSON ({exc})") from None
    releases = []
    for entry in data.get("releases", []):
        try:
            version = Version(entry["version"])
        except (KeyError, TypeError, InvalidVersion):
            raise SpecError(f"{path}:1: bad release entry {entry!r}") from None
        if entry.get("archive") not in ("wheel", "sdist"):
            raise SpecError(f"{path}:1: {version}: archive must be 'wheel' or 'sdist'")
        fp4 = entry.get("fp4_quantize")
        releases.append(Release(version, entry["archive"], None if fp4 is None else (fp4 or ""), entry.get("note", "")))
    if not releases:
        raise SpecError(f"{path}:1: the release catalog lists no release")
    if [r.version for r in releases] != sorted(r.version for r in releases):
        raise SpecError(f"{path}:1: releases must be listed oldest first")
    return Catalog(canonicalize_name(data.get("distribution", distribution)), releases, path, _evidence(path, data.get("evidence", {})))


def _evidence(path: Path, data: Any) -> dict[str, list[Evidence]]:
    """The catalog's ``evidence`` table, checked.

    Raises:
        SpecError: not a table of lists of entries with ``target``, ``releases``, ``code`` (and ``signature``).
    """
    if not isinstance(data, dict):
        raise SpecError(f"{path}:1: 'evidence' must be a table of spec ids; run make compat to write it")
    out: dict[str, list[Evidence]] = {}
    for spec_id, entries in data.items():
        if spec_id == "about":
            continue
        if not isinstance(entries, list):
            raise SpecError(f"{path}:1: evidence of {spec_id!r} must be a list; run make compat to write it")
        parsed = []
        for entry in entries:
            try:
                releases = tuple(Version(v) for v in entry["releases"])
                code = {str(k): str(v) for k, v in entry["code"].items()}
                signature = tuple(tuple(str(x) for x in row) for row in entry.get("signature", []))
                target = str(entry["target"])
            except (KeyError, TypeError, AttributeError, InvalidVersion):
                raise SpecError(f"{path}:1: bad evidence entry of {spec_id!r}: {json.dumps(entry)[:120]}; run make compat to write it") from None
            if not releases or any(len(row) != 3 for row in signature):
                raise SpecError(f"{path}:1: bad evidence entry of {spec_id!r} (no release, or a signature row that is not [name, kind, default])")
            traced = entry.get("traced")
            if traced is not None and not (isinstance(traced, dict) and isinstance(traced.get("ops"), list) and isinstance(traced.get("probe"), str)):
                raise SpecError(f"{path}:1: bad evidence entry of {spec_id!r}: traced must be {{ops: [...], probe: hex}}; run make compat to write it")
            parsed.append(Evidence(target, releases, code, signature, {"ops": [str(o) for o in traced["ops"]], "probe": traced["probe"]} if traced else None))
        out[spec_id] = parsed
    return out


def evidence_text(path: Path, evidence: dict[str, list[Evidence]]) -> str:
    """The text of the catalog at ``path`` with its ``evidence`` table replaced by ``evidence`` (spec id ->
    :class:`Evidence` list), its releases kept as they are: what ``make compat`` writes (the catalog reads;
    the writers, :mod:`fp4patch.tools.compat` and ``scripts/refresh_evidence.py``, write it atomically). Each spec's
    entries come oldest first, one entry over a few lines, so a diff of the file shows which release's code
    changed. Raises ``OSError`` when ``path`` cannot be read."""
    data = json.loads(path.read_text(encoding="utf-8"))
    head = {k: v for k, v in data.items() if k not in ("releases", "evidence")}
    lines = ["{"]
    for key, value in head.items():
        lines.append(f" {json.dumps(key)}: {json.dumps(value)},")
    lines.append(' "releases": [')
    lines.append(",\n".join(f"  {json.dumps(r, separators=(', ', ': '))}" for r in data.get("releases", [])))
    lines.append(" ],")
    lines.append(' "evidence": {')
    lines.append(f'  "about": {json.dumps(EVIDENCE_ABOUT)},')
    specs = []
    for spec_id in sorted(evidence):
        entries = sorted(evidence[spec_id], key=lambda e: e.releases[0])
        rendered = []
        for e in entries:
            j = e.to_json()
            rendered.append(
                "   {" + f'"target": {json.dumps(j["target"])}, "releases": {json.dumps(j["releases"])},\n'
                f'    "code": {json.dumps(j["code"])},\n'
                f'    "signature": {json.dumps(j["signature"])}'
                + (f',\n    "traced": {json.dumps(j["traced"])}' if "traced" in j else "") + "}"
            )
        specs.append(f"  {json.dumps(spec_id)}: [\n" + ",\n".join(rendered) + "\n  ]")
    lines.append(",\n".join(specs))
    lines.append(" }")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    json.loads(text)  # the writer's own check: what it writes reads back
    return text


EVIDENCE_ABOUT = (
    "Written by make compat (python -m fp4patch.tools.compat): per spec, the code each target was verified on. "
    "releases: where make compat applied, traced and reverted the target with this code; code: a 12-hex digest of each piece "
    "the target depends on (the edited function, its callers, its mirrors; ast without docstrings, see fp4patch/catalog/fingerprint.py); "
    "signature: the edited function's parameters [name, kind, default]; traced: the rendered ops and the digest of what the probes "
    "compiled there (default specs, wheels; fp4patch/checks/trace.py probe_digest). A release not listed above takes the target whose code "
    "equals its own. Do not edit by hand."
)
