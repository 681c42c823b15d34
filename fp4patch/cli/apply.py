"""``fp4patch apply``: patch the installed files.

Running it again changes nothing. Exit codes: 0 once every selected spec is applied (a default spec declared
unsupported on the release is left out and listed, unless ``--strict``); 1 when a selected spec is drifted, not
targeted, fails its check on CPU or is required but unsupported (nothing written); 2 for a usage error (an unknown
spec, a conflict with an applied one), an environment that cannot be read or a torch below the supported range; 3 when
a file differs from RECORD, changed since apply or cannot be written (nothing written) (:mod:`fp4patch.errors`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import EXIT_OK
from ..target.torch_support import check_torch
from .context import context, header, required
from .options import JsonOpt, PythonOpt, QuietOpt, SitePackagesOpt, SkipOpt, SpecOpt, SpecsDirOpt, StrictOpt, check_output_options
from .render import apply_output
from .running import run_body


def apply(
    python: PythonOpt = None,
    site_packages: SitePackagesOpt = None,
    spec: SpecOpt = None,
    as_json: JsonOpt = False,
    specs_dir: SpecsDirOpt = None,
    allow_modified: Annotated[bool, typer.Option("--allow-modified", help="Patch files that differ from the distribution's RECORD (changed by hand).")] = False,
    quiet: QuietOpt = False,
    skip: SkipOpt = None,
    strict: StrictOpt = False,
) -> None:
    """Patch the installed files. Running it again changes nothing.

    A default spec declared unsupported on the installed release is left out and listed (exit 0; --strict fails instead). On a release fp4patch does not know, each spec takes the target verified on the same code, or the nearest release's target after a check on CPU; a spec whose code changed is refused like drift (nothing written) unless left out with --skip.
    """

    def body() -> int:
        check_output_options(as_json, None, quiet)
        env, engine, selected = context(python, site_packages, specs_dir, spec, skip=skip)
        check_torch(env, "apply")  # below the supported torch: one line, nothing written
        must_apply = required(selected, spec, strict)
        written = engine.apply(selected, allow_modified=allow_modified, required=must_apply)
        reports = [engine.report(s).to_json() for s in selected]
        skipped = [{"id": r.spec.id, "state": r.state, "detail": "--skip"} for r in (engine.report(s) for s in engine.specs if s.id in (skip or ()))]
        written_files = [(p.relative, p.specs) for p in written]
        apply_output(
            header(engine), selected=[s.id for s in selected], reports=reports, required=must_apply, written=written_files,
            backups=engine.store.root, as_json=as_json, skipped=skipped,
        )
        return EXIT_OK

    run_body(as_json, body, quiet)
