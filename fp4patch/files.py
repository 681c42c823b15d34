"""Safe file handling: atomic writes that keep the file mode, sha256, and bytecode invalidation."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from .errors import FileSystemError


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


def remove_bytecode(source: Path) -> list[Path]:
    """Delete the cached bytecode of ``source`` (``__pycache__/<stem>.*.pyc``) so the next import
    compiles the new source. Returns the files removed.

    Raises:
        FileSystemError: a stale bytecode file exists but cannot be removed.
    """
    cache = source.parent / "__pycache__"
    removed = []
    if cache.is_dir():
        for pyc in cache.glob(f"{source.stem}.*.pyc"):
            try:
                pyc.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise FileSystemError(f"{pyc}: cannot remove stale bytecode ({exc.strerror}); delete it by hand") from None
            removed.append(pyc)
    return removed
