"""JSON output of the commands (``--json``, ``--format json``): the payloads ``docs/json-schema.json`` describes.

Owns the schema version and the key order of each payload (the bytes a consumer reads); the reports in them are
the dicts of :meth:`fp4patch.engine.report.SpecReport.to_json`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

#: Version of the --json output; docs/json-schema.json describes it. Bump on incompatible changes.
JSON_SCHEMA_VERSION = 1


def print_json(payload: dict[str, Any]) -> None:
    """Print ``payload`` on stdout as JSON indented by two spaces (every command's ``--json`` output)."""
    print(json.dumps(payload, indent=2))


def error_json(message: str, exit_code: int) -> str:
    """The one-line JSON object a command refused with ``--json`` prints on stdout: ``schema``, ``error`` (the message
    of the one line on stderr) and ``exit_code`` (an int, as :mod:`fp4patch.errors` lists)."""
    return json.dumps({"schema": JSON_SCHEMA_VERSION, "error": message, "exit_code": exit_code})


def verify_json(
    header: dict[str, Any], reports: list[dict[str, Any]], ok: bool, interrupted: str | None, left_out: Sequence[str] = (),
    cases: list[dict[str, Any]] | None = None, trace_note: str = "", opcheck: list[dict[str, Any]] | None = None,
    functions: list[dict[str, Any]] | None = None, apply_refused: str | None = None,
) -> dict[str, Any]:
    """``verify --json`` (arguments: :func:`fp4patch.cli.render.output.verify_output`): the header, ``ok``,
    ``interrupted``, ``apply_refused`` (as ``status --json`` has it), ``specs``, then ``left_out`` (ids, from the
    ``left out <id>: --skip`` lines), ``trace``, ``trace_note``, ``opcheck`` and ``trace_functions`` where there are any."""
    payload = {**header, "ok": ok, "interrupted": interrupted, "apply_refused": apply_refused, "specs": reports}
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
    return payload


def status_json(
    header: dict[str, Any], recorded: list[str], stale: str | None, interrupted: str | None, reports: list[dict[str, Any]],
    skip: Iterable[str] | None = None, apply_refused: str | None = None,
) -> dict[str, Any]:
    """``status --json`` (arguments: :func:`fp4patch.cli.render.output.status_output`); ``left_out`` only with ``--skip``."""
    left_out = {"left_out": list(dict.fromkeys(skip))} if skip else {}
    return {
        **header, "recorded": recorded, "stale_record": stale, "interrupted": interrupted, "apply_refused": apply_refused, "specs": reports,
        **left_out,
    }


def apply_json(
    header: dict[str, Any], selected: list[str], reports: list[dict[str, Any]], written: list[tuple[str, list[str]]],
    left_out: list[dict[str, Any]], skipped: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """``apply --json`` (arguments: :func:`fp4patch.cli.render.output.apply_output`; ``left_out``: the reports of the
    specs left out as unsupported): the files written, the specs left out (unsupported, then ``--skip``) and the
    evidence each spec not listed for this release was applied on (``basis``)."""
    return {
        **header,
        "specs": list(selected),
        "written": [relative for relative, _ in written],
        "left_out": [{"id": r["id"], "state": r["state"], "detail": r["detail"]} for r in left_out] + list(skipped),
        "basis": {r["id"]: r["basis"] for r in reports if r.get("basis") and r["basis"]["kind"] != "listed"},
    }
