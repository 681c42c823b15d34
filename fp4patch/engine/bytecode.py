"""Every place Python may load the bytecode of a source file from, and whether what is there is current.

CPython (3.8+) keeps the bytecode of ``dir/mod.py`` in ``dir/__pycache__/mod.<tag>[.opt-N].pyc``,
or, when ``sys.pycache_prefix`` is set (``PYTHONPYCACHEPREFIX``, ``-X pycache_prefix``), in
``<prefix>/<dir without its root>/mod.<tag>[.opt-N].pyc`` instead (``importlib.util.cache_from_source``;
``<tag>`` is ``sys.implementation.cache_tag``, ``N`` the ``-O`` level). A pyc header (PEP 552)
says how it is validated on import: *timestamp* (source mtime and size recorded),
*checked-hash* (source hash recorded and compared on import) or *unchecked-hash* (source hash
recorded and never compared: the pyc runs whatever the source says). fp4patch rewrites a source
file in place, so each of those files must be made current (:func:`refresh`) and ``verify`` must
not say ok while one would run other code (:func:`stale`).

For the files fp4patch patches in one installed distribution (the engine names them:
:meth:`fp4patch.engine.Engine.bytecode_files`): :func:`refresh_file` after each write,
:func:`refresh_stale` for what another tool left after an earlier apply, and :func:`stale_note`,
``verify``'s one line about it.
"""

from __future__ import annotations

import functools
import importlib.util
import marshal
import os
import py_compile
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import FileSystemError

if TYPE_CHECKING:
    from ..target.environment import InstalledDistribution

#: pyc header flags (PEP 552) → how py_compile writes them again.
MODES = {
    0b00: py_compile.PycInvalidationMode.TIMESTAMP,
    0b11: py_compile.PycInvalidationMode.CHECKED_HASH,
    0b01: py_compile.PycInvalidationMode.UNCHECKED_HASH,
}
MODE_NAMES = {0b00: "timestamp", 0b11: "checked-hash", 0b01: "unchecked-hash"}
#: ``-O`` levels CPython names pycs for ("" is level 0).
OPTIMIZATIONS = (0, 1, 2)


def cache_directories(sources: Iterable[Path], prefixes: Iterable[str | None]) -> list[Path]:
    """The directories that may hold bytecode of the source file named by any of ``sources`` (the
    same file under different spellings, e.g. through a symlinked site-packages, as the import
    system may meet it on ``sys.path``): its ``__pycache__`` and, for each pycache prefix in
    ``prefixes`` (None entries ignored), the mirrored directory under it. Existing or not."""
    found: list[Path] = []
    for source in sources:
        head = os.path.abspath(os.path.dirname(source))
        candidates = [Path(head) / "__pycache__"]
        for prefix in prefixes:
            if prefix:
                candidates.append(Path(os.path.abspath(prefix)) / os.path.splitdrive(head)[1].lstrip(os.sep))
        for directory in candidates:
            if directory not in found:
                found.append(directory)
    return found


def cached_files(sources: Iterable[Path], prefixes: Iterable[str | None]) -> list[Path]:
    """Every existing ``<stem>.*.pyc`` of the source in :func:`cache_directories` (any interpreter's tag)."""
    sources = list(sources)
    stem = Path(sources[0]).stem
    files: list[Path] = []
    for directory in cache_directories(sources, prefixes):
        if directory.is_dir():
            files.extend(p for p in sorted(directory.glob(f"{stem}.*.pyc")) if p not in files)
    return files


def possible_files(sources: Iterable[Path], prefixes: Iterable[str | None], tags: Iterable[str]) -> list[Path]:
    """Every pyc path an interpreter with cache tag in ``tags`` could load for the source (existing
    or not), at every optimization level: what ``verify``'s recorded answer is keyed on."""
    sources = list(sources)
    stem = Path(sources[0]).stem
    names = [f"{stem}.{tag}{'' if level == 0 else f'.opt-{level}'}.pyc" for tag in dict.fromkeys(tags) for level in OPTIMIZATIONS]
    return [directory / name for directory in cache_directories(sources, prefixes) for name in names]


