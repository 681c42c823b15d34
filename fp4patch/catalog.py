"""The catalog of known releases: ``patches/<distribution>/catalog.json`` (not a spec).

It lists every release of the distribution on the package registry, oldest first, with the
archive the registry has (``wheel`` or ``sdist``) and the file that defines ``fp4_quantize``
(``false`` when the release has none, ``null`` when its archive cannot be fetched). ``verify
--against`` uses it to say when a release is newer than anything known, and ``make compat``
sweeps every release in it. It is JSON, so spec loading (``*.toml``) never sees it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .errors import SpecError
from .locations import builtin_specs_dir

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


@dataclass
class Catalog:
    """Every known release of ``distribution``, oldest first."""

    distribution: str
    releases: list[Release]
    path: Path

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
        if v > self.latest.version:
            return "newer", (
                f"{self.distribution} {v} is newer than every release in the catalog (latest known: {self.latest.version}); "
                "the specs were not written for it, so check each state below"
            )
        return "unknown", f"{self.distribution} {v} is not in the catalog (not a registry release; latest known: {self.latest.version})"


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
    return Catalog(canonicalize_name(data.get("distribution", distribution)), releases, path)
