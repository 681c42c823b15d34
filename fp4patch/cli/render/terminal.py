"""Terminal primitives of the output: the rich consoles ``out`` and ``err``, colour, widths, wrapping, aligned columns.

Owns how text reaches a terminal or a log, not what it says (:mod:`.text`). Styles and the colour rule are rich's;
wrapping is :mod:`textwrap`'s, with backticked commands kept whole.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from typing import Literal

from rich.color import ColorSystem
from rich.console import Console
from rich.style import Style


def _console(stderr: bool) -> Console:
    """A rich console on stdout or stderr. Colour only on a terminal; ``NO_COLOR`` (any value, https://no-color.org)
    turns every ANSI escape off; a stdout that is not a terminal (CI, docker build) gets :data:`LOG_WIDTH` columns
    instead of rich's default 80, unless ``COLUMNS`` is set."""
    color_system: Literal["auto"] | None = None if os.environ.get("NO_COLOR") else "auto"
    if stderr:
        return Console(stderr=True, highlight=False, soft_wrap=True, color_system=color_system)
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else LOG_WIDTH
    return Console(highlight=False, soft_wrap=True, color_system=color_system, width=width)


#: Columns of a log (stdout not a terminal, no ``COLUMNS``): what the ``out`` console gets too.
LOG_WIDTH = 160
#: The narrowest a wrapped column gets, however far right it starts.
MIN_COLUMN = 40

#: The consoles the commands print through: ``out`` (stdout, silenced by ``--quiet``) and ``err`` (stderr).
out = _console(stderr=False)
err = _console(stderr=True)


def is_quiet() -> bool:
    """Whether the command runs with ``--quiet`` (set on ``out`` by :func:`fp4patch.cli.running.run_body`)."""
    return bool(out.quiet)


def is_terminal() -> bool:
    """True when stdout is a terminal, or rich is told to treat it as one (``FORCE_COLOR``, ``TTY_COMPATIBLE=1``),
    as rich decides it now."""
    return Console().is_terminal


def use_color() -> bool:
    """True when plain lines get ANSI colour, by rich's rule read now: a terminal (:func:`is_terminal`), ``NO_COLOR``
    unset or empty, ``TERM`` not ``dumb``."""
    console = Console()
    return console.is_terminal and console.color_system is not None and not console.no_color


def paint(text: str, style: str, color: bool) -> str:
    """``text`` in the rich ``style`` (``"bold yellow"``; ``""``: none) as ANSI escapes when ``color``, else unchanged."""
    if not (color and style and text):
        return text
    return Style.parse(style).render(text, color_system=ColorSystem.STANDARD)


def log_width() -> int:
    """Columns to wrap plain output at: the terminal's width on a terminal, else ``COLUMNS`` when set to a
    number of at least 40, else :data:`LOG_WIDTH` (a CI or docker build log)."""
    if sys.stdout.isatty():
        return max(shutil.get_terminal_size().columns, MIN_COLUMN)
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) >= MIN_COLUMN else LOG_WIDTH


def wrap(text: str, indent: str = "    ", width: int | None = None) -> list[str]:
    """``text`` (one logical line) as lines of at most ``width`` columns (default :func:`log_width`), the
    continuation lines indented by ``indent``; words are never broken (a spec id, a path or a command that is
    longer than the width stands alone on its line), nor at their hyphens, and a command in backticks stays on one
    line, to be copied whole."""
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
