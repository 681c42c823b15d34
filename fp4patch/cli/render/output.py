"""Each command's report in the output format asked for: table (terminal text), JSON or GitHub annotations.

Owns the choice of format (``--json``, ``--format``, ``--quiet`` and what contradicts what); the formats are
:mod:`.text`, :mod:`.json_output` and :mod:`.github`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .github import github_annotations
from .json_output import apply_json, print_json, status_json, verify_json
from .terminal import is_quiet
from .text import apply_lines, status_lines, verify_lines

#: Output formats of ``verify --format``.
FORMATS = ("table", "json", "github")


def verify_output(
    header: dict[str, Any],
    reports: list[dict[str, Any]],
    ok: bool,
    ok_states: Iterable[str],
    output: str,
    interrupted: str | None = None,
    cases: list[dict[str, Any]] | None = None,
    specs: Mapping[str, Any] | None = None,
    quiet: bool = False,
    opcheck: list[dict[str, Any]] | None = None,
    functions: list[dict[str, Any]] | None = None,
    apply_options: Sequence[str] = (),
    left_out: Sequence[str] = (),
    trace_note: str = "",
    apply_refused: str | None = None,
) -> None:
    """Print what ``fp4patch verify`` prints for ``reports`` (``--json`` dicts) in ``output``
    format ``table``, ``json`` or ``github``. ``header`` holds ``schema``, ``distribution``,
    ``version`` and ``site_packages`` (strings); ``cases`` are ``--trace`` results or None;
    ``functions`` the scan results of the patched functions ``--trace`` compiled (or None);
    ``apply_options`` the target and specs options verify was given, for the advised ``fp4patch apply``
    (:func:`fp4patch.cli.render.advice.apply_command`); ``left_out`` one line per spec left out with ``--skip``
    (``left out <id>: --skip``); ``trace_note`` why ``--trace`` ran no probe case (its spec left out), printed in place
    of the cases. ``apply_refused``: why apply would refuse the files of the specs not applied
    (:meth:`fp4patch.engine.Engine.apply_refusal`), or None; JSON gives it as ``apply_refused`` (``interrupted`` stays
    the engine's note on an interrupted run or stale bytecode), the text and annotations lead with it as with ``interrupted``.

    ``table`` is aligned lines (:func:`fp4patch.cli.render.text.verify_lines`), coloured on a
    terminal (:func:`fp4patch.cli.render.terminal.use_color`). ``quiet``
    silences it (JSON and annotations are not affected: the CLI refuses them with ``--quiet``)."""
    if output == "json":
        print_json(verify_json(header, reports, ok, interrupted, left_out, cases, trace_note, opcheck, functions, apply_refused))
        return
    interrupted = interrupted or apply_refused  # what failed, outside the spec states: it leads the failure line
    if output == "github":
        github_annotations(reports, ok_states, Path(header["site_packages"]), cases, specs=specs, functions=functions, interrupted=interrupted,
                           apply_options=apply_options)
    elif not quiet:
        lines = verify_lines(header, reports, ok, ok_states, interrupted, cases, functions, opcheck, apply_options, left_out, trace_note)
        print("\n".join(lines), flush=True)


def output_conflict(as_json: bool, output_format: str | None, quiet: bool) -> str | None:
    """What is wrong with a command's output options, or None: an unknown ``--format``,
    ``--json`` with ``--format`` other than ``json``, or ``--quiet`` with JSON or annotations
    (which are the requested output); the commands refuse these with exit 2."""
    if output_format not in (None, *FORMATS):
        return f"--format {output_format!r}: choose one of {', '.join(FORMATS)}"
    if as_json and output_format not in (None, "json"):
        return f"--json and --format {output_format}: choose one output format"
    if quiet and (as_json or output_format in ("json", "github")):
        given = "--json" if as_json else f"--format {output_format}"
        return f"--quiet and {given}: --quiet prints nothing on stdout; drop one of them"
    return None


def status_output(
    header: dict[str, Any], *, recorded: list[str], stale: str | None, interrupted: str | None, reports: list[dict[str, Any]],
    note: list[str], as_json: bool, quiet: bool = False, skip: Iterable[str] | None = None, apply_refused: str | None = None,
) -> None:
    """Print what ``fp4patch status`` prints: ``header`` (``schema``, ``distribution``, ``version``, ``site_packages``),
    the specs fp4patch's record names (``recorded``), the notes on a stale record and an interrupted run (or None),
    every spec's report (``--json`` dicts), ``note`` (lines on a release fp4patch does not know), the spec ids
    ``--skip`` left out (``skip``, JSON ``left_out``) and why ``apply`` would refuse to write the files of the specs
    not applied (``apply_refused``: :meth:`fp4patch.engine.Engine.apply_refusal`, or None); JSON with
    ``as_json``, nothing with ``quiet``."""
    if as_json:
        print_json(status_json(header, recorded, stale, interrupted, reports, skip, apply_refused))
    elif not quiet:
        print("\n".join(status_lines(header, recorded, stale, interrupted, reports, note, skip, apply_refused)), flush=True)


def apply_output(
    header: dict[str, Any], *, selected: list[str], reports: list[dict[str, Any]], required: Iterable[str], written: list[tuple[str, list[str]]],
    backups: Path | str, as_json: bool, skipped: Sequence[dict[str, Any]] = (),
) -> None:
    """Print what ``fp4patch apply`` prints: ``selected`` (spec ids, in order) with their ``reports`` (``--json``
    dicts), ``required`` (ids that may not be left out as unsupported), ``written`` (``(file, spec ids)`` of each file
    written; empty when nothing was), ``backups`` (fp4patch's state directory), ``skipped`` (``{id, state, detail:
    "--skip"}`` of each spec ``--skip`` left out). Text is silenced by ``--quiet`` (the console ``out`` knows it:
    :func:`fp4patch.cli.render.terminal.is_quiet`), JSON is not."""
    required = set(required)
    left_out = [r for r in reports if r["state"] == "unsupported" and r["id"] not in required]
    if as_json:
        print_json(apply_json(header, selected, reports, written, left_out, skipped))
        return
    lines = apply_lines(header, selected, reports, left_out, written, backups, skipped)
    if not is_quiet():
        print("\n".join(lines), flush=True)
