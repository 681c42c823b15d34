"""Terminal, JSON and GitHub Actions output of the commands, from reports as plain data.

Reports here are the dicts of ``--json`` (:meth:`fp4patch.engine.SpecReport.to_json`, described
by ``docs/json-schema.json``), so that a report computed now and one recorded by ``apply``
(:mod:`fp4patch.verdict`) print the same bytes. Only rich is imported (no typer, no libcst).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from typing import TYPE_CHECKING

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
}


def reports_table(title: str, reports: list[dict[str, Any]], show_summary: bool = False) -> Table:
    """A table with one row per spec report (``--json`` dicts): id, state, and detail or the
    target files (with ``show_summary``: also whether the spec is a default and its summary)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("spec", style="bold", no_wrap=True)
    table.add_column("state", no_wrap=True)
    if show_summary:
        table.add_column("default")
    table.add_column("summary / detail" if show_summary else "detail", overflow="fold")
    for r in reports:
        style = STATE_STYLE.get(r["state"], "")
        row = [r["id"], f"[{style}]{r['state']}[/]"]
        if show_summary:
            row.append("yes" if r["default"] else "no")
        detail = r["detail"]
        files = ", ".join(sorted({t["file"] for t in r["targets"] if t["file"]}))
        text = (r["summary"] + (f"\n{files}" if files else "") + (f"\n{detail}" if detail else "")) if show_summary else (detail or files)
        row.append(text)
        table.add_row(*row)
    return table


def trace_table(cases: list[dict[str, Any]]) -> Table:
    """A table of ``verify --trace`` cases (:mod:`fp4patch.trace`): result, graphs, breaks, custom ops, layout."""
    from rich.table import Table

    passed = sum(1 for c in cases if c.get("passed"))
    table = Table(title=f"fullgraph trace: {passed}/{len(cases)} cases passed", title_justify="left")
    for column in ("case", "result", "graphs", "breaks", "custom ops", "layout"):
        table.add_column(column, overflow="fold")
    for c in cases:
        if c.get("error"):
            row = [c["name"], "[red]FAIL[/]", str(c.get("graphs", "")), "", "", c["error"]]
        else:
            layout = "ok" if c.get("layout_ok") else f"expected {c.get('expected')} got {c.get('traced')}"
            row = [
                c["name"],
                "[green]PASS[/]" if c.get("passed") else "[red]FAIL[/]",
                str(c.get("graphs", "")),
                str(c.get("graph_breaks", "")),
                ", ".join(c.get("custom_ops") or []) or "-",
                layout,
            ]
        table.add_row(*row)
    return table


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


SCAN_STYLE = {"compiles": "green", "fails": "red", "not-present": "dim", "no-call": "yellow"}


def scan_detail(r: dict[str, Any]) -> str:
    """One line for a scan result (``scan_probe.py``): ``compiles (1 graph, ops: ...)``, the Dynamo
    error's first line with the ``flashinfer/FILE.py:LINE`` where tracing stopped and that source
    line, or ``not present``."""
    from .scan_probe import describe

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
    width = max((len(r["name"]) for r in results), default=0)
    return [f"  {r['name']:<{width}}  {scan_detail(r)}".rstrip() for r in results]


def scan_summary(results: list[dict[str, Any]]) -> str:
    """``N/M present functions compile as one graph``."""
    present = [r for r in results if r["status"] != "not-present"]
    return f"{sum(1 for r in present if r['status'] == 'compiles')}/{len(present)} present functions compile as one graph"


