"""Rendered custom ops, cached on disk under the hash of everything that goes into them.

Rendering a ``custom-op`` target (:func:`fp4patch.ops.render.render`: libcst parse, trim, expand,
print) costs about 0.1 CPU-second per op, and indexing the block for the check another 0.04;
``status``, ``diff``, ``apply`` and an unrecorded ``verify`` render every selected spec that
targets the installed release (ten on FlashInfer 0.6.0: about a third of a ``status``). The result
depends only on the target's data (op source, helpers, parameters, defaults, release data, callers,
spec id and versions) and on the code that makes it (every file of :mod:`fp4patch.ops`, the op-source
language; the block index's ``operations/base.py`` and ``operations/append_to_module.py``; the libcst
and Python versions), so it is kept in ``~/.cache/fp4patch/ops/<sha256>.json`` (``$FP4PATCH_OP_CACHE``
to move it), one small JSON file per key.

The cache only saves time: a missing, unreadable or malformed entry, or one whose digest does not
bind it to its key (copied under another name, edited by hand), is rendered afresh and rewritten;
a folder that cannot be created or written (a read-only HOME in a Docker build), or no home
directory at all (``docker run -u 12345``: no HOME, no passwd entry), is skipped silently;
``FP4PATCH_NO_OP_CACHE=1`` turns it off. Entries are written to a temporary file and renamed, so a
concurrent reader sees a whole entry or none.

May import: the standard library, libcst (to read its version), :mod:`fp4patch.ops.render` and, for the
block index, :mod:`fp4patch.codemods.base` and :mod:`fp4patch.codemods.append_to_module`; nothing
in :mod:`fp4patch.ops` imports this module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

from .render import CustomOpTarget, Rendered, render

#: bump when the entry format changes
FORMAT = "fp4patch-op-cache-3"

def cache_dir() -> Path:
    """The cache folder: ``$FP4PATCH_OP_CACHE``, else ``~/.cache/fp4patch/ops``."""
    return Path(os.environ.get("FP4PATCH_OP_CACHE") or Path.home() / ".cache" / "fp4patch" / "ops")


def enabled() -> bool:
    """False when ``FP4PATCH_NO_OP_CACHE`` is set to anything but ``""``/``0``."""
    return os.environ.get("FP4PATCH_NO_OP_CACHE", "") in ("", "0")


def _language_files() -> list[Path]:
    """Every file of the op-source language: the ``.py`` files of :mod:`fp4patch.ops` (this one's folder), by name."""
    return sorted(Path(__file__).resolve().parent.glob("*.py"), key=lambda p: p.name)


def _hash_renderer() -> str:
    """The sha256 (hex) of the renderer's and block indexer's source and the libcst and Python versions.

    Read when this module is imported, right after the modules themselves: a process that imported
    fp4patch and then sees its files replaced (an upgrade or a checkout under a long-running process)
    must not file what its old code renders under the new code's key, which every later process would
    read as its own (it did: a test process that outlived a merge cached the old bmm_fp8 block)."""
    import libcst

    from ..codemods import append_to_module, base

    # the block and redirect come from fp4patch/ops/ (every file: a change anywhere in the language is another
    # entry); block_index from statement_key (base.py) and _shape (append_to_module.py): an fp4patch that
    # computes any of them otherwise reads other entries
    paths = [*_language_files(), *(Path(m.__file__) for m in (base, append_to_module))]
    code = b"\0".join(p.name.encode() + b"\0" + p.read_bytes() for p in paths)
    version = getattr(libcst, "__version__", None) or getattr(getattr(libcst, "_version", None), "__version__", "")
    return hashlib.sha256(code + f"\0{version}\0{sys.version_info[:2]}".encode()).hexdigest()


_renderer_hash: str = _hash_renderer()


def key(target: CustomOpTarget) -> str:
    """The sha256 (hex) naming ``target``'s entry: the renderer's source (every file of :mod:`fp4patch.ops`) and the
    block indexer's (``operations/base.py``, ``operations/append_to_module.py``) as read when this
    module was imported, the libcst and Python versions, and every field of ``target`` (a change to any
    of them is a different entry)."""
    fields = {f.name: getattr(target, f.name) for f in dataclasses.fields(target)}
    text = json.dumps([FORMAT, _renderer_hash, fields], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def render_cached(target: CustomOpTarget) -> Rendered:
    """:func:`fp4patch.ops.render.render` of ``target``, read from the cache when an entry exists.

    Args:
        target: a :class:`~fp4patch.ops.source.CustomOpTarget`.

    Raises:
        OpSourceError: as :func:`~fp4patch.ops.render.render` (errors are never cached).
    """
    if not enabled():
        return render(target)
    try:
        name = key(target)
        path = cache_dir() / f"{name}.json"
    except RuntimeError:  # no HOME and no passwd entry (a container run as an arbitrary uid): no cache
        return render(target)
    cached = _read(path, name)
    if cached is not None:
        return cached
    rendered = render(target)
    from ..codemods.append_to_module import block_index

    rendered = dataclasses.replace(rendered, block_index=block_index(rendered.block))
    _write(path, name, rendered)
    return rendered


def _digest(name: str, fields: dict) -> str:
    """sha256 (hex) binding an entry's fields to its key ``name``: an entry copied under another
    key's name, or edited by hand, no longer matches and is rendered afresh."""
    return hashlib.sha256(json.dumps([name, fields], sort_keys=True).encode()).hexdigest()


def _read(path: Path, name: str) -> Rendered | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    names = [f.name for f in dataclasses.fields(Rendered)]
    if not isinstance(data, dict) or sorted(data) != sorted([*names, "digest"]):
        return None
    digest = data.pop("digest")
    if digest != _digest(name, data):
        return None
    if not all(isinstance(data[n], str) for n in ("op_name", "redirect", "block")) or not data["op_name"].startswith("fp4patch::"):
        return None
    index = data["block_index"]
    if not (
        isinstance(index, list) and len(index) == 2 and isinstance(index[0], list) and index[0]
        and all(isinstance(k, str) for k in index[0])
        and isinstance(index[1], list) and len(index[1]) == 2 and all(isinstance(k, str) for k in index[1])
    ):
        return None
    return Rendered(**{**data, "block_index": (tuple(index[0]), tuple(index[1]))})


def _write(path: Path, name: str, rendered: Rendered) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                fields = json.loads(json.dumps(dataclasses.asdict(rendered)))  # tuples as the reader sees them
                json.dump({**fields, "digest": _digest(name, fields)}, f)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass  # an unwritable cache costs time only
