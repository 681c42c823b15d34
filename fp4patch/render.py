"""Terminal, JSON and GitHub Actions output of the commands, from reports as plain data.

Reports here are the dicts of ``--json`` (:meth:`fp4patch.engine.SpecReport.to_json`, described
by ``docs/json-schema.json``), so that a report computed now and one recorded by ``apply``
(:mod:`fp4patch.verdict`) print the same bytes. Tables are aligned plain lines, ANSI-coloured on
a terminal, in logs and on terminals alike; rich is imported only for the consoles ``out`` and
``err`` (never by ``verify_output``), typer and libcst never.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

#: Version of the --json output; docs/json-schema.json describes it. Bump on incompatible changes.
JSON_SCHEMA_VERSION = 1
#: Output formats of ``verify --format``.
FORMATS = ("table", "json", "github")

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
    """``render.out`` and ``render.err``: see :func:`_console` (PEP 562 module attributes)."""
    if name not in ("out", "err"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _console(name)

STATE_STYLE = {
    "applied": "green",
    "applicable": "yellow",
    "drifted": "bold red",
    "not-targeted": "magenta",
    "not-needed": "dim",
    "unsupported": "red",
    "obsolete": "cyan",
    "needs-check": "yellow",
}


#: ANSI SGR codes of the styles above (so that plain lines need no rich import).
_SGR = {"bold yellow": "1;33", "green": "32", "yellow": "33", "bold red": "1;31", "magenta": "35", "dim": "2", "red": "31", "cyan": "36", "bold": "1"}


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


def reports_lines(reports: list[dict[str, Any]], show_summary: bool = False, color: bool = False) -> list[str]:
    """One line per spec report (``--json`` dicts), columns aligned: id, state, and the detail or
    the target files; with ``show_summary`` (``status``): id, state, ``default`` or ``-``, then the
    summary, the target files in parentheses and the detail. Newlines in a detail become spaces."""
    rows = []
    for r in reports:
        files = ", ".join(sorted({t["file"] for t in r["targets"] if t["file"]}))
        row = [(r["id"], "bold"), (r["state"], STATE_STYLE.get(r["state"], ""))]
        note = basis_note(r)
        if show_summary:
            row.append(("default" if r["default"] else "-", ""))
            text = r["summary"] + (f" ({files})" if files else "") + (f": {r['detail']}" if r["detail"] else "") + (f"; {note}" if note else "")
        else:
            text = (r["detail"] or files) + (f"; {note}" if note else "")
        row.append((" ".join(text.split()), ""))
        rows.append(row)
    return aligned(rows, color)


def basis_note(report: dict[str, Any]) -> str:
    """The evidence a report's targets were taken on, when the release is not one the catalog lists
    and the detail does not say it already ("as verified on 0.7.4, same code"); "" otherwise."""
    basis = report.get("basis")
    if not basis or basis["kind"] in ("listed", "no-target", "needs-check", "changed") or report["state"] in ("drifted", "needs-check"):
        return ""
    if basis["kind"] == "declared" and basis["description"] in (report.get("detail") or ""):
        return ""
    return basis["description"]


def inherited_lines(version: str, reports: list[dict[str, Any]], each: bool = True) -> list[str]:
    """For a release the catalog does not list: the specs applied on evidence, one line per
    description ("0.7.5: fp4-quantize-fullgraph, mm-fp4-fullgraph as verified on 0.7.4, same code";
    with ``each`` false only the last line), then the note that the C++ kernels are not compared
    (run ``verify --opcheck`` on a GPU). [] when no spec was taken on evidence."""
    from .evidence import INHERITED, OPCHECK_NOTE

    taken = [r for r in reports if r.get("basis") and r["basis"]["kind"] in INHERITED and r["state"] not in ("drifted",)]
    if not taken:
        return []
    groups: dict[str, list[str]] = {}
    for r in taken:
        groups.setdefault(r["basis"]["description"], []).append(r["id"])
    lines = [line for description, ids in groups.items() for line in wrap(f"{version}: {', '.join(ids)} {description}")] if each else []
    return [*lines, *wrap(f"note: {version} is not a release fp4patch was verified on; {OPCHECK_NOTE}")]


def skipped_lines(skip: Iterable[str] | None) -> list[str]:
    """``left out <id>: --skip`` for each spec ``--skip`` names, once each: what ``apply``, ``verify`` and ``scan``
    print alike for a spec left out by name."""
    return [f"left out {spec_id}: --skip" for spec_id in dict.fromkeys(skip or ())]


def trace_lines(cases: list[dict[str, Any]], color: bool = False) -> list[str]:
    """``verify --trace`` cases (:mod:`fp4patch.trace`) as a title line and aligned rows: case,
    PASS/FAIL, graphs, graph breaks, custom ops, output layout (or the error's first line)."""
    passed = sum(1 for c in cases if c.get("passed"))
    rows = [[(h, "") for h in ("case", "result", "graphs", "breaks", "custom ops", "layout")]]
    for c in cases:
        ok = bool(c.get("passed")) and not c.get("error")
        result = ("PASS", "green") if ok else ("FAIL", "red")
        if c.get("error"):
            error = " ".join(str(c["error"]).split())
            if c.get("root_cause"):  # what a TorchRuntimeError hides: the exception behind it, and where
                error += f" (root cause: {c['root_cause']}{' at ' + c['root_location'] if c.get('root_location') else ''})"
            rows.append([(c["name"], ""), result, (str(c.get("graphs", "")), ""), ("", ""), ("", ""), (error, "")])
            continue
        layout = "ok" if c.get("layout_ok") else f"expected {c.get('expected')} got {c.get('traced')}"
        rows.append([
            (c["name"], ""),
            result,
            (str(c.get("graphs", "")), ""),
            (str(c.get("graph_breaks", "")), ""),
            (", ".join(c.get("custom_ops") or []) or "-", ""),
            (layout, ""),
        ])
    return [f"fullgraph trace: {passed}/{len(cases)} cases passed", *aligned(rows, color)]


def opcheck_lines(results: list[dict[str, Any]]) -> list[str]:
    """Plain lines for ``verify --opcheck`` results (:func:`fp4patch.trace.run_opcheck`): a count per
    status, then one aligned line per case that did not pass (function, case, status, detail)."""
    counts = {status: sum(1 for r in results if r["status"] == status) for status in ("passed", "failed", "skipped")}
    lines = [f"opcheck against the real kernels: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"]
    width = max((len(r["function"]) for r in results), default=0)
    for r in results:
        if r["status"] != "passed":
            lines.append(f"  {r['function']:<{width}}  {r['case']}  {r['status']}  {r['detail']}")
    return lines


SCAN_STYLE = {"compiles": "green", "fails": "red", "not-present": "dim", "no-call": "yellow", "not-needed": "cyan", "left-out": "cyan"}


def scan_detail(r: dict[str, Any]) -> str:
    """One line for a scan result (``scan_probe.py``): ``compiles (1 graph, ops: ...)``, the Dynamo
    error's first line with the ``flashinfer/FILE.py:LINE`` where tracing stopped and that source
    line, or ``not present``."""
    from .scan_probe import describe

    if r["status"] == "left-out":  # set by fp4patch (trace.leave_out): its spec left out with --skip
        return f"{r['declared']} (the scan saw: {r.get('scanned')})"
    return describe(r)


def scan_table(title: str, results: list[dict[str, Any]]) -> Table:
    """A rich table of scan results: function, result, and the detail (ops, or error and where)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("function", style="bold", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for r in results:
        style = SCAN_STYLE.get(r["status"], "")
        table.add_row(escape(r["name"]), f"[{style}]{r['status']}[/]", escape(scan_detail(r)))
    return table


def scan_lines(results: list[dict[str, Any]]) -> list[str]:
    """Plain text for logs: one aligned line per scan result, ``  <function>  <detail>``."""
    return aligned([[(r["name"], ""), (scan_detail(r), "")] for r in results])


def scan_summary(results: list[dict[str, Any]]) -> str:
    """``N/M present functions compile as one graph``, then ``; K declared not needed (names)`` for the functions
    a spec declares ``not-needed`` (:func:`fp4patch.trace.declare_not_needed`) and ``; J left out with --skip (names)``
    for those whose spec ``--skip`` names (:func:`fp4patch.trace.leave_out`), which M does not count."""
    present = [r for r in results if r["status"] not in ("not-present", "not-needed", "left-out")]
    declared = [r["name"] for r in results if r["status"] == "not-needed"]
    skipped = [r["name"] for r in results if r["status"] == "left-out"]
    line = f"{sum(1 for r in present if r['status'] == 'compiles')}/{len(present)} present functions compile as one graph"
    line += f"; {len(declared)} declared not needed, not counted ({', '.join(declared)})" if declared else ""
    return line + (f"; {len(skipped)} left out with --skip, not counted ({', '.join(skipped)})" if skipped else "")


def failure_hint(
    reports: list[dict[str, Any]],
    ok_states: Iterable[str],
    cases: list[dict[str, Any]] | None,
    functions: list[dict[str, Any]] | None = None,
    interrupted: str | None = None,
    apply_options: Sequence[str] = (),
) -> str:
    """One line: what failed and what to do next. ``interrupted`` is the engine's note when
    verify fails for a reason outside the spec states (an interrupted apply, stale bytecode:
    :meth:`fp4patch.engine.Engine.interrupted`); it leads the line, so stdout carries the reason
    even when every spec state is fine. ``apply_options``: see :func:`apply_command`."""
    ok_states = set(ok_states)
    by_state: dict[str, list[str]] = {}
    for r in reports:
        if r["state"] not in ok_states:
            by_state.setdefault(r["state"], []).append(r["id"])
    parts = [interrupted] if interrupted else []
    parts += [f"{state}: {', '.join(ids)}" for state, ids in by_state.items()]
    blocked = blocking(reports, ok_states)
    waiting = [r for r in reports if r["state"] in ("applicable", "needs-check") and r["state"] not in ok_states]
    if waiting and not interrupted:  # the note carries its own instruction (finish, revert --force first, ...): one a state
        parts.append(f"run `{apply_command(waiting, apply_options, blocked)}`")
    if blocked:
        parts.append("see the detail column; upstream changed or the version is not covered")
    failed_cases = [c for c in cases or [] if not c.get("passed")]
    if failed_cases:
        parts.append(f"{len(failed_cases)} trace case(s) failed")
    failed_functions = [r["name"] for r in functions or [] if not r.get("passed")]
    if failed_functions:
        parts.append(f"patched function(s) not compiling as one graph: {', '.join(failed_functions)}")
    return "; ".join(parts) or "see above"


def blocking(reports: list[dict[str, Any]], ok_states: Iterable[str]) -> list[str]:
    """Ids of the specs that make ``apply`` refuse (drifted, not targeted, unsupported where that
    fails): an advised ``apply`` leaves them out with ``--skip`` so that it works as written."""
    ok_states = set(ok_states)
    return [r["id"] for r in reports if r["state"] in ("drifted", "not-targeted", "unsupported") and r["state"] not in ok_states]


def apply_command(reports: list[dict[str, Any]], options: Sequence[str] = (), skip: Sequence[str] = ()) -> str:
    """The command that applies the specs of ``reports`` (``--json`` report dicts: ``id``, ``default``):
    ``fp4patch apply`` when each is a default spec (a plain apply applies those), else
    ``fp4patch apply --spec a --spec b`` (a plain apply would leave a non-default spec out).

    ``options``: the checking command's target and specs options (``--python P``, ``--site-packages D``,
    ``--specs-dir D``), put after ``apply`` so that the command works as written: without them it
    patches another environment or does not know a spec of ``--specs-dir``. Shell-quoted
    (:func:`shlex.join`)."""
    words = ["fp4patch", "apply", *options]
    if not all(r.get("default", True) for r in reports):
        words += [w for r in reports for w in ("--spec", r["id"])]
    else:
        words += [w for i in skip for w in ("--skip", i)]  # (a --spec selection names none of them)
    return shlex.join(words)


def state_message(spec_id: str, state: str, default: bool = True, apply_options: Sequence[str] = (), skip: Sequence[str] = ()) -> str:
    """One sentence for a spec that failed a check in ``state`` and has no detail of its own,
    saying what to do (``applicable``: the spec is not applied; :func:`apply_command` applies it,
    ``default`` saying whether a plain ``fp4patch apply`` includes it, ``apply_options`` and ``skip``
    (the specs that would make that apply refuse) as there)."""
    if state == "applicable":
        return f"{spec_id} is not applied (every anchor is present); run `{apply_command([{'id': spec_id, 'default': default}], apply_options, skip)}`"
    return f"{spec_id} is {state}"


def escape_annotation(text: str) -> str:
    """Escape a GitHub Actions workflow-command message (``%``, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_annotations(
    reports: list[dict[str, Any]],
    ok_states: Iterable[str],
    site_packages: Path | None,
    cases: list[dict[str, Any]] | None = None,
    prefix: str = "",
    specs: Mapping[str, Any] | None = None,
    functions: list[dict[str, Any]] | None = None,
    interrupted: str | None = None,
    apply_options: Sequence[str] = (),
) -> None:
    """GitHub Actions workflow commands on stdout: a ``::notice`` per passing spec; per failing
    spec one ``::error`` at the spec file's target line and one at the upstream function's line
    (``specs`` maps ids to :class:`fp4patch.spec.Spec` for those; required when one fails), and an
    ``::error`` per failed trace case and per patched function of the scan that does not compile
    (``functions``). ``interrupted`` (:meth:`fp4patch.engine.Engine.interrupted`: an interrupted
    apply, stale bytecode) is an ``::error`` of its own, first: verify fails on it even when every
    spec passes. ``apply_options``: the target and specs options an advised ``fp4patch apply`` needs
    (:func:`apply_command`)."""
    ok_states = set(ok_states)
    if interrupted:
        print(f"::error title=fp4patch verify failed::{escape_annotation(prefix + interrupted)}")

    def where(path: Path) -> str:
        relative = os.path.relpath(path)
        return str(path) if relative.startswith("..") else relative

    for r in reports:
        title = f"fp4patch {r['id']}: {'not applied' if r['state'] == 'applicable' and r['state'] not in ok_states else r['state']}"
        if r["state"] in ok_states:
            print(f"::notice title={title}::{escape_annotation(prefix + r['id'] + ' ' + r['state'])}")
            continue
        spec = (specs or {})[r["id"]]
        files = {t["file"] for t in r["targets"]}
        spec_line = next((t.line for t in spec.targets if t.file and t.file in files), 1)
        if not r["detail"] and interrupted and r["state"] == "applicable":
            # the first error says what to run (an apply would be refused or is not the first step): one instruction
            detail = f"{r['id']} is not applied; do what the first error says"
        else:
            detail = r["detail"] or state_message(r["id"], r["state"], r.get("default", True), apply_options, blocking(reports, ok_states))
        message = escape_annotation(prefix + detail)
        print(f"::error file={where(spec.path)},line={spec_line},title={title}::{message}")
        for target in r["targets"]:
            if not target["file"] or site_packages is None:
                continue
            upstream = site_packages / target["file"]
            line = function_line(upstream, spec, target["file"])
            print(f"::error file={where(upstream)},line={line},title={title}::{message}")
    for case in cases or []:
        if not case.get("passed"):
            detail = case.get("error") or f"layout expected {case.get('expected')} got {case.get('traced')}"
            print(f"::error title=fp4patch trace {escape_annotation(case['name'])}::{escape_annotation(detail)}")
    for r in functions or []:
        if not r.get("passed"):
            print(f"::error title=fp4patch trace {escape_annotation(r['name'])}::{escape_annotation(scan_detail(r))}")


def function_line(path: Path, spec: Any, relative: str) -> int:
    """Line of the first function a spec's operations name in ``path`` (1 when not found)."""
    import ast

    names = {op_kwargs.get("function", "").split(".")[-1] for t in spec.targets if t.file == relative for _, op_kwargs in t.operation_specs}
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return 1
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            return node.lineno
    return 1


def is_terminal() -> bool:
    """True when stdout is a terminal, or rich is told to treat it as one (``FORCE_COLOR``,
    ``TTY_COMPATIBLE=1``): then the aligned lines are coloured (see :func:`use_color`)."""
    return sys.stdout.isatty() or bool(os.environ.get("FORCE_COLOR")) or os.environ.get("TTY_COMPATIBLE") == "1"


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
) -> None:
    """Print what ``fp4patch verify`` prints for ``reports`` (``--json`` dicts) in ``output``
    format ``table``, ``json`` or ``github``. ``header`` holds ``schema``, ``distribution``,
    ``version`` and ``site_packages`` (strings); ``cases`` are ``--trace`` results or None;
    ``functions`` the scan results of the patched functions ``--trace`` compiled (or None);
    ``apply_options`` the target and specs options verify was given, for the advised ``fp4patch apply``
    (:func:`apply_command`); ``left_out`` one line per spec left out with ``--skip`` (``left out <id>: --skip``);
    ``trace_note`` why ``--trace`` ran no probe case (its spec left out), printed in place of the cases.

    ``table`` is aligned lines (:func:`reports_lines`, :func:`trace_lines`), coloured on a
    terminal (:func:`use_color`); it imports nothing beyond the standard library. ``quiet``
    silences it (JSON and annotations are not affected: the CLI refuses them with ``--quiet``)."""
    if output == "json":
        payload = {**header, "ok": ok, "interrupted": interrupted, "specs": reports}
        if left_out:
            payload["left_out"] = [line.split(" ")[2].rstrip(":") for line in left_out]
        if cases is not None:
            payload["trace"] = cases
        if trace_note:
            payload["trace_note"] = trace_note
        if opcheck is not None:
            payload["opcheck"] = opcheck
        if functions is not None:
            payload["trace_functions"] = functions
        print(json.dumps(payload, indent=2))
    elif output == "github":
        github_annotations(reports, ok_states, Path(header["site_packages"]), cases, specs=specs, functions=functions, interrupted=interrupted,
                           apply_options=apply_options)
    elif not quiet:
        color = use_color()
        lines = [f"{paint(header['distribution'] + ' ' + header['version'], 'bold', color)} in {header['site_packages']}"]
        lines += reports_lines(reports, color=color)
        lines += list(left_out)
        lines += inherited_lines(header["version"], reports, each=False)
        if cases is not None:
            lines += trace_lines(cases, color)
        if trace_note:
            lines.append(f"fullgraph trace: left out ({trace_note})")
        if functions:
            lines += ["patched functions under fullgraph:", *scan_lines(functions)]
        if opcheck is not None:
            lines += opcheck_lines(opcheck)
        if ok:
            lines.append(paint("verify: ok", "green", color))
        else:
            first, *rest = wrap(f"verify: failed — {failure_hint(reports, ok_states, cases, functions, interrupted, apply_options)}")
            lines += [first.replace("verify: failed", paint("verify: failed", "red", color), 1), *rest]
        print("\n".join(lines), flush=True)