def failure_hint(
    reports: list[dict[str, Any]], ok_states: Iterable[str], cases: list[dict[str, Any]] | None, functions: list[dict[str, Any]] | None = None
) -> str:
    """One line: what failed and what to do next."""
    ok_states = set(ok_states)
    by_state: dict[str, list[str]] = {}
    for r in reports:
        if r["state"] not in ok_states:
            by_state.setdefault(r["state"], []).append(r["id"])
    parts = [f"{state}: {', '.join(ids)}" for state, ids in by_state.items()]
    if "applicable" in by_state:
        parts.append("run `fp4patch apply`")
    if "drifted" in by_state or "unsupported" in by_state or "not-targeted" in by_state:
        parts.append("see the detail column; upstream changed or the version is not covered")
    failed_cases = [c for c in cases or [] if not c.get("passed")]
    if failed_cases:
        parts.append(f"{len(failed_cases)} trace case(s) failed")
    failed_functions = [r["name"] for r in functions or [] if not r.get("passed")]
    if failed_functions:
        parts.append(f"patched function(s) not compiling as one graph: {', '.join(failed_functions)}")
    return "; ".join(parts) or "see above"


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
) -> None:
    """GitHub Actions workflow commands on stdout: a ``::notice`` per passing spec; per failing
    spec one ``::error`` at the spec file's target line and one at the upstream function's line
    (``specs`` maps ids to :class:`fp4patch.spec.Spec` for those; required when one fails), and an
    ``::error`` per failed trace case and per patched function of the scan that does not compile
    (``functions``)."""
    ok_states = set(ok_states)

    def where(path: Path) -> str:
        relative = os.path.relpath(path)
        return str(path) if relative.startswith("..") else relative

    for r in reports:
        title = f"fp4patch {r['id']}: {r['state']}"
        if r["state"] in ok_states:
            print(f"::notice title={title}::{escape_annotation(prefix + r['id'] + ' ' + r['state'])}")
            continue
        spec = (specs or {})[r["id"]]
        files = {t["file"] for t in r["targets"]}
        spec_line = next((t.line for t in spec.targets if t.file and t.file in files), 1)
        message = escape_annotation(prefix + (r["detail"] or f"{r['id']} is {r['state']}"))
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
    ``TTY_COMPATIBLE=1``): then ``verify`` draws rich tables, else it prints plain lines."""
    return sys.stdout.isatty() or bool(os.environ.get("FORCE_COLOR")) or os.environ.get("TTY_COMPATIBLE") == "1"


def reports_lines(reports: list[dict[str, Any]]) -> list[str]:
    """Plain text for logs: one line per spec report (``--json`` dicts), columns aligned:
    id, state, and the detail or the target files."""
    id_width = max((len(r["id"]) for r in reports), default=0)
    state_width = max((len(r["state"]) for r in reports), default=0)
    lines = []
    for r in reports:
        files = ", ".join(sorted({t["file"] for t in r["targets"] if t["file"]}))
        text = " ".join((r["detail"] or files).split())
        lines.append(f"  {r['id']:<{id_width}}  {r['state']:<{state_width}}  {text}".rstrip())
    return lines


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
) -> None:
    """Print what ``fp4patch verify`` prints for ``reports`` (``--json`` dicts) in ``output``
    format ``table``, ``json`` or ``github``. ``header`` holds ``schema``, ``distribution``,
    ``version`` and ``site_packages`` (strings); ``cases`` are ``--trace`` results or None;
    ``functions`` the scan results of the patched functions ``--trace`` compiled (or None).

    ``table`` is a rich table on a terminal (:func:`is_terminal`) and plain aligned lines in a
    log (CI, docker build), which need no rich import; ``quiet`` silences it (JSON and
    annotations are printed regardless, as they are the requested output)."""
    if output == "json":
        payload = {**header, "ok": ok, "interrupted": interrupted, "specs": reports}
        if cases is not None:
            payload["trace"] = cases
        if opcheck is not None:
            payload["opcheck"] = opcheck
        if functions is not None:
            payload["trace_functions"] = functions
        print(json.dumps(payload, indent=2))
    elif output == "github":
        github_annotations(reports, ok_states, Path(header["site_packages"]), cases, specs=specs, functions=functions)
    elif quiet:
        return
    elif is_terminal():
        out = _console("out")
        out.print(reports_table(f"{header['distribution']} {header['version']}", reports))
        if cases is not None:
            out.print(trace_table(cases))
        if opcheck is not None:
            out.print("\n".join(opcheck_lines(opcheck)), markup=False, highlight=False)
        if functions:
            out.print(scan_table("patched functions under fullgraph", functions))
        out.print("[green]verify: ok[/]" if ok else f"[red]verify: failed[/] — {failure_hint(reports, ok_states, cases, functions)}")
    else:
        lines = [f"{header['distribution']} {header['version']} in {header['site_packages']}", *reports_lines(reports)]
        print("\n".join(lines), flush=True)
        if cases is not None:
            _console("out").print(trace_table(cases))
        if opcheck is not None:
            print("\n".join(opcheck_lines(opcheck)), flush=True)
        if functions:
            print("\n".join(["patched functions under fullgraph:", *scan_lines(functions)]), flush=True)
        print("verify: ok" if ok else f"verify: failed — {failure_hint(reports, ok_states, cases, functions)}", flush=True)
