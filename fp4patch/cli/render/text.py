"""Terminal text of the reports: aligned plain lines, ANSI-coloured on a terminal, the same in logs.

Owns what ``status``, ``apply``, ``verify`` and ``scan`` print as text, from reports as plain data (the ``--json``
dicts of :meth:`fp4patch.engine.report.SpecReport.to_json`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from .advice import failure_hint
from .terminal import aligned, paint, use_color, wrap, wrapped

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
    from ...catalog.evidence import INHERITED, OPCHECK_NOTE

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
    """``verify --trace`` cases (:mod:`fp4patch.checks.trace`) as a title line and aligned rows: case,
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
    """Plain lines for ``verify --opcheck`` results (:func:`fp4patch.checks.trace.run_opcheck`): a count per
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
    from ...probes.scan_probe import describe

    if r["status"] == "left-out":  # set by fp4patch (trace.leave_out): its spec left out with --skip
        return f"{r['declared']} (the scan saw: {r.get('scanned')})"
    return describe(r)


def scan_table(title: str, results: list[dict[str, Any]]) -> Table:
    """A rich table of scan results: function, result, and the detail (ops, or error and where)."""
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
    a spec declares ``not-needed`` (:func:`fp4patch.checks.trace.declare_not_needed`) and ``; J left out with --skip (names)``
    for those whose spec ``--skip`` names (:func:`fp4patch.checks.trace.leave_out`), which M does not count."""
    present = [r for r in results if r["status"] not in ("not-present", "not-needed", "left-out")]
    declared = [r["name"] for r in results if r["status"] == "not-needed"]
    skipped = [r["name"] for r in results if r["status"] == "left-out"]
    line = f"{sum(1 for r in present if r['status'] == 'compiles')}/{len(present)} present functions compile as one graph"
    line += f"; {len(declared)} declared not needed, not counted ({', '.join(declared)})" if declared else ""
    return line + (f"; {len(skipped)} left out with --skip, not counted ({', '.join(skipped)})" if skipped else "")


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


def nothing_to_change(header: dict[str, Any], reports: list[dict[str, Any]]) -> str:
    """``diff``'s line when ``apply`` would write nothing: the environment is patched (a selected spec applied), or no
    selected spec needs a change on this release. ``reports``: the selected specs' ``--json`` dicts."""
    applied = [r["id"] for r in reports if r["state"] == "applied"]
    name = f"{header['distribution']} {header['version']}"
    if applied:
        return f"nothing to change: {name} is patched ({len(applied)} selected spec(s) applied; `fp4patch verify` checks it)"
    return f"nothing to change: no selected spec needs a change on {name} (`fp4patch status` says why)"


def verify_lines(
    header: dict[str, Any],
    reports: list[dict[str, Any]],
    ok: bool,
    ok_states: Iterable[str],
    interrupted: str | None = None,
    cases: list[dict[str, Any]] | None = None,
    functions: list[dict[str, Any]] | None = None,
    opcheck: list[dict[str, Any]] | None = None,
    apply_options: Sequence[str] = (),
    left_out: Sequence[str] = (),
    trace_note: str = "",
) -> list[str]:
    """What ``fp4patch verify`` prints as text (arguments: :func:`fp4patch.cli.render.output.verify_output`): the
    distribution, a line per report, the specs left out, the trace cases, the patched functions under fullgraph,
    the opcheck results and ``verify: ok`` or ``verify: failed — <what to do>`` (:func:`failure_hint`)."""
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
    return lines


def status_lines(
    header: dict[str, Any], recorded: list[str], stale: str | None, interrupted: str | None, reports: list[dict[str, Any]],
    note: list[str], skip: Iterable[str] | None = None, apply_refused: str | None = None,
) -> list[str]:
    """What ``fp4patch status`` prints as text (arguments: :func:`fp4patch.cli.render.output.status_output`)."""
    color = use_color()
    kept, declared = split_declared(recorded, reports)
    return [
        f"{paint(header['distribution'] + ' ' + header['version'], 'bold', color)} in {header['site_packages']}",
        *wrap(f"recorded as applied by fp4patch: {', '.join(kept) if kept else 'nothing'}{declared}"),
        *(wrap(f"stale record: {stale}") if stale else []),
        *(wrapped(f"interrupted: {interrupted}").replace("interrupted:", paint("interrupted:", "red", color), 1).split("\n") if interrupted else []),
        *reports_lines(reports, show_summary=True, color=color),
        *(wrapped(f"apply refuses: {apply_refused}").replace("apply refuses:", paint("apply refuses:", "red", color), 1).split("\n")
          if apply_refused else []),
        *skipped_lines(skip),
        *note,
    ]


def apply_lines(
    header: dict[str, Any], selected: list[str], reports: list[dict[str, Any]], left_out: list[dict[str, Any]],
    written: list[tuple[str, list[str]]], backups: Path | str, skipped: Sequence[dict[str, Any]] = (),
) -> list[str]:
    """What ``fp4patch apply`` prints as text (arguments: :func:`fp4patch.cli.render.output.apply_output`; ``left_out``:
    the reports of the specs left out as unsupported on this release)."""
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
    return lines