def output_conflict(as_json: bool, output_format: str | None, quiet: bool) -> str | None:
    """What is wrong with a command's output options, or None: an unknown ``--format``,
    ``--json`` with ``--format`` other than ``json``, or ``--quiet`` with JSON or annotations
    (which are the requested output). The CLI and the fast path (:mod:`fp4patch.entry`) both
    refuse these with exit 2."""
    if output_format not in (None, *FORMATS):
        return f"--format {output_format!r}: choose one of {', '.join(FORMATS)}"
    if as_json and output_format not in (None, "json"):
        return f"--json and --format {output_format}: choose one output format"
    if quiet and (as_json or output_format in ("json", "github")):
        given = "--json" if as_json else f"--format {output_format}"
        return f"--quiet and {given}: --quiet prints nothing on stdout; drop one of them"
    return None


def split_declared(ids: list[str], reports: list[dict]) -> tuple[list[str], str]:
    """``ids`` without the specs whose report declares them not to apply here (``not-needed``,
    ``obsolete``: a spec's own data for this release) or finds them not applied now (``applicable``,
    ``drifted``...: a recorded spec after ``pip install --force-reinstall`` or a hand edit), and those
    as clauses for a summary line (``"; not needed on this release: a (not-needed), b (obsolete)"``,
    ``"; recorded, but not applied now (reinstalled or edited?): c (applicable)"``, or ``""``).

    Args:
        ids: spec ids, in the order to print them.
        reports: :meth:`fp4patch.engine.SpecReport.to_json` dicts (``id``, ``state``); an id without
            a report stays in the first list.
    """
    states = {r["id"]: r["state"] for r in reports}
    declared = [i for i in ids if states.get(i) in ("not-needed", "obsolete")]
    lost = [i for i in ids if states.get(i, "applied") not in ("applied", "not-needed", "obsolete")]
    kept = [i for i in ids if i not in declared and i not in lost]
    clause = f"; not needed on this release: {', '.join(f'{i} ({states[i]})' for i in declared)}" if declared else ""
    if lost:
        clause += f"; recorded, but not applied now (reinstalled or edited?): {', '.join(f'{i} ({states[i]})' for i in lost)}"
    return kept, clause


