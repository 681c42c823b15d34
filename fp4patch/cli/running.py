"""Running a command's body: the exit code it returns, or for an error one line on stderr and the error's exit code.

Owns how a command ends: :class:`fp4patch.errors.Fp4PatchError` (exit 2, 1 or 3, as its class says), a file this user
may not read or write (exit 3), Ctrl-C (130) and SIGTERM (143, :mod:`fp4patch.interrupts`). With ``--json`` a refusal
is also a JSON object on stdout, with ``--format github`` an ``::error`` annotation.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import typer

from ..errors import Fp4PatchError
from .render import err, error_json, failed_annotation, out


def run_body(as_json: bool, body: Callable[[], int], quiet: bool = False, github: bool = False) -> None:
    """Run a command body and end the command with its exit code.

    Args:
        as_json: ``--json`` (or ``--format json``): a refusal is also printed on stdout as
            :func:`fp4patch.cli.render.json_output.error_json`.
        body: the command; returns its exit code (0, or 1 for a failed check).
        quiet: ``--quiet``: the console ``out`` prints nothing.
        github: ``--format github``: a refusal is also an ``::error`` annotation on stdout.

    Raises:
        typer.Exit: always: ``body``'s exit code; an :class:`fp4patch.errors.Fp4PatchError`'s (one line on stderr,
            ``fp4patch: error: <message>``); 3 for a :class:`PermissionError` (:func:`permission_error`); 130 or 143
            for Ctrl-C or SIGTERM (:mod:`fp4patch.interrupts`).
    """
    out.quiet = quiet
    from ..interrupts import INTERRUPTS

    try:
        code = body()
    except INTERRUPTS as interrupt:  # Ctrl-C, or SIGTERM (interrupts.Terminated)
        from ..interrupts import exit_code, message, settle

        settle()

        err.print(f"fp4patch: {message(command_name(), interrupt)}", markup=False)
        raise typer.Exit(exit_code(interrupt)) from None
    except PermissionError as denied:  # a file or folder this user may not read or write: one line, exit 3
        exc = permission_error(denied)
        line = str(exc)
        if as_json:
            print(error_json(line, exc.exit_code))
        err.print(f"fp4patch: error: {line}", markup=False)
        raise typer.Exit(exc.exit_code) from None
    except Fp4PatchError as exc:
        line = error_message(exc)
        if as_json:
            print(error_json(line, exc.exit_code))
        elif github:  # a CI log shows the annotations: the refusal is one too
            print(failed_annotation(command_name(), line), flush=True)
        err.print(f"fp4patch: error: {line}", markup=False)
        raise typer.Exit(exc.exit_code) from None
    raise typer.Exit(code)


def permission_error(denied: PermissionError) -> Fp4PatchError:
    """The one-line refusal (a :class:`fp4patch.errors.FileSystemError`, exit 3) for a file or folder this user may not
    read or write: fp4patch's state (``.fp4patch/``, written by another user under a strict umask, or by fp4patch before
    it gave the state site-packages' mode) names the ``chmod`` that shares it; anything else, the owner."""
    from ..errors import FileSystemError
    from ..locations import STATE_DIR

    where = denied.filename or "a file"
    parts = Path(str(where)).parts
    if STATE_DIR in parts:
        state = Path(*parts[: parts.index(STATE_DIR) + 1])
        return FileSystemError(
            f"{where}: cannot read fp4patch's state ({denied.strerror}): another user wrote it under a strict umask; "
            f"run as that user, or let everyone read it: `chmod -R a+rX {state}`"
        )
    return FileSystemError(f"{where}: {denied.strerror}; run as the owner of the environment, or make it readable")


def command_name() -> str:
    """The subcommand this process runs (``verify``), for messages; ``""`` when there is none."""
    return next((a for a in sys.argv[1:] if not a.startswith("-")), "")


def error_message(exc: Fp4PatchError) -> str:
    """The one line an error ends a command with: its message, and for a distribution that is not
    installed (:class:`fp4patch.target.environment.NotInstalled`), what fp4patch left there for it
    (:func:`fp4patch.engine.leftovers.gone_note`)."""
    from ..target.environment import NotInstalled

    if isinstance(exc, NotInstalled):
        from ..engine.leftovers import gone_note

        return str(exc) + gone_note(exc.env, exc.name)
    return str(exc)
