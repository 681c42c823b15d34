"""``fp4patch status``: every known spec, which target the installed version takes, and the state of each.

Writes nothing. Exit codes: 0 once shown; 2 for a usage error (an unknown ``--skip`` id, conflicting output options)
or an environment that cannot be read; 3 for a file this user may not read (:mod:`fp4patch.errors`).
"""

from __future__ import annotations

from ..errors import EXIT_OK
from ..states import APPLICABLE, NEEDS_CHECK
from .context import context, header, release_note, selection
from .options import JsonOpt, PythonOpt, QuietOpt, SitePackagesOpt, SkipOpt, SpecsDirOpt, StatusSpecOpt, check_output_options
from .render import status_output
from .running import run_body

#: The states of a spec that ``apply`` would write files for.
WOULD_WRITE = (APPLICABLE, NEEDS_CHECK)


def status(
    python: PythonOpt = None,
    site_packages: SitePackagesOpt = None,
    spec: StatusSpecOpt = None,
    as_json: JsonOpt = False,
    specs_dir: SpecsDirOpt = None,
    quiet: QuietOpt = False,
    skip: SkipOpt = None,
) -> None:
    """Show the known specs, which target the installed version, and the state of each.

    With --skip, each spec named is listed as left out (as apply and verify given the same --skip say), its state shown all the same.
    """

    def body() -> int:
        check_output_options(as_json, None, quiet)
        if skip:  # an unknown id is the same usage error as in apply and verify
            selection(specs_dir, None, skip=skip)
        _, engine, selected = context(python, site_packages, specs_dir, spec, all_specs=True)
        reports = [engine.report(s) for s in selected]
        manifest = engine.store.load()
        applied = manifest.specs if manifest else []
        stale = engine.stale_record()  # left from another install of the distribution
        interrupted = engine.interrupted()  # an apply/revert killed half-way (its journal), or stale bytecode
        note = [] if as_json else release_note(engine)
        shown = [r.to_json() for r in reports]
        # what apply would refuse before writing the files of the specs it would apply (symbolic links): said here too
        refused = engine.apply_refusal(t["file"] for r in shown if r["state"] in WOULD_WRITE for t in r.get("targets", []))
        status_output(
            header(engine), recorded=applied, stale=stale, interrupted=interrupted, reports=shown, note=note, as_json=as_json, quiet=quiet,
            skip=skip, apply_refused=refused,
        )
        return EXIT_OK

    run_body(as_json, body, quiet)
