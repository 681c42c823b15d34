"""``fp4patch revert``: restore the original files byte for byte, for every applied spec or those named.

Exit codes: 0 once reverted (or nothing to revert); 2 for a usage error (an unknown spec, one not applied) or an
environment that cannot be read; 3 when a file changed since apply (without ``--force``) or may not be written
(:mod:`fp4patch.errors`).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ..errors import EXIT_OK, UsageError
from .context import context, header
from .options import JsonOpt, PythonOpt, QuietOpt, RevertSpecOpt, SitePackagesOpt, SpecsDirOpt, check_output_options
from .render import out, wrapped
from .running import run_body


def revert(
    python: PythonOpt = None,
    site_packages: SitePackagesOpt = None,
    spec: RevertSpecOpt = None,
    as_json: JsonOpt = False,
    specs_dir: SpecsDirOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Restore backups even over files changed since apply; discard a record made for another version (restoring nothing).")] = False,
    quiet: QuietOpt = False,
) -> None:
    """Undo apply: restore the original files byte for byte (every applied spec).

    With --spec, only the named specs are removed: their files are restored and, where other
    applied specs patch the same file, rewritten with those.
    """

    def body() -> int:
        check_output_options(as_json, None, quiet)
        _, engine, _ = context(python, site_packages, specs_dir, None, all_specs=True)
        from ..engine.selection import check_known

        check_known(spec or [], [s.id for s in engine.specs])  # a typo is "unknown spec", as in every other command
        if spec and engine.store.load() is None and not engine.interrupted():
            # the same answer as naming a spec that is not applied while others are (exit 2)
            raise UsageError(f"spec {min(spec)!r} is not applied here (applied: none); `fp4patch status` shows the state of each spec")
        recorded = engine.store.load() is not None
        restored = engine.revert(spec, force=force)
        manifest = engine.store.load()
        remaining = manifest.applied_specs() if manifest else []
        if as_json:
            print(json.dumps({**header(engine), "restored": restored, "still_applied": remaining}, indent=2))
        elif not restored and not engine.dropped and not (spec and recorded):
            out.print("nothing to revert: no fp4patch manifest here")
        else:
            for relative in restored:
                out.print(f"restored {relative}")
            h = header(engine)
            name = f"{h['distribution']} {h['version']}"
            if remaining:
                # a recorded spec that was not needed on this release changed no file: only its record goes
                idle = "" if restored or engine.dropped else " (it changed no file)"
                out.print(
                    wrapped(f"{name}: reverted {', '.join(sorted(spec or []))}{idle}; still applied: {', '.join(remaining)} (`{engine.command('revert')}` reverts those too)"),
                    markup=False,
                )
            elif restored:
                out.print(f"{name}: reverted; originals restored byte for byte in {h['site_packages']}")
            else:
                out.print(f"{name}: nothing to write back (the files hold their original bytes); fp4patch's record removed")
        return EXIT_OK

    run_body(as_json, body, quiet)
