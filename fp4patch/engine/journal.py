"""Writing through the journal: every write of an ``apply`` or ``revert`` recorded before the first.

A :class:`fp4patch.engine.manifest.Journal` (``<site-packages>/.fp4patch/<distribution>/journal.json``,
built by :mod:`fp4patch.engine.plan`) holds everything one operation writes: each target file's new bytes
with its sha256 before and after and its mode, the originals to back up, the manifest afterwards
(None: remove fp4patch's record) and the backups no longer needed. :func:`run` writes it, then
:func:`execute` carries it out in this order, one function per step (the crash tests kill the process after each):

==========  ==================================================================================
journal     the journal is on disk; nothing else written yet (``ManifestStore.write_journal``)
backup      each original kept, first patch of a file (:func:`keep_backup`)
file        each target file replaced (:func:`write_file`: temp file + rename)
bytecode    each target file's bytecode made current (:func:`fp4patch.engine.bytecode.refresh_file`)
manifest    the manifest saved (or removed with every backup), stale backups dropped (:func:`record`)
done        the journal removed: the operation is over (:func:`finish`)
==========  ==================================================================================

Every step is skipped when already done (same bytes there), so the journal of a killed run is
finished by running it again (:func:`fp4patch.engine.recovery.recover`, under the next run's lock).
A write error in process (:class:`FileSystemError`) puts back what was written — the undo list's
bytes, the previous manifest — and removes the journal; should that fail too, the journal stays
and the next run finishes the operation. Ctrl-C is held until the journal is carried out
(:func:`fp4patch.interrupts.held`).
"""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import FileSystemError
from .bytecode import refresh_file
from .files import atomic_write, read_bytes, sha256
from .manifest import manifest_from_dict

if TYPE_CHECKING:
    from ..target.environment import InstalledDistribution
    from .manifest import Journal, JournalFile, Manifest, ManifestStore


def run(
    store: ManifestStore, dist: InstalledDistribution, journal: Journal, undo: list[tuple[Path, bytes]], previous: Manifest | None
) -> None:
    """Record ``journal`` in ``store``, then carry it out on ``dist`` (:func:`execute`), with Ctrl-C
    held until it is done. On a write error, put back what was written: each ``(path, bytes
    before)`` of ``undo`` and the ``previous`` manifest (None: there was none, so the state
    directory goes too), then re-raise.

    Raises:
        FileSystemError: a write failed (the files hold their bytes before, unless putting them
            back failed too: then the journal stays for the next run).
    """
    from ..interrupts import held

    with held():
        _run_held(store, dist, journal, undo, previous)


def _run_held(
    store: ManifestStore, dist: InstalledDistribution, journal: Journal, undo: list[tuple[Path, bytes]], previous: Manifest | None
) -> None:
    store.write_journal(journal)
    try:
        execute(store, dist, journal)
    except FileSystemError as exc:
        try:
            for path, old in reversed(undo):
                if not path.is_file() or sha256(path.read_bytes()) != sha256(old):
                    atomic_write(path, old)
            if previous is not None:
                store.save(previous)
            else:
                store.remove()  # leave no state directory behind a failed first apply
            store.journal_path.unlink(missing_ok=True)
        except (OSError, FileSystemError):
            raise FileSystemError(
                f"{exc}; the files written before it could not all be put back: the journal stays, and the next "
                "fp4patch apply or revert finishes the operation"
            ) from None
        others = len({entry.path for entry in journal.files}) - 1
        if others > 0:  # say that no file of the operation is left half-done, not only the one that failed
            raise FileSystemError(f"{exc}; the {others} other file(s) of this operation were put back as they were: nothing changed") from None
        raise


def execute(store: ManifestStore, dist: InstalledDistribution, journal: Journal) -> None:
    """Carry out ``journal`` (the steps of the module docstring); every step is skipped when
    already done, so it can run again.

    Raises:
        FileSystemError: a file cannot be written.
    """
    for relative, data in sorted(journal.backups.items()):
        keep_backup(store, relative, base64.b64decode(data))
    for entry in journal.files:
        write_file(dist, entry)
    for entry in journal.files:
        refresh_file(dist, entry.path)
    record(store, journal)
    finish(store)
    if journal.manifest is None:
        store.remove()


def keep_backup(store: ManifestStore, relative: str, content: bytes) -> None:
    """Keep ``content`` as the original of ``relative`` in ``store``, unless that backup is there already."""
    backup = store.backup_path(relative)
    if not (backup.is_file() and sha256(backup.read_bytes()) == sha256(content)):
        store.write_backup(relative, content)


def write_file(dist: InstalledDistribution, entry: JournalFile) -> None:
    """Replace one target file by its journaled bytes and mode, unless it holds them already."""
    path = dist.locate(entry.path)
    if not (path.is_file() and sha256(read_bytes(path)) == entry.after_sha256 and path.stat().st_mode & 0o7777 == entry.mode):
        atomic_write(path, entry.content, mode=entry.mode)


def record(store: ManifestStore, journal: Journal) -> None:
    """Save the manifest the journal ends with and drop the backups it no longer needs; with none, remove the
    manifest and every backup."""
    if journal.manifest is not None:
        store.save(manifest_from_dict(journal.manifest))
        for relative in journal.drop_backups:
            store.backup_path(relative).unlink(missing_ok=True)
    else:
        store.path.unlink(missing_ok=True)
        shutil.rmtree(store.backups, ignore_errors=True)


def finish(store: ManifestStore) -> None:
    """Remove the journal: the operation is over."""
    store.journal_path.unlink(missing_ok=True)