def status_output(
    header: dict[str, Any], recorded: list[str], stale: str | None, interrupted: str | None, reports: list[dict[str, Any]],
    note: list[str], as_json: bool, quiet: bool = False, skip: Iterable[str] | None = None,
) -> None:
    """Print what ``fp4patch status`` prints: ``header`` (``schema``, ``distribution``, ``version``, ``site_packages``),
    the specs fp4patch's record names (``recorded``), the notes on a stale record and an interrupted run (or None),
    every spec's report (``--json`` dicts), ``note`` (lines on a release fp4patch does not know) and the spec ids
    ``--skip`` left out (``skip``, JSON ``left_out``); JSON with
    ``as_json``, nothing with ``quiet``. Shared by the CLI and the recorded fast path (:mod:`fp4patch.entry`)."""
    if as_json:
        left_out = {"left_out": list(dict.fromkeys(skip))} if skip else {}
        print(json.dumps({**header, "recorded": recorded, "stale_record": stale, "interrupted": interrupted, "specs": reports, **left_out}, indent=2))
        return
    if quiet:
        return
    color = use_color()
    kept, declared = split_declared(recorded, reports)
    lines = [
        f"{paint(header['distribution'] + ' ' + header['version'], 'bold', color)} in {header['site_packages']}",
        *wrap(f"recorded as applied by fp4patch: {', '.join(kept) if kept else 'nothing'}{declared}"),
        *(wrap(f"stale record: {stale}") if stale else []),
        *(wrapped(f"interrupted: {interrupted}").replace("interrupted:", paint("interrupted:", "red", color), 1).split("\n") if interrupted else []),
        *reports_lines(reports, show_summary=True, color=color),
        *skipped_lines(skip),
        *note,
    ]
    print("\n".join(lines), flush=True)


