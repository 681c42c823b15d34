"""What to do next, in one line: the advice that ``verify`` ends a failure with, as text or as an annotation.

Owns the command it advises (``fp4patch apply`` with the options that make it work as written) and the specs
that would make that command refuse.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from typing import Any


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
