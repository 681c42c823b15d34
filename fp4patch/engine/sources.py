"""The installed files as one fp4patch command reads them: parsed once per contents.

Reports (:mod:`fp4patch.engine.report`), plans (:mod:`fp4patch.engine.plan`) and the evidence lookup
(:mod:`fp4patch.catalog.evidence`) read target files through the engine's one :class:`Sources`, which

- parses a file with libcst once per contents and command (libcst trees are immutable: every
  operation of every spec shares one tree);
- reads a file as released (:meth:`Sources.released_bytes`): fp4patch's backup where it patched the
  file, so that evidence is taken on the release's code, not on fp4patch's own patch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import DriftError, FileSystemError
from .files import read_bytes

if TYPE_CHECKING:
    import libcst

    from ..target.environment import InstalledDistribution
    from .manifest import ManifestStore


class Sources:
    """The files of ``dist`` (and fp4patch's backups in ``store``) as read by one command.

    Attributes:
        dist: the installed distribution.
        store: its manifest and backups.
    """

    def __init__(self, dist: InstalledDistribution, store: ManifestStore) -> None:
        self.dist = dist
        self.store = store
        self._parsed: dict[Path, tuple[bytes, libcst.Module]] = {}
        self._seeded: dict[Path, tuple[bytes, libcst.Module, tuple[str, ...]]] = {}

    def load_module(self, path: Path) -> tuple[bytes, libcst.Module] | None:
        """``(bytes, libcst.Module)`` of ``path``, parsed once per contents; None when missing. The module is the
        file without the set stamp fp4patch appends to the files it patched (:mod:`fp4patch.engine.set_stamp`): what
        the operations check and transform; the bytes are the file's as they are.

        Raises:
            DriftError: the file is not valid Python (the message names the line); nothing written.
            FileSystemError: the file cannot be read.
        """
        import libcst as cst

        if not path.is_file():
            return None
        data = read_bytes(path)
        cached = self._parsed.get(path)
        if cached is not None and cached[0] == data:
            return cached  # libcst trees are immutable: one parse per file contents and command
        from .set_stamp import strip

        try:
            loaded = data, cst.parse_module(strip(data))
        except cst.ParserSyntaxError as exc:
            raise DriftError(f"{path}:{exc.raw_line}: not valid Python ({exc.message}); reinstall the distribution — nothing written") from None
        except (UnicodeDecodeError, LookupError, SyntaxError) as exc:
            raise DriftError(f"{path}: not valid Python source ({exc}); reinstall the distribution — nothing written") from None
        self._parsed[path] = loaded
        return loaded

    def seed(self, path: Path, data: bytes, module: libcst.Module, appended: tuple[str, ...] = ()) -> None:
        """Take ``module`` as the tree the reports check for ``path`` holding ``data`` (``apply`` made both: the tree
        its operations left, the bytes it wrote, stamp included), ``appended`` the op blocks it added at the end as
        text (:func:`fp4patch.engine.plan.appended_text`), which the tree lacks: a later :meth:`load_for_check` of those
        bytes needs no parse. A plan never takes a seeded tree."""
        self._seeded[path] = (data, module, appended)

    def load_for_check(self, path: Path) -> tuple[bytes, libcst.Module, tuple[str, ...]] | None:
        """:meth:`load_module` for the reports, with the blocks appended as text that the tree lacks (``()`` for a
        parsed file): the seeded tree of ``path`` when the file holds the bytes seeded."""
        seeded = self._seeded.get(path)
        if seeded is not None:
            data = read_bytes(path) if path.is_file() else None
            if data == seeded[0]:
                return seeded
        loaded = self.load_module(path)
        return None if loaded is None else (*loaded, ())

    def released_bytes(self, relative: str) -> bytes | None:
        """The released bytes of a site-packages file (``relative``, POSIX): fp4patch's backup when
        it patched the file, else the file; None when missing or unreadable."""
        try:
            manifest = self.store.load()
        except FileSystemError:
            manifest = None
        path = self.dist.locate(relative)
        if manifest is not None and relative in manifest.files and self.store.backup_path(relative).is_file():
            path = self.store.backup_path(relative)
        try:
            data = read_bytes(path) if path.is_file() else None
        except FileSystemError:
            data = None
        return data