def _parse_name(pyc: Path, stem: str) -> tuple[str, int] | None:
    """``(cache tag, optimization level)`` from ``<stem>.<tag>[.opt-N].pyc``, or None for another name."""
    parts = pyc.name[len(stem) + 1 : -len(".pyc")].split(".")
    if len(parts) == 1:
        return parts[0], 0
    if len(parts) == 2 and parts[1].startswith("opt-") and parts[1][4:].isdigit():
        return parts[0], int(parts[1][4:])
    return None


def refresh(sources: Iterable[Path], prefixes: Iterable[str | None]) -> list[tuple[Path, str]]:
    """Make every cached bytecode file of the source (first of ``sources``: its current contents) current.

    A pyc of this interpreter (its cache tag), anywhere in :func:`cache_directories`, is compiled
    again from the source in the invalidation mode it had (timestamp, checked-hash or
    unchecked-hash, read from its header) and at its optimization level, so an image whose
    site-packages is read-only at run time keeps precompiled, correct bytecode; a pyc of another
    interpreter (another cache tag), or one that cannot be read, is removed. None is created.
    Returns ``(pyc, "rewritten"|"removed")``.

    Raises:
        FileSystemError: a stale bytecode file can be neither rewritten nor removed.
    """
    sources = [Path(s) for s in sources]
    source = sources[0]
    done: list[tuple[Path, str]] = []
    for pyc in cached_files(sources, prefixes):
        parsed = _parse_name(pyc, source.stem)
        mode = None
        if parsed is not None and parsed[0] == sys.implementation.cache_tag and source.is_file():
            header = _header(pyc)
            mode = MODES.get(int.from_bytes(header[4:8], "little")) if header is not None else None
        if mode is not None:
            try:
                py_compile.compile(str(source), cfile=str(pyc), optimize=parsed[1], invalidation_mode=mode, doraise=True)
                os.chmod(pyc, pyc_mode(source))
                done.append((pyc, "rewritten"))
                continue
            except (OSError, py_compile.PyCompileError):
                pass
        try:
            pyc.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise FileSystemError(f"{pyc}: cannot remove stale bytecode ({exc.strerror}); delete it by hand") from None
        done.append((pyc, "removed"))
    return done


def pyc_mode(source: Path) -> int:
    """The permission bits Python gives the bytecode of ``source`` without a umask: the source's, made writable by
    its owner, no execute bit (importlib's ``_calc_mode``). py_compile applies the process's umask on top, so a root
    ``apply`` under ``umask 077`` turned a 644 pyc into 600 and another user's import compiled the module every time.

    Raises:
        OSError: ``source`` cannot be stat'ed.
    """
    return (source.stat().st_mode | 0o200) & 0o666


def _header(pyc: Path) -> bytes | None:
    try:
        with open(pyc, "rb") as handle:
            header = handle.read(16)
    except OSError:
        return None
    return header if len(header) == 16 else None


@functools.lru_cache(maxsize=16)
def _compiled(data: bytes, filename: str, optimize: int):
    return compile(data, filename, "exec", dont_inherit=True, optimize=optimize)


def compiled(data: bytes, filename: str, optimize: int = -1):
    """``compile(data, filename, "exec", dont_inherit=True, optimize=optimize)``, once per source, file name and level
    in this process (the last 16). A first ``apply`` on files with bytecode compiled each file it writes to check it
    (:func:`fp4patch.engine.plan.check_result`), then twice more to check the bytecode it had rewritten (:func:`stale`, from
    ``refresh_stale``); the same bytes now compile once (and once more in :mod:`py_compile`, which writes the pyc).
    ``optimize`` -1 is the interpreter's level, as for :func:`compile`.

    Raises:
        SyntaxError, ValueError: as :func:`compile` (not kept: the next call compiles again).
    """
    return _compiled(data, filename, sys.flags.optimize if optimize < 0 else optimize)


