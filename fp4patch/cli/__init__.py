"""The ``fp4patch`` command line: parsing the options, calling the engine, rendering its reports.

What the CLI owns: the typer application and the options every command shares (:mod:`.application`,
:mod:`.options`), turning an error into one line and its exit code (:mod:`.running`), setting the engine up from those
options (:mod:`.context`), one module per command (:mod:`.status`, :mod:`.diff`, :mod:`.apply`, :mod:`.verify`,
:mod:`.scan`, :mod:`.revert`, :mod:`.clean`, :mod:`.new`), the output of reports as terminal text, JSON and GitHub
annotations (:mod:`.render`), and the console script (:mod:`.entry`).

What it may import: every other subsystem (tools, engine, checks, catalog, probes, target, ops, codemods and the
base; ``docs/architecture.md``). None of them imports this package (nor writes
to it): the dependency goes one way. Every command takes ``--python PATH`` or ``--site-packages DIR`` (the target
environment), ``--spec ID`` (repeatable; default: the specs marked default) and ``--json``. Exit codes are listed in
:mod:`fp4patch.errors` and the README.
"""
