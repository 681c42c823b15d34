"""The record of what ``apply`` changed: ``<site-packages>/.fp4patch/<distribution>/``.

``manifest.json`` lists the applied spec ids, the distribution and version, and for each
patched file the sha256 of the original and of the patched bytes; ``backups/`` holds the
original files under their site-packages-relative paths.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import FileSystemError
from .files import atomic_write

SCHEMA = 1
STATE_DIR = ".fp4patch"


@dataclass
class FileRecord:
    """One patched file: hashes (hex sha256) of its original and patched bytes, and the specs in it."""

    original_sha256: str
    patched_sha256: str
    specs: list[str]
    mode: int


@dataclass
class Manifest:
    """What fp4patch applied to one distribution in one site-packages."""

    distribution: str
    version: str
    specs: list[str] = field(default_factory=list)
    files: dict[str, FileRecord] = field(default_factory=dict)
    schema: int = SCHEMA

    def to_json(self) -> bytes:
        """Serialise (sorted keys, trailing newline)."""
        return (json.dumps(asdict(self), indent=2, sort_keys=True) + "\n").encode()


class ManifestStore:
    """Manifest and backups of ``distribution`` under ``site_packages/.fp4patch/<distribution>/``."""

    def __init__(self, site_packages: Path, distribution: str) -> None:
        self.root = site_packages / STATE_DIR / distribution
        self.path = self.root / "manifest.json"
        self.backups = self.root / "backups"

    def load(self) -> Manifest | None:
        """The manifest, or None when nothing is applied.

        Raises:
            FileSystemError: the manifest exists but cannot be read or parsed.
        """
        if not self.path.exists():
            return None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            files = {k: FileRecord(**v) for k, v in data.pop("files").items()}
            return Manifest(files=files, **data)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise FileSystemError(f"{self.path}: unreadable manifest ({exc}); remove {self.root} after reinstalling the distribution") from None

    def save(self, manifest: Manifest) -> None:
        """Write the manifest atomically (creating the state directory)."""
        self._mkdir(self.root)
        atomic_write(self.path, manifest.to_json(), mode=0o644)

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
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise FileSystemError(f"{path}: cannot create ({exc.strerror}); make site-packages writable") from None