def _shape(code) -> tuple:
    """What a code object runs, without its file name or line numbers: bytecode, constants, names."""
    return (code.co_code, tuple(_shape(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts), code.co_names)


def stale(sources: Iterable[Path], prefixes: Iterable[str | None]) -> list[str]:
    """One line for each cached bytecode file of the source that the import system would load
    instead of the source on disk although it was compiled from other source; empty when none.

    Checked as CPython's loader validates a pyc (``--check-hash-based-pycs default``): an
    unchecked-hash pyc whose recorded source hash is not the file's; a timestamp pyc whose
    recorded mtime and size are the file's but whose code is not the file's compiled at its
    optimization level (only for this interpreter's cache tag: another tag's code cannot be
    compiled here, so a timestamp pyc that matches is taken as current); an unchecked-hash pyc of
    another interpreter, whose hash cannot be computed here. A checked-hash pyc or a timestamp pyc
    that does not match the file is recompiled by Python on import: not reported.
    """
    sources = [Path(s) for s in sources]
    source = sources[0]
    try:
        data = source.read_bytes()
        info = source.stat()
    except OSError:
        return []
    problems = []
    for pyc in cached_files(sources, prefixes):
        parsed = _parse_name(pyc, source.stem)
        header = _header(pyc)
        if parsed is None or header is None:
            continue
        tag, level = parsed
        flags = int.from_bytes(header[4:8], "little")
        ours = tag == sys.implementation.cache_tag
        if ours and header[:4] != importlib.util.MAGIC_NUMBER:
            continue  # Python rejects it and compiles the source
        what = f"{pyc}: {MODE_NAMES.get(flags, 'unknown')} bytecode of {source}"
        if flags == 0b01:
            if not ours:
                problems.append(f"{what} for another interpreter ({tag}), which runs it without checking the source; cannot be checked here")
            elif header[8:16] != importlib.util.source_hash(data):
                problems.append(f"{what} compiled from other source, which runs without checking the source")
        elif flags == 0 and ours:
            if (int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little")) != (
                int(info.st_mtime) & 0xFFFFFFFF,
                info.st_size & 0xFFFFFFFF,
            ):
                continue
            try:
                loaded = marshal.loads(pyc.read_bytes()[16:])
                fresh = compiled(data, str(source), level)
            except (OSError, ValueError, EOFError, TypeError, SyntaxError):
                problems.append(f"{what} cannot be read back; Python would fail on it")
                continue
            if _shape(loaded) != _shape(fresh):
                problems.append(f"{what} compiled from other source of the same size and modification time")
    return problems


def refresh_file(dist: InstalledDistribution, relative: str) -> list[tuple[Path, str]]:
    """Make the bytecode of ``relative`` (site-packages-relative, a file of ``dist``) current
    everywhere the target interpreter may load it from: :func:`refresh` over every spelling of the
    file and the target's pycache prefixes. Returns ``(pyc, "rewritten"|"removed")``.

    Raises:
        FileSystemError: a stale bytecode file can be neither rewritten nor removed.
    """
    return refresh(dist.spellings(relative), dist.bytecode_prefixes)


def refresh_stale(dist: InstalledDistribution, files: Iterable[str], notify: Callable[[str], None]) -> None:
    """Rewrite (or remove) bytecode that would run instead of one of ``files`` (site-packages-relative
    files of ``dist``): left by another tool after an earlier apply (the files themselves need no
    write then). Says which on ``notify``, one line a file.

    Raises:
        FileSystemError: a stale bytecode file can be neither rewritten nor removed.
    """
    for relative in files:
        if stale(dist.spellings(relative), dist.bytecode_prefixes):
            done = refresh_file(dist, relative)
            notify(f"{dist.locate(relative)}: made its stale bytecode current ({', '.join(f'{p} {w}' for p, w in done)})")


def stale_note(dist: InstalledDistribution, files: Iterable[str], apply_command: str) -> str | None:
    """A one-line problem when a pyc of one of ``files`` (site-packages-relative files of ``dist``),
    in its ``__pycache__`` or under the target's pycache prefix, would run instead of the file on
    disk (:func:`stale`); None when none would. ``apply_command`` is the command the line advises
    (it rewrites the pyc). Reads only.
    """
    problems = []
    for relative in files:
        spellings = dist.spellings(relative)
        problems.extend(stale(spellings, dist.bytecode_prefixes))
    if not problems:
        return None
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{problems[0]}{more}; Python would run it instead of the file on disk — run `{apply_command}` (rewrites it) or delete it"
