"""What an interrupted ``apply``/``revert`` left behind: finished or cleaned up by the next one, named by ``verify``.

A run killed (SIGKILL, a power cut) leaves one of three things in
``<site-packages>/.fp4patch/<distribution>/``:

- temporary files of :func:`fp4patch.engine.files.atomic_write` (``*.fp4patch-tmp``), and, for a first
  apply killed before its journal was written, backups without a manifest: nothing installed was
  changed yet, so :func:`recover` removes them;
- a journal (:mod:`fp4patch.engine.journal`): every file it names holds its bytes before or after, so
  :func:`recover` carries the journal out again, finishing the operation;
- a journal of another installed version (an upgrade replaced the files meanwhile): discarded.

:func:`recover` runs under the environment's lock, first in every ``apply`` and ``revert``;
:func:`journal_note` is the line ``status`` and ``verify`` print meanwhile (reads only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import FileSystemError
from .files import TEMP_SUFFIX, read_bytes, remove_temp_files, sha256
from .journal import execute
from .lock import held

if TYPE_CHECKING:
    from ..target.environment import InstalledDistribution
    from .advice import Advice
    from .manifest import ManifestStore


def recover(store: ManifestStore, dist: InstalledDistribution, notify: Callable[[str], None]) -> None:
    """Finish an operation on ``dist`` that was killed (its journal is in ``store``), or clean up
    after one that was killed before it changed any file. Says which on ``notify``. Call it
    holding the environment's lock.

    Raises:
        FileSystemError: a file the journal names holds neither its bytes before nor after (the
            message says to reinstall), or a write fails.
    """
    root = store.root
    leftovers = [p for p in root.rglob(f"*{TEMP_SUFFIX}")] if root.is_dir() else []
    for tmp in leftovers:
        tmp.unlink(missing_ok=True)
    journal = store.load_journal()
    if journal is None:
        if root.is_dir() and not store.path.exists():
            store.remove()  # backups of a first apply killed before its journal
            leftovers.append(root)
        if leftovers:
            notify(f"rolled back an interrupted fp4patch run: it had not changed any file yet; removed its leftovers in {root}")
        return
    what = _what(journal)
    if (journal.distribution, journal.version) != (dist.name, str(dist.version)):
        notify(
            f"discarded the journal of an interrupted {what} on {journal.distribution} {journal.version}: "
            f"{dist.version} is installed now, its files replaced the ones being written"
        )
        store.journal_path.unlink(missing_ok=True)
        return
    for entry in journal.files:
        path = dist.locate(entry.path)
        remove_temp_files(path)
        current = sha256(read_bytes(path)) if path.is_file() else None
        if current not in (entry.before_sha256, entry.after_sha256):
            raise FileSystemError(
                f"{path}: neither the bytes before nor after the interrupted {what} ({store.journal_path}); "
                f"not finishing it — reinstall {dist.name}, then delete {root}"
            )
    execute(store, dist, journal)
    notify(f"completed an interrupted {what} from its journal ({len(journal.files)} file(s); {store.journal_path} removed)")


def _what(journal) -> str:
    """``apply of a, b`` for a journal of up to three specs, else ``apply of 21 specs`` (a line in a log, not a list
    of every spec id: 870-1,000 columns with the default specs)."""
    specs = list(journal.specs)
    return f"{journal.operation} of {', '.join(specs) if len(specs) <= 3 else f'{len(specs)} specs'}"


def journal_note(store: ManifestStore, advice: Advice) -> str | None:
    """One line when a journal is in ``store``: an apply/revert is running in another process (it
    holds the lock: :func:`fp4patch.engine.lock.held`), or was interrupted (with the commands that finish
    and undo it, worded by ``advice``: :class:`fp4patch.engine.advice.Advice`, the options the command was
    given); or the journal's read error (``store``: :class:`~fp4patch.engine.manifest.ManifestStore`). None when there
    is no journal. Reads only (a journal that cannot be read is the line returned)."""
    journal_path = store.journal_path
    if not journal_path.exists():
        return None
    try:
        journal = store.load_journal()
    except FileSystemError as exc:
        return str(exc)
    what = _what(journal) if journal else "operation"
    if held(store.lock_path):
        return f"an fp4patch {what} is running in another process ({journal_path})"
    return (
        f"an fp4patch {what} was interrupted ({journal_path}); run `{advice.command('apply')}` to finish it "
        f"and then `{advice.command('revert')}` if you want it undone"
    )
