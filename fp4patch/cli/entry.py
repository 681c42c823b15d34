"""The ``fp4patch`` console script (and ``python -m fp4patch``): SIGTERM handling, a closed pipe, then the typer app."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Run the command line (:func:`fp4patch.cli.application.run`); exit codes as documented (130 for Ctrl-C, 143 for
    SIGTERM, with one line saying what state the files are in: :mod:`fp4patch.interrupts`)."""
    from ..interrupts import INTERRUPTS, on_terminate

    on_terminate()
    try:
        from .application import run

        run()
    except BrokenPipeError:  # `fp4patch verify --json | head -1`: the reader left; say nothing more
        # what the Python docs advise (library/signal, "Note on SIGPIPE"): point stdout at devnull so the
        # flush at exit raises no second error, and exit 1 as a write error does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    except INTERRUPTS as interrupt:  # while the command line is imported: nothing was written
        from ..interrupts import exit_code, message, settle

        settle()
        sys.stderr.write(f"fp4patch: {message('', interrupt)}\n")
        sys.exit(exit_code(interrupt))
