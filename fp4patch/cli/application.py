"""The typer application ``fp4patch``: its commands in the order ``fp4patch --help`` lists them, how help shows them,
``--version``, and the exit codes of a usage error and of an interrupt while typer parses (:func:`run`).
"""

from __future__ import annotations

import inspect
import sys
from typing import Annotated

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from .. import __version__
from ..errors import EXIT_OK, EXIT_USAGE
from . import apply, clean, diff, new, revert, scan, status, verify
from .running import command_name


def _plain_flags(params: list) -> list:
    """``params`` with every flag shown bare in help (typer >= 0.25 shows ``--json <bool>``,
    although ``--json true`` is an error: a flag takes no value)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


def _unwrapped(text: str | None) -> str | None:
    """A docstring's paragraphs each on one line, for the help screen to wrap at the terminal's width
    (typer 0.29 keeps the single line breaks of every paragraph after the first, so a docstring wrapped
    at 100 columns was wrapped again, mid-sentence, on an 80-column terminal)."""
    if not text:
        return text
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


class Command(TyperCommand):
    """A typer command whose help shows flags without a value and arguments as ``SPEC_ID``
    (typer >= 0.25 writes a required argument as ``{spec_id}`` in the usage line)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.help = _unwrapped(self.help)

    def get_params(self, ctx):
        return _plain_flags(super().get_params(ctx))

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = param.metavar or param.name.upper()
                pieces.append(name if param.required else f"[{name}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


class Group(TyperGroup):
    """The ``fp4patch`` group: flags shown without a value, as in :class:`Command`."""

    def get_params(self, ctx):
        return _plain_flags(super().get_params(ctx))


app = typer.Typer(
    name="fp4patch",
    cls=Group,
    help="Statically patch an installed FlashInfer so that its FP4 path (quantizers, GEMM, MoE) compiles under torch.compile(fullgraph=True).",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)

#: The commands, in the order ``fp4patch --help`` lists them (typer keeps the order of registration).
COMMANDS = (status.status, diff.diff, apply.apply, verify.verify, scan.scan, revert.revert, clean.clean, new.new)
for _command in COMMANDS:
    app.command(cls=Command)(_command)


def version_callback(value: bool) -> None:
    """``--version``: print ``fp4patch <version>`` and exit 0.

    Raises:
        typer.Exit: with exit code 0 when ``value`` (the flag was given).
    """
    if value:
        print(f"fp4patch {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Show the version.")] = False,
) -> None:
    """Statically patch an installed FlashInfer so that its FP4 path (quantizers, GEMM, MoE) compiles under torch.compile(fullgraph=True)."""


def run() -> None:
    """Run the typer app on ``sys.argv`` (:mod:`fp4patch.cli.entry` calls it): exit codes as documented; a usage
    error is one line (exit 2).

    Raises:
        SystemExit: always: the command's exit code; 2 for a usage error (one line on stderr, or the help when no
            command was given); 130 or 143 for Ctrl-C or SIGTERM while typer parses (:mod:`fp4patch.interrupts`).
    """
    try:  # typer >= 0.25 vendors click as typer._click; older typer uses click itself
        from typer._click.exceptions import NoArgsIsHelpError
        from typer._click.exceptions import UsageError as ClickUsageError
    except ImportError:
        from click.exceptions import NoArgsIsHelpError  # type: ignore[assignment]
        from click.exceptions import UsageError as ClickUsageError  # type: ignore[assignment]

    from .. import interrupts

    try:
        code = app(prog_name="fp4patch", standalone_mode=False)
        if code == interrupts.EXIT_INTERRUPTED and not interrupts.reported:
            # typer returns a KeyboardInterrupt that escaped the command's parsing as a silent 130
            raise KeyboardInterrupt
    except NoArgsIsHelpError:
        sys.exit(EXIT_USAGE)  # typer has printed the help once already
    except ClickUsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "fp4patch"
        print(f"fp4patch: error: {exc.format_message()} (see `{command} --help`)", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except (*interrupts.INTERRUPTS, typer.Abort) as interrupt:
        from ..interrupts import exit_code, message, settle

        settle()

        print(f"fp4patch: {message(command_name(), interrupt)}", file=sys.stderr)
        sys.exit(exit_code(interrupt))
    sys.exit(code if isinstance(code, int) else EXIT_OK)
