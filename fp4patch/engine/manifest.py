"""The record of what ``apply`` changed: ``<site-packages>/.fp4patch/<distribution>/``.

``manifest.json`` lists the applied spec ids, the distribution and version, and for each
patched file the sha256 of the original and of the patched bytes; ``backups/`` holds the
original files under their site-packages-relative paths. ``journal.json`` exists only while an
``apply`` or ``revert`` is writing: it holds every byte that operation will write, so a run
that was killed half-way is finished by the next one (see :mod:`fp4patch.engine`).
``<site-packages>/.fp4patch/<distribution>.lock`` serialises writers (:mod:`fp4patch.engine.lock`).
"""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import FileSystemError
from ..locations import STATE_DIR  # noqa: F401 (re-exported)
from .files import atomic_write

SCHEMA = 1


@dataclass
class FileRecord:
    """One patched file: hashes (hex sha256) of its original and patched bytes, and the specs in it."""

    original_sha256: str
    patched_sha256: str
    specs: list[str]
    mode: int


@dataclass
class Manifest:
    """What fp4patch applied to one distribution in one site-packages (``version``: as its METADATA says)."""

    distribution: str
    version: str
    specs: list[str] = field(default_factory=list)
    files: dict[str, FileRecord] = field(default_factory=dict)
    schema: int = SCHEMA
    #: sha256 of the distribution's RECORD when the manifest was written: a reinstall that writes
    #: another RECORD makes the record stale even at the same version (None in older manifests).
    record_sha256: str | None = None
    #: spec id -> the evidence its targets were taken on, for a release the catalog does not list
    #: (:meth:`fp4patch.catalog.evidence.Basis.to_record`: "as verified on 0.7.4, same code", "checked on CPU
    #: for 0.7.5"); absent for listed releases and in older manifests.
    basis: dict[str, dict] = field(default_factory=dict)
    #: The token of the set of patched files this record belongs to (:mod:`fp4patch.engine.set_stamp`): a patched module
    #: traces through fp4patch's ops only when its stamp's token is this one (None in older manifests).
    set_token: str | None = None

    def to_json(self) -> bytes:
        """Serialise (sorted keys, trailing newline)."""
        return (json.dumps(asdict(self), indent=2, sort_keys=True) + "\n").encode()

    def applied_specs(self) -> list[str]:
        """The recorded specs whose changes are in a file, in record order: not those recorded but not
        needed on this release (they changed no file)."""
        patched = {s for record in self.files.values() for s in record.specs}
        return [s for s in self.specs if s in patched]


@dataclass
class JournalFile:
    """A target file an interrupted operation writes: its sha256 before and after, and the new bytes."""

    path: str
    before_sha256: str
    after_sha256: str
    mode: int
    data: str  # base64

    @property
    def content(self) -> bytes:
        return base64.b64decode(self.data)


@dataclass
class Journal:
    """Everything one ``apply`` or ``revert`` writes, recorded before its first write.

    ``manifest`` is the manifest to save at the end, or None to delete the manifest and every
    backup (the last revert); ``backups`` maps relative paths to base64 originals to keep;
    ``drop_backups`` lists backups no longer needed.
    """

    operation: str
    distribution: str
    version: str
    specs: list[str]
    files: list[JournalFile]
    backups: dict[str, str] = field(default_factory=dict)
    manifest: dict | None = None
    drop_backups: list[str] = field(default_factory=list)
    schema: int = SCHEMA

    def to_json(self) -> bytes:
        return (json.dumps(asdict(self), indent=1, sort_keys=True) + "\n").encode()

    @staticmethod
    def encode(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")


def manifest_from_dict(data: dict) -> Manifest:
    data = dict(data)
    files = {k: FileRecord(**v) for k, v in data.pop("files").items()}
    return Manifest(files=files, **data)


class ManifestStore:
    """Manifest and backups of ``distribution`` under ``site_packages/.fp4patch/<distribution>/``."""

    def __init__(self, site_packages: Path, distribution: str) -> None:
        self.root = site_packages / STATE_DIR / distribution
        self.path = self.root / "manifest.json"
        self.backups = self.root / "backups"
        self.journal_path = self.root / "journal.json"
        self.lock_path = site_packages / STATE_DIR / f"{distribution}.lock"

    def load(self) -> Manifest | None:
        """The manifest, or None when nothing is applied.

        Raises:
            FileSystemError: the manifest exists but cannot be read or parsed.
        """
        if not self.path.exists():
            return None
        try:
            return manifest_from_dict(json.loads(self.path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise FileSystemError(f"{self.path}: unreadable manifest ({exc}); remove {self.root} after reinstalling the distribution") from None

    def save(self, manifest: Manifest) -> None:
        """Write the manifest atomically (creating the state directory). The state folders take the mode of
        site-packages (those of an older fp4patch run under a strict umask too), so that every user who can
        read the distribution can read fp4patch's record of it."""
        self._mkdir(self.root)
        from .files import share_mode

        site_packages = self.root.parent.parent
        for folder in (self.root.parent, self.root, self.backups):
            share_mode(folder, site_packages)
        atomic_write(self.path, manifest.to_json(), mode=0o644)

    def load_journal(self) -> Journal | None:
        """The journal of an interrupted operation, or None.

        Raises:
            FileSystemError: the journal exists but cannot be read (it is written atomically, so
                only a hand edit or a disk error gets here).
        """
        if not self.journal_path.exists():
            return None
        try:
            data = json.loads(self.journal_path.read_text(encoding="utf-8"))
            files = [JournalFile(**f) for f in data.pop("files")]
            return Journal(files=files, **data)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise FileSystemError(
                f"{self.journal_path}: unreadable journal of an interrupted fp4patch run ({exc}); "
                f"reinstall the distribution, then remove {self.root}"
            ) from None

    def write_journal(self, journal: Journal) -> None:
        """Write the journal atomically (creating the state directory)."""
        self._mkdir(self.root)
        atomic_write(self.journal_path, journal.to_json(), mode=0o644)

    def backup_path(self, relative: str) -> Path:
        """Where the original of ``relative`` is kept."""
        return self.backups / relative

    def write_backup(self, relative: str, data: bytes) -> None:
        """Keep the original bytes of ``relative``."""
        target = self.backup_path(relative)
        self._mkdir(target.parent)
        atomic_write(target, data, mode=0o644)

    def read_backup(self, relative: str) -> bytes:
        """The original bytes of ``relative``.

        Raises:
            FileSystemError: the backup is missing.
        """
        try:
            return self.backup_path(relative).read_bytes()
        except OSError as exc:
            raise FileSystemError(
                f"{self.backup_path(relative)}: backup missing ({exc.strerror}); reinstall the distribution to restore {relative}"
            ) from None

    def remove(self) -> None:
        """Delete the manifest and every backup (and the state directory when empty)."""
        shutil.rmtree(self.root, ignore_errors=True)
        parent = self.root.parent
        if parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()

    @staticmethod
    def _mkdir(path: Path) -> None:
        from .files import make_directory

        try:
            make_directory(path)
        except OSError as exc:
            raise FileSystemError(f"{path}: cannot create ({exc.strerror}); make site-packages writable") from None
