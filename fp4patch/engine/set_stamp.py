"""The set stamp: every file one ``apply`` (or ``revert --spec``) leaves patched says which set it belongs to.

Each write of ``apply`` and ``revert`` is atomic, file by file, but a set of files is not: a process that imports
FlashInfer while fp4patch writes (a rolling deploy on a shared volume, a notebook while a terminal patches) may load
some modules before and some after, and an ``apply`` killed after its second file leaves two patched files beside
unpatched ones until the next ``apply``. An importer must never compile through such a half-patched set.

So every file of the set fp4patch leaves patched ends with a *stamp* (:func:`stamp`), appended after the patched
code (never inside a rendered op block: the op names fingerprint the rendered code, not the stamp):

- the set's *token* (:func:`set_token`): 16 hex digits of a sha256 over every file of the set as patched, stamp
  left out, so it names the set's contents: the same specs on the same release give the same token, and any other
  content another;
- the modules of the set (:func:`module_name`), and where fp4patch's record is, relative to the file;
- a check run when the module is imported: whether the record (``manifest.json``, written after every file and its
  bytecode, :mod:`fp4patch.engine.journal`) names this token then. A module imported while an operation writes, or after
  one was killed, sees another token or none.

The patched code reads the stamp where it decides to trace through fp4patch's op (the set piece of
:mod:`fp4patch.ops.redirect`): it does so only when this module's stamp was confirmed at import and every module of
the set loaded in the process carries the same confirmed token. Otherwise the function traces as its unpatched
code would, and one warning per process says why. A module written by anything but ``apply`` (a rendered block
run as is) has no stamp and is not checked. docs/reliability.md says what is promised.

Byte-exact: :func:`strip` gives back exactly the bytes :func:`stamp` was given, so plans work on the unstamped
code (:mod:`fp4patch.engine.sources`) and ``revert`` restores originals byte for byte (they never carry a stamp).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

#: The stamp's first line starts with this, at the start of a line, after one newline added to the file.
MARKER = b"# fp4patch set "
#: A stamp as :func:`stamp` writes it (any newline), from its first line to the end of the file.
_STAMP = re.compile(
    rb"# fp4patch set (?P<token>[0-9a-f]{16}): .*?\n_fp4patch_set = \(\r?\n.*\r?\ndel _fp4patch_set_seen\r?\n\Z", re.DOTALL
)

_TEMPLATE = '''# fp4patch set {token}: one of the {count} file(s) that fp4patch wrote together; their patched code traces only
# while fp4patch's record names this set (see fp4patch's docs/reliability.md, "Importing while apply runs").
def _fp4patch_set_seen(token, record):
    import json
    import os

    try:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), record)
        with open(path, "rb") as handle:
            found = json.loads(handle.read()).get("set_token")
    except FileNotFoundError:
        return "no fp4patch record at " + record + ": an apply or revert is running, or was interrupted"
    except Exception as exc:
        return "cannot read fp4patch's record " + record + " (" + type(exc).__name__ + ")"
    if found != token:
        return "fp4patch's record names another set (" + str(found) + "): an apply or revert ran meanwhile"
    return True


_fp4patch_set = (
    "{token}",
{modules}    _fp4patch_set_seen("{token}", "{record}"),
)
del _fp4patch_set_seen
'''


def module_name(relative: str) -> str:
    """The module a site-packages-relative file is imported as: ``flashinfer/gemm/gemm_base.py`` →
    ``flashinfer.gemm.gemm_base``, ``flashinfer/__init__.py`` → ``flashinfer``."""
    parts = relative.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def set_token(unstamped: Mapping[str, bytes]) -> str:
    """16 hex digits naming a set: ``unstamped`` maps each file of the set (site-packages-relative) to its patched
    bytes without a stamp. The same contents give the same token, whatever order or run."""
    digest = hashlib.sha256()
    for relative in sorted(unstamped):
        digest.update(relative.encode() + b"\0" + hashlib.sha256(unstamped[relative]).digest())
    return digest.hexdigest()[:16]


def newline(data: bytes) -> bytes:
    """The file's newline: ``\\r\\n`` when its first line ends so, else ``\\n``."""
    first = data.find(b"\n")
    return b"\r\n" if first > 0 and data[first - 1 : first] == b"\r" else b"\n"


#: The first indented block of a file: a line ending with ``:`` and the indent of the next line that has code.
_FIRST_BLOCK = re.compile(rb":[ \t]*\r?\n(?:[ \t]*\r?\n)*([ \t]+)\S")


def indent_unit(data: bytes) -> str:
    """The file's indent (its first indented block's, as libcst reads it): four spaces where none is found."""
    found = _FIRST_BLOCK.search(data)
    return found[1].decode("ascii") if found else "    "


def stamp(unstamped: bytes, token: str, relatives: list[str], record: str) -> bytes:
    """``unstamped`` (a file's patched bytes) with the stamp of the set ``token`` of the files ``relatives``
    (site-packages-relative) appended, in the file's own newline and indent (:func:`indent_unit`: a file indented
    with tabs keeps no line of spaces), after one newline; ``record`` is fp4patch's manifest relative to the file's
    folder (POSIX). :func:`strip` gives ``unstamped`` back."""
    nl = newline(unstamped)
    modules = "    (\n" + "".join(f"        {module_name(r)!r},\n" for r in sorted(relatives)) + "    ),\n"
    text = _TEMPLATE.format(token=token, count=len(relatives), modules=modules, record=record)
    unit = indent_unit(unstamped)
    if unit != "    ":
        text = re.sub(r"(?m)^((?:    )+)", lambda m: unit * (len(m[1]) // 4), text)
    return unstamped + nl + text.replace("\n", nl.decode()).encode("ascii")


def find(data: bytes) -> int:
    """Where the stamp of ``data`` starts (at the newline :func:`stamp` added before it), or -1 when it has none."""
    start = data.rfind(MARKER)
    while start > 0:
        if data[start - 1 : start] == b"\n" and _STAMP.match(data, start):
            return start - len(newline(data))
        start = data.rfind(MARKER, 0, start)
    return -1


def strip(data: bytes) -> bytes:
    """``data`` without its stamp: exactly the bytes :func:`stamp` was given (``data`` itself when it has none)."""
    at = find(data)
    return data if at < 0 else data[:at]


def token_of(data: bytes) -> str | None:
    """The set token of ``data``'s stamp, or None when it has none."""
    at = find(data)
    if at < 0:
        return None
    found = _STAMP.match(data, data.index(MARKER, at))
    return found["token"].decode() if found else None


def restamp(unstamped: Mapping[str, bytes], record: str) -> tuple[str, dict[str, bytes]]:
    """``(token, stamped bytes by file)`` for the set ``unstamped`` (each file's patched bytes without a stamp, by
    site-packages-relative path): every file gets the same token and module list. ``record``: fp4patch's manifest,
    relative to site-packages (POSIX)."""
    import posixpath

    token = set_token(unstamped)
    relatives = sorted(unstamped)
    return token, {r: stamp(unstamped[r], token, relatives, posixpath.relpath(record, posixpath.dirname(r) or ".")) for r in relatives}
