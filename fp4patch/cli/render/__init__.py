"""Output of the commands, from reports as plain data: terminal text, JSON and GitHub Actions annotations.

Reports here are the dicts of ``--json`` (:meth:`fp4patch.engine.SpecReport.to_json`, described
by ``docs/json-schema.json``), so that a report computed now and one recorded by ``apply``
(:mod:`fp4patch.engine.verdict`) print the same bytes. One module per format: :mod:`.text` (aligned plain lines, ANSI-coloured
on a terminal, in logs and on terminals alike) over :mod:`.terminal` (consoles, colour, wrapping), :mod:`.json_output`,
:mod:`.github`; :mod:`.advice` says what to run next; :mod:`.output` picks the format for each command. rich is imported
only for the consoles ``out`` and ``err`` and the scan's table (never by ``verify_output``), typer and libcst never:
the console script's fast path (:mod:`fp4patch.cli.entry`) prints through this package.

This package imports nothing from the commands (:mod:`fp4patch.cli`) and reads no environment: its functions take
reports and print them. The names below are what ``fp4patch.render`` offered before the package (kept there too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .advice import apply_command, blocking, failure_hint, state_message
from .github import escape_annotation, escape_property, failed_annotation, function_line, github_annotations, workflow_command
from .json_output import JSON_SCHEMA_VERSION, error_json, print_json
from .output import FORMATS, apply_output, output_conflict, status_output, verify_output
from .terminal import LOG_WIDTH, MIN_COLUMN, aligned, is_quiet, is_terminal, log_width, paint, use_color, wrap, wrapped
from .text import (
    SCAN_STYLE,
    STATE_STYLE,
    basis_note,
    inherited_lines,
    nothing_to_change,
    opcheck_lines,
    reports_lines,
    scan_detail,
    scan_lines,
    scan_summary,
    scan_table,
    skipped_lines,
    split_declared,
    trace_lines,
)

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "FORMATS", "JSON_SCHEMA_VERSION", "LOG_WIDTH", "MIN_COLUMN", "SCAN_STYLE", "STATE_STYLE", "aligned", "apply_command", "apply_output",
    "basis_note", "blocking", "error_json", "escape_annotation", "escape_property", "failed_annotation", "failure_hint", "function_line", "github_annotations",
    "inherited_lines", "is_quiet", "is_terminal", "log_width", "nothing_to_change", "opcheck_lines", "output_conflict", "paint", "print_json",
    "reports_lines", "scan_detail", "scan_lines", "scan_summary", "scan_table", "skipped_lines", "split_declared", "state_message",
    "status_output", "trace_lines", "use_color", "verify_output", "workflow_command", "wrap", "wrapped",
]


def __getattr__(name: str) -> Console:
    """``render.out`` and ``render.err``, the rich consoles, made on first use (:mod:`.terminal`; PEP 562).

    Raises:
        AttributeError: for any other name.
    """
    if name in ("out", "err"):
        from . import terminal

        return getattr(terminal, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
