"""The ``fp4patch`` command line: parsing the options, calling the engine, rendering its reports.

What the CLI owns: the typer application and the options every command shares (:mod:`.application`,
:mod:`.options`), turning an error into one line and its exit code (:mod:`.running`), setting the engine up from those
options (:mod:`.context`), one module per command (:mod:`.status`, :mod:`.diff`, :mod:`.apply`, :mod:`.verify`,
:mod:`.scan`, :mod:`.revert`, :mod:`.clean`, :mod:`.new`), the output of reports as terminal text, JSON and GitHub
annotations (:mod:`.render`), and the console script (:mod:`.entry`), which answers from the recorded verdict before
typer is imported where nothing is to be done.

What it may import: every other subsystem (:mod:`fp4patch.tools`, :mod:`fp4patch.engine`, :mod:`fp4patch.checks`,
:mod:`fp4patch.catalog`, :mod:`fp4patch.probes`, :mod:`fp4patch.target`, :mod:`fp4patch.ops`, the codemods of
:mod:`fp4patch.codemods` and the base; ``docs/architecture.md``). None of them imports this package (nor writes
to it): the dependency goes one way. Every command takes ``--python PATH`` or ``--site-packages DIR`` (the target
environment), ``--spec ID`` (repeatable; default: the specs marked default) and ``--json``. Exit codes are listed in
:mod:`fp4patch.errors` and the README.

Importing this package imports nothing (the console script's fast path lives here and must not load typer): ``app``,
``main`` and ``run`` are loaded from :mod:`.application` on first use.
"""

from __future__ import annotations

from typing import Any

#: The names this package offers (what ``fp4patch/cli.py`` offered before it became a package), from :mod:`.application`.
_APPLICATION = ("app", "main", "run", "version_callback", "Command", "Group", "COMMANDS")

__all__ = list(_APPLICATION)


def __getattr__(name: str) -> Any:
    """``fp4patch.cli.app`` (the :class:`typer.Typer` application), ``main`` (its callback), ``run`` (the console
    entry's full path) and the help classes, imported on first use (PEP 562).

    Raises:
        AttributeError: for any other name.
    """
    if name in _APPLICATION:
        from . import application

        return getattr(application, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
