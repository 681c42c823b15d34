"""Output of the commands, from reports as plain data: terminal text, JSON and GitHub Actions annotations.

Reports here are the dicts of ``--json`` (:meth:`fp4patch.engine.report.SpecReport.to_json`, described by
``docs/json-schema.json``). One module per format: :mod:`.text` (aligned plain lines, ANSI-coloured on a terminal)
over :mod:`.terminal` (the rich consoles, colour, wrapping), :mod:`.json_output`, :mod:`.github`; :mod:`.advice` says
what to run next; :mod:`.output` picks the format for each command. This package imports nothing from the commands
(:mod:`fp4patch.cli`): its functions take reports and print them.
"""

from __future__ import annotations

from .advice import apply_command, blocking, failure_hint, state_message
from .github import escape_annotation, escape_property, failed_annotation, function_line, github_annotations, workflow_command
from .json_output import JSON_SCHEMA_VERSION, error_json, print_json
from .output import FORMATS, apply_output, output_conflict, status_output, verify_output
from .terminal import LOG_WIDTH, MIN_COLUMN, aligned, err, is_quiet, is_terminal, log_width, out, paint, use_color, wrap, wrapped
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

__all__ = [
    "FORMATS", "JSON_SCHEMA_VERSION", "LOG_WIDTH", "MIN_COLUMN", "SCAN_STYLE", "STATE_STYLE", "aligned", "apply_command", "apply_output",
    "basis_note", "blocking", "err", "error_json", "escape_annotation", "escape_property", "failed_annotation", "failure_hint", "function_line", "github_annotations",
    "inherited_lines", "is_quiet", "is_terminal", "log_width", "nothing_to_change", "opcheck_lines", "out", "output_conflict", "paint", "print_json",
    "reports_lines", "scan_detail", "scan_lines", "scan_summary", "scan_table", "skipped_lines", "split_declared", "state_message",
    "status_output", "trace_lines", "use_color", "verify_output", "workflow_command", "wrap", "wrapped",
]

