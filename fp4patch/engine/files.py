"""Safe file handling: atomic writes that keep the file mode, sha256, and bytecode invalidation."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from ..errors import FileSystemError


def sha256(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def read_bytes(path: Path) -> bytes:
    """Read ``path``.

    Raises:
        FileSystemError: the file cannot be read.
    """
    try:
        return path.read_bytes()
    except OSError as exc:
        raise FileSystemError(f"{path}: cannot read ({exc.strerror}); check the path and permissions") from None


def check_writable(path: Path) -> None:
    """Fail early when ``path``'s directory does not accept a new file (an atomic write needs one).

    Raises:
        FileSystemError: naming the file; nothing has been written.
    """
    directory = path.parent
    try:
        fd, probe = tempfile.mkstemp(prefix=".fp4patch-probe-", dir=directory)
    except OSError as exc:
        raise FileSystemError(
            f"{path}: directory is not writable ({exc.strerror}); run as the owner of the environment or make it writable"
        ) from None
    os.close(fd)
    os.unlink(probe)


def make_directory(path: Path) -> None:
    """Create ``path`` and its missing parents, each with the permission bits of the nearest folder that
    exists above them (site-packages for ``.fp4patch/``), whatever the umask: what fp4patch keeps beside an
    installed distribution must be as readable as the distribution (a root ``apply`` under ``umask 077`` made
    ``.fp4patch/`` 700, and another user's ``status`` failed). An existing ``path`` is left as it is.

    Raises:
        OSError: a folder cannot be created (callers turn it into their one-line error).
    """
    missing = []
    existing = path
    while not existing.is_dir():
        missing.append(existing)
        if existing.parent == existing:
            break
        existing = existing.parent
    mode = existing.stat().st_mode & 0o7777 if existing.is_dir() else 0o755
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            if not folder.is_dir():
                raise
            continue  # made meanwhile by another process: its mode is that one's business
        os.chmod(folder, mode & 0o777)


def share_mode(path: Path, like: Path) -> None:
    """Give the folder ``path`` the permission bits of ``like`` when they differ (no error when it cannot: a state
    folder made by an older fp4patch under a strict umask becomes readable on the next write, where possible)."""
    try:
        wanted = like.stat().st_mode & 0o777
        if path.is_dir() and path.stat().st_mode & 0o777 != wanted:
            os.chmod(path, wanted)
    except OSError:
        pass


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` by ``data`` atomically: temporary file in the same directory, fsync, rename.

    The file's permission bits are kept (or set to ``mode``). A hard-linked file is replaced by a
    new inode, so other links (e.g. a uv/pip cache) keep their content.

    Raises:
        FileSystemError: the write failed; ``path`` is unchanged.
    """
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".fp4patch-tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        tmp = None
        _fsync_directory(path.parent)
    except OSError as exc:
        raise FileSystemError(f"{path}: write failed ({exc.strerror}); the file is unchanged") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


TEMP_SUFFIX = ".fp4patch-tmp"


def remove_temp_files(path: Path) -> list[Path]:
    """Delete leftovers of interrupted :func:`atomic_write` calls on ``path`` (``.<name>.*.fp4patch-tmp``)."""
    removed = []
    for tmp in path.parent.glob(f".{path.name}.*{TEMP_SUFFIX}") if path.parent.is_dir() else []:
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def refresh_bytecode(source: Path, prefixes: tuple[str, ...] = ()) -> list[tuple[Path, str]]:
    """Make every cached bytecode file of ``source`` match its current contents: those in its
    ``__pycache__`` and under each pycache prefix in ``prefixes``
    (:func:`fp4patch.engine.bytecode.refresh`, which says how). Returns ``(pyc, "rewritten"|"removed")``.

    Raises:
        FileSystemError: a stale bytecode file can be neither rewritten nor removed.
    """
    from .bytecode import refresh

    return refresh([source], prefixes)
