"""Terminal primitives of the output: the rich consoles ``out`` and ``err``, colour, widths, wrapping, aligned columns.

Owns how text reaches a terminal or a log, not what it says (:mod:`.text`). Standard library only: rich is imported
on the first use of ``out`` or ``err`` (module attributes, PEP 562), never for plain lines, so that the console
script's fast path (:mod:`fp4patch.cli.entry`) prints without it.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

_consoles: dict[str, Console] = {}


def _console(name: str) -> Console:
    """The rich console ``out`` (stdout) or ``err`` (stderr), made on first use so that JSON and
    GitHub output never import rich. Colour only on a terminal; ``NO_COLOR`` (any value,
    https://no-color.org) turns every ANSI escape off; a stdout that is not a terminal (CI, docker
    build) gets 160 columns instead of rich's default 80, unless ``COLUMNS`` is set."""
    if name not in _consoles:
        from rich.console import Console

        color_system = None if os.environ.get("NO_COLOR") else "auto"
        if name == "out":
            width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
            _consoles[name] = Console(highlight=False, soft_wrap=True, color_system=color_system, width=width)
        else:
            _consoles[name] = Console(stderr=True, highlight=False, soft_wrap=True, color_system=color_system)
    return _consoles[name]


def __getattr__(name: str) -> Console:
    """``terminal.out`` and ``terminal.err``: see :func:`_console` (PEP 562 module attributes).

    Raises:
        AttributeError: for any other name.
    """
    if name not in ("out", "err"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _console(name)


def is_quiet() -> bool:
    """Whether the command runs with ``--quiet`` (the rich console ``out`` knows it once the CLI set it:
    :func:`fp4patch.cli.running.run_body`); False before ``out`` was made."""
    console = _consoles.get("out")
    return bool(console is not None and console.quiet)


#: ANSI SGR codes of the styles plain lines use (:data:`fp4patch.cli.render.text.STATE_STYLE`, ``bold``...), so that they need no rich import.
_SGR = {"bold yellow": "1;33", "green": "32", "yellow": "33", "bold red": "1;31", "magenta": "35", "dim": "2", "red": "31", "cyan": "36", "bold": "1"}


def is_terminal() -> bool:
    """True when stdout is a terminal, or rich is told to treat it as one (``FORCE_COLOR``,
    ``TTY_COMPATIBLE=1``): then the aligned lines are coloured (see :func:`use_color`)."""
    return sys.stdout.isatty() or bool(os.environ.get("FORCE_COLOR")) or os.environ.get("TTY_COMPATIBLE") == "1"


def use_color() -> bool:
    """True when plain lines get ANSI colour: stdout is a terminal (:func:`is_terminal`), ``NO_COLOR``
    is unset or empty (https://no-color.org) and ``TERM`` is not ``dumb`` — rich's own rule."""
    return not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb" and is_terminal()


def paint(text: str, style: str, color: bool) -> str:
    """``text`` in ``style`` (a key of :data:`_SGR`, or ``""``) when ``color``, else unchanged."""
    code = _SGR.get(style)
    return f"\x1b[{code}m{text}\x1b[0m" if color and code and text else text


#: Columns of a log (stdout not a terminal, no ``COLUMNS``): what rich's ``out`` console gets too (:func:`_console`).
LOG_WIDTH = 160
#: The narrowest a wrapped column gets, however far right it starts.
MIN_COLUMN = 40


def log_width() -> int:
    """Columns to wrap plain output at: the terminal's width on a terminal, else ``COLUMNS`` when set to a
    number of at least 40, else :data:`LOG_WIDTH` (a CI or docker build log)."""
    if sys.stdout.isatty():
        import shutil

        return max(shutil.get_terminal_size().columns, MIN_COLUMN)
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) >= MIN_COLUMN else LOG_WIDTH


def wrap(text: str, indent: str = "    ", width: int | None = None) -> list[str]:
    """``text`` (one logical line) as lines of at most ``width`` columns (default :func:`log_width`), the
    continuation lines indented by ``indent``; words are never broken (a spec id, a path or a command that is
    longer than the width stands alone on its line), nor at their hyphens, and a command in backticks stays on one
    line, to be copied whole."""
    import re
    import textwrap

    width = width or log_width()
    if len(text) <= width:
        return [text]
    glued = re.sub(r"`[^`]*`", lambda m: m[0].replace(" ", "\0"), text)  # NUL: no output line holds one
    lines = textwrap.wrap(
        glued, width=max(width, len(indent) + MIN_COLUMN), subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )
    return [line.replace("\0", " ") for line in lines] or [text]


def wrapped(text: str, indent: str = "    ", width: int | None = None) -> str:
    """:func:`wrap`'s lines joined with newlines: what a command prints for one long line."""
    return "\n".join(wrap(text, indent, width))


def aligned(rows: list[list[tuple[str, str]]], color: bool = False, indent: str = "  ", width: int | None = None) -> list[str]:
    """Rows of ``(text, style)`` cells as lines with the columns aligned (two spaces apart; the
    last column is not padded; trailing spaces dropped); styles applied when ``color``. A last column that
    would run past ``width`` (default :func:`log_width`) wraps, its continuation lines starting under it."""
    widths = [max((len(row[i][0]) for row in rows if i < len(row)), default=0) for i in range(max((len(r) for r in rows), default=0))]
    width = width or log_width()
    lines = []
    for row in rows:
        cells = []
        start = len(indent)
        for i, (text, style) in enumerate(row):
            if i == len(row) - 1:
                pieces = wrap(text, "", max(width - start, MIN_COLUMN)) if text else [text]
                cells.append(paint(pieces[0], style, color))
                lines.append((indent + "  ".join(cells)).rstrip())
                lines.extend((" " * start + paint(piece, style, color)).rstrip() for piece in pieces[1:])
                break
            cells.append(paint(text, style, color) + " " * (widths[i] - len(text)))
            start += widths[i] + 2
        else:
            lines.append((indent + "  ".join(cells)).rstrip())
    return lines
