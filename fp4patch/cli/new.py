"""``fp4patch new``: scaffold a spec for a function of an installed distribution, or with ``--add-target`` a target
of an existing spec for the installed release (:mod:`fp4patch.tools.scaffold`).

Writes one spec file. Exit codes: 0 once written; 2 for a usage error (no ``--function``, ``--function`` with
``--add-target``, a function that cannot be found, a file that exists without ``--force``) or an environment that
cannot be read (:mod:`fp4patch.errors`).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from ..errors import EXIT_OK, UsageError
from .context import context, environment
from .options import PythonOpt, SitePackagesOpt
from .render import out
from .running import run_body


def new(
    spec_id: Annotated[str, typer.Argument(metavar="SPEC_ID", help="Id of the new spec (kebab-case); also its file name.")],
    function: Annotated[
        str | None,
        typer.Option(
            "--function",
            metavar="<module:function>",
            help="MODULE:FUNCTION to patch, the module that defines it, e.g. flashinfer.quantization.fp4_quantization:fp4_quantize "
            "(flashinfer.fp4_quantization before 0.6.7; Class.method for a method).",
        ),
    ] = None,
    add_target: Annotated[
        bool,
        typer.Option(
            "--add-target",
            help="SPEC_ID is an existing spec: add a target for the installed release (one fp4patch does not know), started from the "
            "nearest verified target with the installed parameters and comments naming what changed.",
        ),
    ] = False,
    distribution: Annotated[str, typer.Option("--distribution", help="Distribution that ships the module.")] = "flashinfer-python",
    summary: Annotated[str, typer.Option("--summary", help="One line shown by `fp4patch status`.")] = "TODO: one line",
    python: PythonOpt = None,
    site_packages: SitePackagesOpt = None,
    specs_dir: Annotated[Path | None, typer.Option("--specs-dir", help="Where to write: DIR/<distribution>/<id>.toml (default: ./patches).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing spec file.")] = False,
) -> None:
    """Scaffold a spec for a function of an installed distribution (target, anchors, a before/after case), or with --add-target a target of an existing spec for the installed release."""

    def body() -> int:
        from ..engine.advice import Advice
        from ..locations import builtin_specs_dir
        from ..target.environment import find_distribution
        from ..tools.scaffold import scaffold

        directory = specs_dir or Path("patches")
        env = environment(python, site_packages)
        # the commands advised act on the environment this one was given, with the spec just written
        advice = Advice(environment_options=tuple(env.options), specs_options=("--specs-dir", str(directory)))
        if add_target:
            from ..catalog.fingerprint import ModuleReader
            from ..tools.scaffold import add_target as start_target

            if function:
                raise UsageError("--add-target starts from an existing spec's target; drop --function")
            own = specs_dir if specs_dir and (specs_dir / distribution / f"{spec_id}.toml").is_file() else None
            _, engine, (chosen, *_) = context(python, site_packages, own, [spec_id], env=env)
            reader = ModuleReader(engine.dist.site_packages, engine.sources.released_bytes)
            listed = engine.catalog.lists(engine.dist.version)
            path = start_target(chosen, engine.resolve(chosen), engine.dist, listed, reader, directory)
            out.print(f"wrote {path}: a target for {engine.dist.version}, started from the nearest verified one", markup=False)
            out.print(f"next: check it as its comments say, then `{advice.command('diff', '--spec', spec_id)}`", markup=False)
            return EXIT_OK
        if not function:
            raise UsageError("give --function MODULE:FUNCTION (a new spec), or --add-target (a target of an existing spec)")
        dist = find_distribution(env, distribution)
        path = scaffold(dist, spec_id, function, summary, directory, force=force, advice=Advice(environment_options=tuple(env.options)))
        out.print(f"wrote {path}")
        if not (directory / dist.name / "cuda-version-from-torch.toml").exists():
            out.print(
            f"note: --specs-dir replaces the built-in specs; copy them beside yours to keep them: cp -r {shlex.quote(str(builtin_specs_dir()))}/* {shlex.quote(str(directory))}/",
            markup=False,
        )
        out.print(f"next: edit its code and rationale, then `{advice.command('diff', '--spec', spec_id)}`", markup=False)
        return EXIT_OK

    run_body(False, body)
