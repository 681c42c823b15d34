"""``fp4patch diff``: the unified diff of what ``apply`` would change, or with ``--stat`` one line per file.

Writes nothing. Exit codes: 0 once printed (an empty diff too); 1 when a selected spec has drifted; 2 for a usage
error or an environment that cannot be read; 3 for a file this user may not read (:mod:`fp4patch.errors`).
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ..errors import EXIT_OK
from .context import context, header, print_lines, required
from .options import JsonOpt, PythonOpt, QuietOpt, SitePackagesOpt, SkipOpt, SpecOpt, SpecsDirOpt, StrictOpt, check_output_options
from .render import aligned, err, nothing_to_change, out
from .running import run_body


def diff(
    python: PythonOpt = None,
    site_packages: SitePackagesOpt = None,
    spec: SpecOpt = None,
    as_json: JsonOpt = False,
    specs_dir: SpecsDirOpt = None,
    quiet: QuietOpt = False,
    skip: SkipOpt = None,
    strict: StrictOpt = False,
    stat: Annotated[bool, typer.Option("--stat", help="One line per file (lines added and removed, specs) instead of the whole diff.")] = False,
) -> None:
    """Print the unified diff of what `apply` would change. Writes nothing."""

    def body() -> int:
        check_output_options(as_json, None, quiet)
        _, engine, selected = context(python, site_packages, specs_dir, spec, skip=skip)
        plans = engine.diff(selected, required(selected, spec, strict))
        unchecked = [s.id for s in selected if engine.report(s).state == "needs-check"]
        if unchecked:
            err.print(f"fp4patch: note: {', '.join(unchecked)} differ from the code they were verified on; `fp4patch apply` checks them on CPU first and writes this only if that passes", markup=False)
        if as_json:
            print(json.dumps({**header(engine), "files": [{"file": p.relative, "specs": p.specs, "diff": p.unified_diff()} for p in plans]}, indent=2))
            return EXIT_OK
        if not plans:
            done = nothing_to_change(header(engine), [engine.report(s).to_json() for s in selected])
            if stat:  # the summary of a patched environment says so, not "0 file(s)"
                print_lines([done])
                return EXIT_OK
            err.print(done, markup=False)  # stdout stays an empty diff
        if stat:
            print_lines(diff_stat(plans))
            return EXIT_OK
        for plan in plans:
            text = plan.unified_diff()
            if out.is_terminal:
                from rich.syntax import Syntax

                out.print(Syntax(text, "diff", theme="ansi_dark", background_color="default"))
            else:
                sys.stdout.write(text)
        return EXIT_OK

    run_body(as_json, body, quiet)


def diff_stat(plans) -> list[str]:
    """``diff --stat`` for ``plans`` (:class:`fp4patch.engine.plan.FilePlan`, each with ``relative``, ``specs`` and
    ``unified_diff()``): per file ``path  +added -removed  (specs)``, aligned, then a total line."""
    rows = []
    for plan in plans:
        lines = plan.unified_diff().splitlines()
        added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
        removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
        rows.append((plan.relative, f"+{added} -{removed}", ", ".join(plan.specs), added, removed))
    result = aligned([[(r[0], ""), (r[1], ""), (r[2], "")] for r in rows])
    result.append(f"{len(rows)} file(s), +{sum(r[3] for r in rows)} -{sum(r[4] for r in rows)} lines; `fp4patch diff` without --stat prints them")
    return result
