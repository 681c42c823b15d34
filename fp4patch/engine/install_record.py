"""One install of a distribution as its RECORD describes it: the baseline of a first patch, and the
identity that tells fp4patch's manifest from another install's.

pip and uv write ``<name>-<version>.dist-info/RECORD`` (the wheel spec's ``path,sha256=<urlsafe
base64, no padding>,size`` lines) for every installed file. fp4patch reads it twice:

- the *baseline* (:func:`check_baseline`): a file about to be patched for the first time must hold
  the bytes RECORD lists, else it was changed by hand and the backup fp4patch keeps would not be
  the original (``--allow-modified`` skips the check);
- the *install identity* (:func:`record_sha256`, kept in the manifest): a manifest written for
  another version, or for another RECORD of the same version, describes files an upgrade or a
  reinstall has replaced (:func:`other_install`).

Reads only; imports nothing of fp4patch but its errors (:mod:`fp4patch.engine.leftovers` and the engine
import it).
"""

from __future__ import annotations

import base64
import functools
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import FileSystemError

if TYPE_CHECKING:
    from importlib.metadata import Distribution

    from ..target.environment import InstalledDistribution
    from .manifest import Manifest


def record_sha256(dist: Distribution) -> str | None:
    """Hex sha256 of the RECORD file of ``dist`` (an :class:`importlib.metadata.Distribution`), or
    None when it has none: the identity of one install, kept in the manifest."""
    text = dist.read_text("RECORD")
    return hashlib.sha256(text.encode("utf-8")).hexdigest() if text is not None else None


def record_hashes(dist: InstalledDistribution) -> dict[str, str]:
    """Site-packages-relative path (POSIX) → the sha256 RECORD lists for it (urlsafe base64, as
    written there), for every entry with a sha256 hash. RECORD is read as CSV once per contents
    (importlib.metadata's ``files`` builds a path object per entry: 1.3 s for 0.7.4's 15,000, once per file
    an apply patches)."""
    return dict(_record_hashes(dist.dist.read_text("RECORD") or ""))


@functools.lru_cache(maxsize=4)
def _record_hashes(text: str) -> tuple[tuple[str, str], ...]:
    import csv
    from pathlib import PurePosixPath

    pairs = []
    for row in csv.reader(text.splitlines()):  # as importlib.metadata reads it: path, hash, size
        if len(row) >= 2 and row[1].startswith("sha256="):
            pairs.append((PurePosixPath(row[0]).as_posix(), row[1][len("sha256="):]))
    return tuple(pairs)


def check_baseline(dist: InstalledDistribution, relative: str, path: Path, current: bytes) -> None:
    """A file about to be patched for the first time (``relative``, at ``path``, holding ``current``)
    must be the one the distribution installed: its sha256 in RECORD, when RECORD lists one.

    Raises:
        FileSystemError: the bytes differ from RECORD's sha256 (changed by hand?); nothing changed.
    """
    expected = record_hashes(dist).get(relative)
    if expected is None:
        return
    actual = base64.urlsafe_b64encode(hashlib.sha256(current).digest()).rstrip(b"=").decode()
    if actual != expected.rstrip("="):
        raise FileSystemError(
            f"{path}: differs from the sha256 in {dist.name} {dist.version}'s RECORD (changed by hand?); "
            f"reinstall {dist.name}, or pass --allow-modified to patch it anyway — nothing changed"
        )


def other_install(manifest: Manifest, dist: InstalledDistribution) -> bool:
    """True when ``manifest`` was written for another install of the distribution than ``dist``:
    another version, or (when it recorded one) another RECORD."""
    if manifest.version != str(dist.version):
        return True
    return manifest.record_sha256 is not None and manifest.record_sha256 != record_sha256(dist.dist)