def apply_output(
    header: dict[str, Any], selected: list[str], reports: list[dict[str, Any]], required: Iterable[str], written: list[tuple[str, list[str]]],
    backups: Path | str, as_json: bool, skipped: Sequence[dict[str, Any]] = (),
) -> None:
    """Print what ``fp4patch apply`` prints: ``selected`` (spec ids, in order) with their ``reports`` (``--json``
    dicts), ``required`` (ids that may not be left out as unsupported), ``written`` (``(file, spec ids)`` of each file
    written; empty when nothing was), ``backups`` (fp4patch's state directory), ``skipped`` (``{id, state, detail:
    "--skip"}`` of each spec ``--skip`` left out). Shared by the CLI and the recorded
    fast path of an apply that has nothing to write (:mod:`fp4patch.entry`)."""
    required = set(required)
    left_out = [r for r in reports if r["state"] == "unsupported" and r["id"] not in required]
    if as_json:
        print(json.dumps({
            **header,
            "specs": list(selected),
            "written": [relative for relative, _ in written],
            "left_out": [{"id": r["id"], "state": r["state"], "detail": r["detail"]} for r in left_out] + list(skipped),
            "basis": {r["id"]: r["basis"] for r in reports if r.get("basis") and r["basis"]["kind"] != "listed"},
        }, indent=2))
        return
    lines = []
    ids, declared = split_declared([i for i in selected if i not in {r["id"] for r in left_out}], reports)
    if not written:
        # only declared specs selected: nothing was ever applied, so not 'already applied'
        done = f"already applied ({', '.join(ids)})" if ids else "nothing to apply"
        lines += wrap(f"{header['distribution']} {header['version']}: {done}{declared}; nothing written")
    for relative, specs in written:
        lines += wrap(f"patched {relative} ({', '.join(specs)})")
    if written:
        lines += wrap(f"{header['distribution']} {header['version']}: applied {', '.join(ids)}{declared}; backups in {backups}")
    for r in left_out:
        lines += wrap(f"left out {r['id']}: unsupported on {header['version']}: {r['detail']} (`--strict` makes this an error)")
    lines += skipped_lines([r["id"] for r in skipped])
    lines += inherited_lines(header["version"], reports)
    if not _quiet():
        print("\n".join(lines), flush=True)


def _quiet() -> bool:
    """Whether the command runs with ``--quiet`` (the rich console ``out`` knows it once the CLI set it)."""
    console = _consoles.get("out")
    return bool(console is not None and console.quiet)


def nothing_to_change(header: dict[str, Any], reports: list[dict[str, Any]]) -> str:
    """``diff``'s line when ``apply`` would write nothing: the environment is patched (a selected spec applied), or no
    selected spec needs a change on this release. ``reports``: the selected specs' ``--json`` dicts."""
    applied = [r["id"] for r in reports if r["state"] == "applied"]
    name = f"{header['distribution']} {header['version']}"
    if applied:
        return f"nothing to change: {name} is patched ({len(applied)} selected spec(s) applied; `fp4patch verify` checks it)"
    return f"nothing to change: no selected spec needs a change on {name} (`fp4patch status` says why)"
