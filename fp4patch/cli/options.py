"""The options the commands share, as typer annotations, and the check that a command's output options agree.

Owns the spelling and help text of ``--python``, ``--site-packages``, ``--spec``, ``--json``, ``--specs-dir``, ``-q``,
``--skip``, ``--strict`` and ``--format``; a command module declares its own options beside these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import EXIT_USAGE
from .render import err, output_conflict

PythonOpt = Annotated[
    str | None,
    typer.Option("--python", metavar="<path>", help="Interpreter of the target environment (e.g. /opt/venv/bin/python); with --site-packages, the interpreter (with torch) that runs the checks on that directory."),
]
SitePackagesOpt = Annotated[Path | None, typer.Option("--site-packages", help="Target site-packages directory (with --python: checked with that interpreter).")]
SpecOpt = Annotated[list[str] | None, typer.Option("--spec", metavar="<id>", help="Spec id to select (repeatable); default: specs marked default.")]
StatusSpecOpt = Annotated[list[str] | None, typer.Option("--spec", metavar="<id>", help="Spec id to show (repeatable); default: every known spec.")]
RevertSpecOpt = Annotated[
    list[str] | None,
    typer.Option("--spec", metavar="<id>", help="Spec id to revert (repeatable; the others stay applied); default: every applied spec."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
SpecsDirOpt = Annotated[Path | None, typer.Option("--specs-dir", help="Load specs from this directory instead of the built-in ones.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors; the exit code tells.")]
SkipOpt = Annotated[
    list[str] | None,
    typer.Option("--skip", metavar="<id>", help="Leave this spec out by name (repeatable), e.g. one whose code differs from every verified release."),
]
StrictOpt = Annotated[
    bool,
    typer.Option("--strict", help="Every selected spec must apply: fail on a default spec declared unsupported on this release instead of leaving it out."),
]
FormatOpt = Annotated[
    str | None,
    typer.Option(
        "--format", metavar="<table|json|github>", help="Output: table (default), json (same as --json), or github (GitHub Actions annotations)."
    ),
]


def check_output_options(as_json: bool, output_format: str | None, quiet: bool) -> None:
    """Refuse an unknown ``--format`` or output options that contradict each other
    (:func:`fp4patch.cli.render.output.output_conflict`) in one line on stderr.

    Args:
        as_json: ``--json`` was given.
        output_format: ``--format``'s value, or None.
        quiet: ``--quiet`` was given.

    Raises:
        typer.Exit: with exit code 2 (:data:`fp4patch.errors.EXIT_USAGE`) when they conflict.
    """
    problem = output_conflict(as_json, output_format, quiet)
    if problem:
        err.print(f"fp4patch: error: {problem}", markup=False)
        raise typer.Exit(EXIT_USAGE)
