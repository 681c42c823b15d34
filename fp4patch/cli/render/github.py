"""GitHub Actions annotations (``--format github``): workflow commands on stdout that a CI log shows as notices and
errors, at the spec file's line and at the upstream function's line.

Owns the annotation syntax and its escaping.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .advice import blocking, state_message
from .text import scan_detail


def escape_annotation(text: str) -> str:
    """Escape a GitHub Actions workflow-command message (``%``, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape the value of a workflow-command property (``file=``, ``title=``): a message's escapes and also ``:`` and
    ``,``, which would end the value (GitHub's rules, as ``@actions/core`` escapes them)."""
    return escape_annotation(text).replace(":", "%3A").replace(",", "%2C")


def workflow_command(command: str, message: str, **properties: object) -> str:
    """``::command name=value,...::message``, every property value and the message escaped; None values left out."""
    given = ",".join(f"{name}={escape_property(str(value))}" for name, value in properties.items() if value is not None)
    return f"::{command}{' ' + given if given else ''}::{escape_annotation(message)}"


def failed_annotation(command: str, message: str) -> str:
    """The ``::error`` annotation of a command (``verify``, or ``""``) refused with ``message`` (its one line on stderr)."""
    return workflow_command("error", message, title=f"fp4patch {command} failed")


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
    (``specs`` maps ids to :class:`fp4patch.catalog.spec.Spec` for those; required when one fails), and an
    ``::error`` per failed trace case and per patched function of the scan that does not compile
    (``functions``). ``interrupted`` (:meth:`fp4patch.engine.Engine.interrupted`: an interrupted
    apply, stale bytecode) is an ``::error`` of its own, first: verify fails on it even when every
    spec passes. ``apply_options``: the target and specs options an advised ``fp4patch apply`` needs
    (:func:`apply_command`)."""
    ok_states = set(ok_states)
    if interrupted:
        print(workflow_command("error", prefix + interrupted, title="fp4patch verify failed"))

    def where(path: Path) -> str:
        relative = os.path.relpath(path)
        return str(path) if relative.startswith("..") else relative

    for r in reports:
        title = f"fp4patch {r['id']}: {'not applied' if r['state'] == 'applicable' and r['state'] not in ok_states else r['state']}"
        if r["state"] in ok_states:
            print(workflow_command("notice", prefix + r["id"] + " " + r["state"], title=title))
            continue
        spec = (specs or {})[r["id"]]
        files = {t["file"] for t in r["targets"]}
        spec_line = next((t.line for t in spec.targets if t.file and t.file in files), 1)
        if not r["detail"] and interrupted and r["state"] == "applicable":
            # the first error says what to run (an apply would be refused or is not the first step): one instruction
            detail = f"{r['id']} is not applied; do what the first error says"
        else:
            detail = r["detail"] or state_message(r["id"], r["state"], r.get("default", True), apply_options, blocking(reports, ok_states))
        message = prefix + detail
        print(workflow_command("error", message, file=where(spec.path), line=spec_line, title=title))
        for target in r["targets"]:
            if not target["file"] or site_packages is None:
                continue
            upstream = site_packages / target["file"]
            line = function_line(upstream, spec, target["file"])
            print(workflow_command("error", message, file=where(upstream), line=line, title=title))
    for case in cases or []:
        if not case.get("passed"):
            detail = case.get("error") or f"layout expected {case.get('expected')} got {case.get('traced')}"
            print(workflow_command("error", detail, title=f"fp4patch trace {case['name']}"))
    for r in functions or []:
        if not r.get("passed"):
            print(workflow_command("error", scan_detail(r), title=f"fp4patch trace {r['name']}"))


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
