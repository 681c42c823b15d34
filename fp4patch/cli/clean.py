"""``fp4patch clean``: remove fp4patch's state left for a distribution that was uninstalled or reinstalled.

Never touches installed files. Exit codes: 0 once cleaned (or nothing to clean); 2 for an environment that cannot
be read; 3 for state this user may not remove (:mod:`fp4patch.errors`).
"""

from __future__ import annotations

import json

from ..errors import EXIT_OK
from .context import environment
from .options import JsonOpt, PythonOpt, QuietOpt, SitePackagesOpt
from .render import JSON_SCHEMA_VERSION, out, wrapped
from .running import run_body


def clean(
    python: PythonOpt = None,
    site_packages: SitePackagesOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Remove fp4patch's state left for a distribution that was uninstalled or reinstalled. Never touches installed files."""

    def body() -> int:
        from ..engine.leftovers import clean as remove_leftovers

        removed, kept = remove_leftovers(environment(python, site_packages))
        if as_json:
            print(json.dumps({"schema": JSON_SCHEMA_VERSION, "removed": [s.to_json() for s in removed], "kept": [s.to_json() for s in kept]}, indent=2))
            return EXIT_OK
        for state in removed:
            out.print(wrapped(f"removed {state.reason}"), markup=False)
        for state in kept:
            out.print(wrapped(f"kept {state.reason}"), markup=False)
        if not removed and not kept:
            out.print("nothing to clean: no fp4patch state here")
        return EXIT_OK

    run_body(as_json, body, quiet)
