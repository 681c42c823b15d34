"""What a command needs from the engine before it does its work: the target environment, the selected specs and an
:class:`fp4patch.engine.Engine` over them, and the pieces every report starts with.

Owns the translation of the shared options (:mod:`.options`) into engine calls; raises the engine's errors
(:class:`fp4patch.errors.Fp4PatchError`) for :func:`fp4patch.cli.running.run_body` to report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError
from .render import JSON_SCHEMA_VERSION, err, out, wrap


def environment(python: str | None, site_packages: Path | None):
    """The target environment (:class:`fp4patch.target.environment.TargetEnvironment`) named by ``--python`` (a path) and/or
    ``--site-packages`` (a directory); default: this interpreter's.

    Raises:
        fp4patch.errors.EnvironmentProblem: an interpreter that does not run, a directory that is not a site-packages
            (exit 2).
    """
    from ..target.environment import resolve

    return resolve(python, site_packages)


def selection(specs_dir: Path | None, spec_ids: list[str] | None, all_specs: bool = False, skip: list[str] | None = None):
    """``(all specs, selected specs, their one distribution)`` for ``--specs-dir`` (or the built-in specs), ``--spec``
    ids (default: the specs marked default; with ``all_specs``, every spec) and ``--skip`` ids.

    Raises:
        fp4patch.errors.UsageError: an unknown id, no spec selected, or specs of several distributions (exit 2).
        fp4patch.errors.SpecError: a malformed spec file (exit 2).
    """
    from ..catalog.spec import load_specs
    from ..engine.coordinator import select_specs

    specs = load_specs(specs_dir)
    selected = specs if all_specs and not spec_ids else select_specs(specs, spec_ids, skip)
    if not selected:
        raise UsageError("no spec selected; name one with --spec (see `fp4patch status`)")
    distributions = sorted({s.distribution for s in selected})
    if len(distributions) > 1:
        raise UsageError(f"selected specs patch several distributions ({', '.join(distributions)}); select one with --spec")
    return specs, selected, distributions[0]


def context(
    python: str | None, site_packages: Path | None, specs_dir: Path | None, spec_ids: list[str] | None, all_specs: bool = False, env=None,
    skip: list[str] | None = None,
):
    """``(environment, engine, selected specs)`` for a command (arguments: :func:`environment`, :func:`selection`);
    ``env`` when already resolved. The engine's notes go to stderr, one line each.

    Raises:
        fp4patch.errors.Fp4PatchError: as :func:`environment` and :func:`selection`; the distribution not installed
            there (:class:`fp4patch.target.environment.NotInstalled`, exit 2).
    """
    from ..catalog.catalog_file import load_catalog
    from ..engine.advice import Advice
    from ..engine.coordinator import Engine
    from ..target.environment import find_distribution

    specs, selected, distribution = selection(specs_dir, spec_ids, all_specs, skip)
    env = env or environment(python, site_packages)
    dist = find_distribution(env, distribution)

    def notify(message: str) -> None:
        err.print(f"fp4patch: {message}", markup=False)

    # target_env: the interpreter whose torch checks a needs-check spec on CPU (--python's, else fp4patch's own);
    # advice: the commands its messages advise repeat the options naming this environment and these specs
    engine = Engine(
        dist, [s for s in specs if s.distribution == dist.name], notify=notify, catalog=load_catalog(dist.name, specs_dir), target_env=env,
        advice=Advice(environment_options=tuple(env.options), specs_options=specs_options(specs_dir)),
    )
    return env, engine, selected


def header(engine) -> dict[str, Any]:
    """The keys every JSON report starts with (``schema``, ``distribution``, ``version``, ``site_packages``, strings but
    the schema), for ``engine`` (:class:`fp4patch.engine.Engine`)."""
    d = engine.dist
    return {"schema": JSON_SCHEMA_VERSION, "distribution": d.name, "version": str(d.version), "site_packages": str(d.site_packages)}


def required(selected, spec_ids: list[str] | None, strict: bool) -> frozenset[str]:
    """The selected spec ids that must apply even where declared ``unsupported``: every one with
    ``--strict``, those named with ``--spec`` (asked for by name), none for the default selection
    (:func:`fp4patch.states.accepted`)."""
    if strict:
        return frozenset(s.id for s in selected)
    return frozenset(spec_ids or ())


def specs_options(specs_dir: Path | None) -> tuple[str, ...]:
    """``("--specs-dir", D)`` as a command was given it, or ``()``: with the environment's own
    options (:attr:`fp4patch.target.environment.TargetEnvironment.options`), what a command it advises
    repeats to work on the same environment with the same specs (:meth:`fp4patch.engine.Engine.command`,
    :func:`fp4patch.cli.render.advice.apply_command`)."""
    return ("--specs-dir", str(specs_dir)) if specs_dir else ()


def print_lines(lines: list[str]) -> None:
    """Print plain (possibly ANSI-coloured) lines on stdout unless ``--quiet``; flushed, so that
    they keep their order with rich's output."""
    if not out.quiet:
        print("\n".join(lines), flush=True)


def release_note(engine) -> list[str]:
    """For a release the catalog does not list: one line saying so, how the specs were placed,
    and that the kernels are C++ (``verify --opcheck`` on a GPU); [] for a listed release."""
    from ..catalog.evidence import OPCHECK_NOTE

    if engine.catalog.lists(engine.dist.version):
        return []
    latest = engine.catalog.latest.version
    return wrap(
        f"note: {engine.dist.version} is not a release fp4patch knows (latest known: {latest}); each spec takes the target whose "
        f"verified code equals the installed code, else the nearest release's, checked on CPU by `fp4patch apply`; {OPCHECK_NOTE}"
    )
