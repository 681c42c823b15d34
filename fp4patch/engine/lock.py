"""One fp4patch writer per environment: a file lock beside the manifest.

``apply`` and ``revert`` hold ``<site-packages>/.fp4patch/<distribution>.lock`` (``filelock``,
``flock`` underneath: released by the kernel when the holder dies, so a killed process never
leaves a stale lock) from before they read the manifest until after their last write. The lock
file is deleted again when nothing is recorded any more, so a reverted site-packages holds only
the distribution's own files; a waiter that locked a file deleted under it notices (the inode
differs from the path's) and locks the new one. :func:`held` asks, without taking it, whether
another process holds it (``verify``'s "running in another process").
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from ..errors import FileSystemError

#: Seconds to wait for another fp4patch process before giving up (exit 3); ``FP4PATCH_LOCK_TIMEOUT``.
DEFAULT_TIMEOUT = 600.0


class UnwritableLock(FileSystemError):
    """The lock file cannot be created: site-packages (or its ``.fp4patch``) is read-only."""


class _Replaced(Exception):
    """The locked file is no longer the one at the lock path (its holder deleted it)."""


def _same_file(path: Path) -> Callable[[int], None]:
    def check(fd: int) -> None:
        try:
            on_disk = os.stat(path)
        except FileNotFoundError:
            raise _Replaced() from None
        held = os.fstat(fd)
        if (held.st_ino, held.st_dev) != (on_disk.st_ino, on_disk.st_dev):
            raise _Replaced()

    return check


def _timeout() -> float:
    try:
        return float(os.environ.get("FP4PATCH_LOCK_TIMEOUT", DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT


@contextlib.contextmanager
def environment_lock(path: Path, what: str, notify: Callable[[str], None], remove_when: Callable[[], bool]) -> Iterator[None]:
    """Hold the lock at ``path`` (creating its directory); ``what`` names the environment in messages.

    Says on ``notify`` when another process holds it (``waiting for ...``) and how long it waited
    (``waited N.N s for lock ...``). On exit, deletes the lock file (and its directory when empty)
    if ``remove_when()`` is true.

    Raises:
        FileSystemError: the lock cannot be created (read-only site-packages) or is still held
            after ``FP4PATCH_LOCK_TIMEOUT`` seconds; nothing was changed.
    """
    limit = _timeout()
    start = time.monotonic()
    waited = False
    while True:
        try:
            from .files import make_directory

            make_directory(path.parent)  # with site-packages' mode, whatever the umask
        except OSError as exc:
            raise UnwritableLock(
                f"{path.parent}: cannot create ({exc.strerror}); site-packages is not writable: "
                "run as the owner of the environment or make it writable — nothing changed"
            ) from None
        lock = FileLock(str(path), on_acquired=_same_file(path), fallback_to_soft=False)
        try:
            try:
                lock.acquire(timeout=0)
            except Timeout:
                if not waited:
                    notify(f"waiting for lock {path}: another fp4patch process is applying or reverting {what}")
                waited = True
                left = limit - (time.monotonic() - start)
                lock.acquire(timeout=max(left, 0))
        except _Replaced:
            continue
        except Timeout:
            raise FileSystemError(
                f"{path}: still held by another fp4patch process after {limit:.0f} s; nothing changed — "
                "try again when it has finished (FP4PATCH_LOCK_TIMEOUT sets the wait)"
            ) from None
        except FileNotFoundError:
            continue  # the directory went away with the previous holder's lock file
        except OSError as exc:
            raise UnwritableLock(
                f"{path}: cannot create the lock file ({exc.strerror}); site-packages is not writable: "
                "run as the owner of the environment or make it writable — nothing changed"
            ) from None
        break
    if waited:
        notify(f"waited {time.monotonic() - start:.1f} s for lock {path} (another fp4patch process held it)")
    try:
        yield
    finally:
        try:
            if remove_when():
                path.unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    path.parent.rmdir()  # only when empty
        finally:
            lock.release()


def held(path: Path) -> bool:
    """True when another process holds the lock at ``path`` (probed with a shared ``flock``, which
    fails while the holder's exclusive one stands; writes nothing). False when there is no lock file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False
