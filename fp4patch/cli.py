"""The ``fp4patch`` command line: a thin layer over :mod:`fp4patch.engine`.

Every command takes ``--python PATH`` or ``--site-packages DIR`` (the target environment),
``--spec ID`` (repeatable; default: the specs marked default) and ``--json``. Exit codes are
listed in :mod:`fp4patch.errors` and the README.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from . import __version__
from .errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE, Fp4PatchError, UsageError
from .render import (
    JSON_SCHEMA_VERSION,
    err,
    out,
    output_conflict,
    paint,
    reports_lines,
    scan_lines,
    trace_lines,
    use_color,
    wrap,
    wrapped,
    skipped_lines,
)
from .torch_support import check_torch


def _plain_flags(params: list) -> list:
    """``params`` with every flag shown bare in help (typer >= 0.25 shows ``--json <bool>``,
    although ``--json true`` is an error: a flag takes no value)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


def _unwrapped(text: str | None) -> str | None:
    """A docstring's paragraphs each on one line, for the help screen to wrap at the terminal's width
    (typer 0.29 keeps the single line breaks of every paragraph after the first, so a docstring wrapped
    at 100 columns was wrapped again, mid-sentence, on an 80-column terminal)."""
    if not text:
        return text
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


class Command(TyperCommand):
    """A typer command whose help shows flags without a value and arguments as ``SPEC_ID``
    (typer >= 0.25 writes a required argument as ``{spec_id}`` in the usage line)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.help = _unwrapped(self.help)

    def get_params(self, ctx):
        return _plain_flags(super().get_params(ctx))

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = param.metavar or param.name.upper()
                pieces.append(name if param.required else f"[{name}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


class Group(TyperGroup):
    """The ``fp4patch`` group: flags shown without a value, as in :class:`Command`."""

    def get_params(self, ctx):
        return _plain_flags(super().get_params(ctx))


app = typer.Typer(
    name="fp4patch",
    cls=Group,
    help="Statically patch an installed FlashInfer so that its FP4 path (quantizers, GEMM, MoE) compiles under torch.compile(fullgraph=True).",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)

PythonOpt = Annotated[
    Optional[str],
    typer.Option("--python", metavar="<path>", help="Interpreter of the target environment (e.g. /opt/venv/bin/python); with --site-packages, the interpreter (with torch) that runs the checks on that directory."),
]
SitePackagesOpt = Annotated[Optional[Path], typer.Option("--site-packages", help="Target site-packages directory (with --python: checked with that interpreter).")]
SpecOpt = Annotated[Optional[list[str]], typer.Option("--spec", metavar="<id>", help="Spec id to select (repeatable); default: specs marked default.")]
StatusSpecOpt = Annotated[Optional[list[str]], typer.Option("--spec", metavar="<id>", help="Spec id to show (repeatable); default: every known spec.")]
RevertSpecOpt = Annotated[
    Optional[list[str]],
    typer.Option("--spec", metavar="<id>", help="Spec id to revert (repeatable; the others stay applied); default: every applied spec."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
SpecsDirOpt = Annotated[Optional[Path], typer.Option("--specs-dir", help="Load specs from this directory instead of the built-in ones.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors; the exit code tells.")]
SkipOpt = Annotated[
    Optional[list[str]],
    typer.Option("--skip", metavar="<id>", help="Leave this spec out by name (repeatable), e.g. one whose code differs from every verified release."),
]
StrictOpt = Annotated[
    bool,
    typer.Option("--strict", help="Every selected spec must apply: fail on a default spec declared unsupported on this release instead of leaving it out."),
]
FormatOpt = Annotated[
    Optional[str],
    typer.Option(
        "--format", metavar="<table|json|github>", help="Output: table (default), json (same as --json), or github (GitHub Actions annotations)."
    ),
]

def _run(as_json: bool, body: Callable[[], int], quiet: bool = False, github: bool = False) -> None:
    """Run a command body; turn :class:`Fp4PatchError` into one line on stderr and its exit code (with
    ``--json``, also the JSON error object on stdout; with ``--format github``, an ``::error`` annotation)."""
    out.quiet = quiet
    from .interrupts import INTERRUPTS

    try:
        code = body()
    except INTERRUPTS as interrupt:  # Ctrl-C, or SIGTERM (interrupts.Terminated)
        from .interrupts import exit_code, message, settle

        settle()

        err.print(f"fp4patch: {message(_command_name(), interrupt)}", markup=False)
        raise typer.Exit(exit_code(interrupt)) from None
    except PermissionError as denied:  # a file or folder this user may not read or write: one line, exit 3
        exc = _permission_error(denied)
        message = str(exc)
        if as_json:
            print(json.dumps({"schema": JSON_SCHEMA_VERSION, "error": message, "exit_code": exc.exit_code}))
        err.print(f"fp4patch: error: {message}", markup=False)
        raise typer.Exit(exc.exit_code) from None
    except Fp4PatchError as exc:
        message = _error_message(exc)
        if as_json:
            print(json.dumps({"schema": JSON_SCHEMA_VERSION, "error": message, "exit_code": exc.exit_code}))
        elif github:  # a CI log shows the annotations: the refusal is one too
            from .render import escape_annotation

            print(f"::error title=fp4patch {_command_name()} failed::{escape_annotation(message)}", flush=True)
        err.print(f"fp4patch: error: {message}", markup=False)
        raise typer.Exit(exc.exit_code) from None
    raise typer.Exit(code)


def _permission_error(denied: PermissionError) -> Fp4PatchError:
    """The one-line refusal (exit 3) for a file or folder this user may not read or write: fp4patch's state
    (``.fp4patch/``, written by another user under a strict umask, or by fp4patch before it gave the state
    site-packages' mode) names the ``chmod`` that shares it; anything else, the owner."""
    from .errors import FileSystemError
    from .locations import STATE_DIR

    where = denied.filename or "a file"
    parts = Path(str(where)).parts
    if STATE_DIR in parts:
        state = Path(*parts[: parts.index(STATE_DIR) + 1])
        return FileSystemError(
            f"{where}: cannot read fp4patch's state ({denied.strerror}): another user wrote it under a strict umask; "
            f"run as that user, or let everyone read it: `chmod -R a+rX {state}`"
        )
    return FileSystemError(f"{where}: {denied.strerror}; run as the owner of the environment, or make it readable")


def _command_name() -> str:
    """The subcommand this process runs (``verify``), for messages; ``""`` when there is none."""
    return next((a for a in sys.argv[1:] if not a.startswith("-")), "")


def _error_message(exc: Fp4PatchError) -> str:
    """The one line an error ends a command with: its message, and for a distribution that is not
    installed, what fp4patch left there for it (:func:`fp4patch.leftovers.gone_note`)."""
    from .environment import NotInstalled

    if isinstance(exc, NotInstalled):
        from .leftovers import gone_note

        return str(exc) + gone_note(exc.env, exc.name)
    return str(exc)


def _check_output_options(as_json: bool, output_format: str | None, quiet: bool) -> None:
    """Exit 2 with one line for an unknown ``--format`` or output options that contradict
    each other (:func:`fp4patch.render.output_conflict`)."""
    problem = output_conflict(as_json, output_format, quiet)
    if problem:
        err.print(f"fp4patch: error: {problem}", markup=False)
        raise typer.Exit(EXIT_USAGE)


def _environment(python: str | None, site_packages: Path | None):
    """The target environment named by --python / --site-packages (default: this interpreter's)."""
    from .environment import resolve

    return resolve(python, site_packages)


def _selection(specs_dir: Path | None, spec_ids: list[str] | None, all_specs: bool = False, skip: list[str] | None = None):
    """``(all specs, selected specs, their one distribution)``; raises UsageError for none or several."""
    from .engine import select_specs
    from .spec import load_specs

    specs = load_specs(specs_dir)
    selected = specs if all_specs and not spec_ids else select_specs(specs, spec_ids, skip)
    if not selected:
        raise UsageError("no spec selected; name one with --spec (see `fp4patch status`)")
    distributions = sorted({s.distribution for s in selected})
    if len(distributions) > 1:
        raise UsageError(f"selected specs patch several distributions ({', '.join(distributions)}); select one with --spec")
    return specs, selected, distributions[0]


def _context(
    python: str | None, site_packages: Path | None, specs_dir: Path | None, spec_ids: list[str] | None, all_specs: bool = False, env=None,
    skip: list[str] | None = None,
):
    """``(environment, engine, selected specs)`` for a command; ``env`` when already resolved."""
    from .catalog import load_catalog
    from .engine import Engine
    from .environment import find_distribution

    specs, selected, distribution = _selection(specs_dir, spec_ids, all_specs, skip)
    env = env or _environment(python, site_packages)
    dist = find_distribution(env, distribution)
    notify = lambda message: err.print(f"fp4patch: {message}", markup=False)  # noqa: E731
    # the interpreter whose torch checks a needs-check spec on CPU: --python's, else fp4patch's own
    engine = Engine(dist, [s for s in specs if s.distribution == dist.name], notify=notify, catalog=load_catalog(dist.name, specs_dir), target_env=env)
    # commands its messages advise repeat the options naming this environment and these specs
    engine.environment_options = env.options
    engine.specs_options = _specs_options(specs_dir)
    return env, engine, selected


def _print_lines(lines: list[str]) -> None:
    """Print plain (possibly ANSI-coloured) lines on stdout unless ``--quiet``; flushed, so that
    they keep their order with rich's output."""
    if not out.quiet:
        print("\n".join(lines), flush=True)


def _header(engine) -> dict[str, Any]:
    d = engine.dist
    return {"schema": JSON_SCHEMA_VERSION, "distribution": d.name, "version": str(d.version), "site_packages": str(d.site_packages)}


def _release_note(engine, reports) -> list[str]:
    """For a release the catalog does not list: one line saying so, how the specs were placed,
    and that the kernels are C++ (``verify --opcheck`` on a GPU); [] for a listed release."""
    from .evidence import OPCHECK_NOTE

    if engine.catalog.lists(engine.dist.version):
        return []
    latest = engine.catalog.latest.version
    return wrap(
        f"note: {engine.dist.version} is not a release fp4patch knows (latest known: {latest}); each spec takes the target whose "
        f"verified code equals the installed code, else the nearest release's, checked on CPU by `fp4patch apply`; {OPCHECK_NOTE}"
    )


@app.command(cls=Command)
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
        _check_output_options(as_json, None, quiet)
        if skip:  # an unknown id is the same usage error as in apply and verify
            _selection(specs_dir, None, skip=skip)
        _, engine, selected = _context(python, site_packages, specs_dir, spec, all_specs=True)
        reports = [engine.report(s) for s in selected]
        manifest = engine.store.load()
        applied = manifest.specs if manifest else []
        stale = engine.stale_record()  # left from another install of the distribution
        interrupted = engine.interrupted()  # an apply/revert killed half-way (its journal), or stale bytecode
        from .render import status_output

        note = [] if as_json else _release_note(engine, reports)
        status_output(_header(engine), applied, stale, interrupted, [r.to_json() for r in reports], note, as_json, quiet, skip=skip)
        return EXIT_OK

    _run(as_json, body, quiet)


@app.command(cls=Command)
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
        _check_output_options(as_json, None, quiet)
        _, engine, selected = _context(python, site_packages, specs_dir, spec, skip=skip)
        plans = engine.diff(selected, _required(selected, spec, strict))
        unchecked = [s.id for s in selected if engine.report(s).state == "needs-check"]
        if unchecked:
            err.print(f"fp4patch: note: {', '.join(unchecked)} differ from the code they were verified on; `fp4patch apply` checks them on CPU first and writes this only if that passes", markup=False)
        if as_json:
            print(json.dumps({**_header(engine), "files": [{"file": p.relative, "specs": p.specs, "diff": p.unified_diff()} for p in plans]}, indent=2))
            return EXIT_OK
        if not plans:
            from .render import nothing_to_change

            done = nothing_to_change(_header(engine), [engine.report(s).to_json() for s in selected])
            if stat:  # the summary of a patched environment says so, not "0 file(s)"
                _print_lines([done])
                return EXIT_OK
            err.print(done, markup=False)  # stdout stays an empty diff
        if stat:
            _print_lines(_diff_stat(plans))
            return EXIT_OK
        for plan in plans:
            text = plan.unified_diff()
            if out.is_terminal:
                from rich.syntax import Syntax

                out.print(Syntax(text, "diff", theme="ansi_dark", background_color="default"))
            else:
                sys.stdout.write(text)
        return EXIT_OK

    _run(as_json, body, quiet)


@app.command(cls=Command)
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
        _check_output_options(as_json, None, quiet)
        from .verdict import Request, record

        env, engine, selected = _context(python, site_packages, specs_dir, spec, skip=skip)
        check_torch(env, "apply")  # below the supported torch: one line, nothing written
        required = _required(selected, spec, strict)
        reports: list[dict] = []

        def record_verdict() -> None:  # under apply's lock
            engine.forget_reads()  # the verdict's key: exactly the files the reports below read
            reports[:] = [engine.report(s).to_json() for s in selected]
            view = None
            if not spec and not skip and not strict:  # a plain apply: also what a plain `status` prints (every spec)
                manifest = engine.store.load()
                view = {
                    "reports": [engine.report(s).to_json() for s in engine.specs],
                    "recorded": manifest.specs if manifest else [],
                    "listed": engine.catalog.lists(engine.dist.version),
                }
            record(
                engine.dist, engine.store, engine.inputs, engine.interrupted, Request.of(spec, specs_dir, strict, skip), reports, _header(engine),
                status=view,
            )

        written = engine.apply(selected, allow_modified=allow_modified, on_success=record_verdict, required=required)
        if not reports:  # a read-only site-packages with everything applied: no verdict recorded
            reports[:] = [engine.report(s).to_json() for s in selected]
        from .render import apply_output

        skipped = [{"id": r.spec.id, "state": r.state, "detail": "--skip"} for r in (engine.report(s) for s in engine.specs if s.id in (skip or ()))]

        apply_output(_header(engine), [s.id for s in selected], reports, required, [(p.relative, p.specs) for p in written], engine.store.root, as_json, skipped=skipped)
        return EXIT_OK

    _run(as_json, body, quiet)


def _print_changes(engine, selected) -> None:
    """``verify --show-changes``: on stderr, the hunks of each spec's code against the nearest
    verified release (:func:`fp4patch.evidence.changed_hunks`), or why they cannot be fetched."""
    import tempfile

    from .evidence import changed_hunks

    with tempfile.TemporaryDirectory(prefix="fp4patch-changes-") as scratch:
        for spec in selected:
            try:
                text = changed_hunks(engine, spec, scratch)
            except Fp4PatchError as exc:
                err.print(f"fp4patch: {spec.id}: no hunks ({exc})", markup=False)
                continue
            if text:
                err.print(f"fp4patch: {spec.id}: the code that differs from the nearest verified release:", markup=False)
                sys.stderr.write(text)
                sys.stderr.flush()


def _diff_stat(plans) -> list[str]:
    """``diff --stat``: per file ``path  +added -removed  (specs)``, aligned, then a total line."""
    from .render import aligned

    rows = []
    for plan in plans:
        lines = plan.unified_diff().splitlines()
        added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
        removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
        rows.append((plan.relative, f"+{added} -{removed}", ", ".join(plan.specs), added, removed))
    out = aligned([[(r[0], ""), (r[1], ""), (r[2], "")] for r in rows])
    out.append(f"{len(rows)} file(s), +{sum(r[3] for r in rows)} -{sum(r[4] for r in rows)} lines; `fp4patch diff` without --stat prints them")
    return out


def _required(selected, spec_ids: list[str] | None, strict: bool) -> frozenset[str]:
    """The selected spec ids that must apply even where declared ``unsupported``: every one with
    ``--strict``, those named with ``--spec`` (asked for by name), none for the default selection
    (:func:`fp4patch.states.accepted`)."""
    if strict:
        return frozenset(s.id for s in selected)
    return frozenset(spec_ids or ())


def _specs_options(specs_dir: Path | None) -> tuple[str, ...]:
    """``("--specs-dir", D)`` as a command was given it, or ``()``: with the environment's own
    options (:attr:`fp4patch.environment.TargetEnvironment.options`), what a command it advises
    repeats to work on the same environment with the same specs (:meth:`fp4patch.engine.Engine.command`,
    :func:`fp4patch.render.apply_command`)."""
    return ("--specs-dir", str(specs_dir)) if specs_dir else ()


@app.command(cls=Command)
def verify(
    python: PythonOpt = None,
    site_packages: SitePackagesOpt = None,
    spec: SpecOpt = None,
    as_json: JsonOpt = False,
    specs_dir: SpecsDirOpt = None,
    applicable: Annotated[bool, typer.Option("--applicable", help="Pass when each spec is applied or could be applied.")] = False,
    trace: Annotated[bool, typer.Option("--trace", help="Also compile fp4_quantize, and every function whose fullgraph spec is applied, with fullgraph=True on fake CUDA tensors in the target interpreter (CPU is enough).")] = False,
    opcheck: Annotated[bool, typer.Option("--opcheck", help="Also run torch.library.opcheck of every patched op against the real kernel (needs a CUDA GPU in the target environment).")] = False,
    against: Annotated[Optional[str], typer.Option("--against", metavar="<name==version>", help="Check a release before upgrading, e.g. flashinfer-python==0.7.4: fetched and unpacked into a temporary directory; no environment is touched.")] = None,
    wheel: Annotated[Optional[Path], typer.Option("--wheel", help="Like --against, for a local wheel file.")] = None,
    sdist: Annotated[Optional[Path], typer.Option("--sdist", help="Like --against, for a local sdist (.tar.gz) file.")] = None,
    output_format: FormatOpt = None,
    quiet: QuietOpt = False,
    skip: SkipOpt = None,
    strict: StrictOpt = False,
    show_changes: Annotated[
        bool,
        typer.Option("--show-changes", help="On a release fp4patch does not know: print the hunks of the code that differs from the nearest verified release (downloaded into the cache)."),
    ] = False,
) -> None:
    """Check each selected spec on the installed files; never writes.

    Exit 0 when every selected spec is applied (or applicable, with --applicable; a default spec declared unsupported on the release counts as done, unless --strict) and, with --trace, every trace case passes; 1 otherwise. With --applicable, a spec whose code differs from every release it was verified on is checked on CPU as apply would. With --against/--wheel/--sdist, the release is checked in a temporary directory instead: each spec must be applicable (or applied, or declared) on the pristine release and applied after patching that copy.
    """
    _check_output_options(as_json, output_format, quiet)
    as_json = as_json or output_format == "json"
    github = output_format == "github"
    if against or wheel or sdist:
        _run(as_json, lambda: _verify_against(python, site_packages, spec, as_json, specs_dir, trace, against, wheel, sdist, github, skip, strict), quiet, github)
        return

    def body() -> int:
        from .engine import SATISFIED
        from .render import verify_output
        from .verdict import Request, lookup

        request = Request.of(spec, specs_dir, strict, skip)
        ok_states = set(SATISFIED) | ({"applicable"} if applicable else set()) | (set() if request.required else {"unsupported"})
        env = _environment(python, site_packages)
        check_torch(env, "verify")  # below the supported torch: one line
        recorded = lookup(env, request) if not show_changes else None
        if recorded is not None:  # apply recorded this answer and none of its inputs changed
            header, reports, interrupted, specs_by_id = recorded.header, recorded.reports, None, {}
            where = recorded.site_packages
        else:
            env, engine, selected = _context(python, site_packages, specs_dir, spec, env=env, skip=skip)
            if applicable:  # as apply would: a spec in needs-check is checked on CPU
                engine.check_on_cpu(selected, _required(selected, spec, strict))
            header, reports = _header(engine), [engine.report(s).to_json() for s in selected]
            interrupted, specs_by_id, where = engine.interrupted(), {s.id: s for s in selected}, engine.dist.site_packages
            # a spec undone by an edit of a file fp4patch patched: apply refuses that file, so say what works first
            waiting = {t["file"] for r in reports if r["state"] in ("applicable", "needs-check") for t in r.get("targets", [])}
            edited = [f for f in engine.changed_since_apply() if f in waiting]
            if edited and not interrupted:
                from .render import apply_command, blocking

                waiting_reports = [r for r in reports if r["state"] in ("applicable", "needs-check")]
                then = apply_command(waiting_reports, [*env.options, *_specs_options(specs_dir)], blocking(reports, ok_states))
                interrupted = (
                    f"{', '.join(edited)}: changed since fp4patch patched it, and apply refuses such a file: run "
                    f"`{engine.command('revert', '--force')}` (puts the installed originals back), then `{then}`"
                )
        ok = all(r["state"] in ok_states for r in reports)
        if interrupted:
            err.print(f"fp4patch: {interrupted}", markup=False)
            ok = False
        cases = functions = None
        trace_note = ""
        if trace:
            from .cpu_check import TRACED_SPEC
            from .trace import entries_for_specs, probe_release_data, run_probe, run_scan

            if TRACED_SPEC in (skip or ()):  # the probe's cases are fp4_quantize's: they go with its spec
                trace_note = f"the trace probe's fp4_quantize cases are {TRACED_SPEC}'s, left out with --skip {TRACED_SPEC}"
            else:
                cases = run_probe(env, where if site_packages else None)
                ok = ok and bool(cases) and all(c.get("passed") for c in cases)
            # every function whose fullgraph spec is applied: the scan's call must compile as one graph,
            # called from a compiled function and handed to torch.compile directly
            names = entries_for_specs({r["id"] for r in reports if r["state"] == "applied"})
            if names:
                if not specs_by_id:  # answered from the recorded verdict: read the release data now
                    _, engine, selected = _context(python, site_packages, specs_dir, spec, env=env, skip=skip)
                else:
                    selected = list(specs_by_id.values())
                release = probe_release_data(engine, selected)
                functions = run_scan(env, where if site_packages else None, only=names, release=release)["results"]
                ok = ok and all(r.get("passed") for r in functions)
        checked = None
        if opcheck:
            from .trace import run_opcheck

            checked = run_opcheck(env, where if site_packages else None)
            ok = ok and not any(r["status"] == "failed" for r in checked)
        if show_changes and specs_by_id:
            _print_changes(engine, list(specs_by_id.values()))
        output = "json" if as_json else "github" if github else "table"
        verify_output(
            header, reports, ok, ok_states, output, interrupted, cases, specs_by_id, quiet=quiet, functions=functions, opcheck=checked,
            apply_options=[*env.options, *_specs_options(specs_dir)], left_out=skipped_lines(skip), trace_note=trace_note,
        )
        return EXIT_OK if ok else EXIT_CHECK_FAILED

    _run(as_json, body, quiet, github)


@app.command(cls=Command)
def scan(
    python: PythonOpt = None,
    site_packages: SitePackagesOpt = None,
    as_json: JsonOpt = False,
    only: Annotated[Optional[list[str]], typer.Option("--function", help="Scan only this entry (repeatable), e.g. mm_fp4[auto].")] = None,
    quiet: QuietOpt = False,
    skip: SkipOpt = None,
) -> None:
    """Try each FP4/FP8 quantization, GEMM and MoE function under torch.compile(fullgraph=True) on CPU.

    One child interpreter (the target's) imports FlashInfer with CPU stand-ins for the device
    queries and compiles one representative call per function on fake CUDA tensors. Prints per
    function: compiles (1 graph, ops: ...), the Dynamo error's first line and the FlashInfer
    file:line where tracing stopped, or not present. Exit 0 when the scan ran, whatever compiles
    (it is a report; `verify --trace` is the check); 2 when the target cannot import torch or
    FlashInfer.
    """

    def body() -> int:
        from .render import is_terminal, scan_lines, scan_summary, scan_table
        from .trace import declare_not_needed, leave_out, probe_release_data, run_scan, scan_entries

        if skip:  # an unknown id is the same usage error as in apply and verify
            from .selection import select_specs
            from .spec import load_specs

            select_specs(load_specs(None), None, skip)
        names = only
        if only:
            known = [e["name"] for e in scan_entries()]
            # a base name selects its entry and each of its variants (mm_fp4: mm_fp4[cutlass], mm_fp4[trtllm], ...;
            # mxfp8_quantize: mxfp8_quantize, mxfp8_quantize[cuda], mxfp8_quantize[cute-dsl]), each once
            names = list(dict.fromkeys(n for name in only for n in ([k for k in known if k == name or k.split("[")[0] == name] or [name])))
            unknown = [name for name in names if name not in known]
            if unknown:
                import difflib

                close = difflib.get_close_matches(unknown[0], known, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]}? " if close else ""
                raise UsageError(f"--function {unknown[0]}: not a scan entry; {hint}choose from {', '.join(known)}")
        env = _environment(python, site_packages)
        check_torch(env, "scan")
        _, engine, selected = _context(python, site_packages, None, None, all_specs=True, env=env)
        dist = engine.dist
        h = {"schema": JSON_SCHEMA_VERSION, "distribution": dist.name, "version": str(dist.version), "site_packages": str(dist.site_packages)}
        # each call's release-dependent arguments come from the release data the ops are rendered from
        payload = run_scan(env, dist.site_packages if site_packages else None, only=names, release=probe_release_data(engine, selected))
        # a function its spec declares not-needed on this release (a host op) is reported with the spec's reason
        results = leave_out(declare_not_needed(payload["results"], dist.version), skip)
        if as_json:
            counts = {s: sum(1 for r in results if r["status"] == s) for s in ("compiles", "fails", "not-present", "no-call", "not-needed", "left-out")}
            print(json.dumps({**h, "flashinfer": payload.get("flashinfer"), "torch": payload.get("torch"), "counts": counts, "functions": results}, indent=2))
            return EXIT_OK
        title = f"{h['distribution']} {h['version']} under torch.compile(fullgraph=True), CPU fake tensors (torch {payload.get('torch')})"
        if skip and not quiet:
            print("\n".join(skipped_lines(skip)), flush=True)
        if is_terminal():
            out.print(scan_table(title, results))
            out.print(scan_summary(results))
        elif not quiet:
            print("\n".join([f"{h['distribution']} {h['version']} in {h['site_packages']}", *scan_lines(results), *wrap(scan_summary(results))]), flush=True)
        return EXIT_OK

    _run(as_json, body, quiet)


def _verify_against(python, site_packages, spec_ids, as_json, specs_dir, trace, against, wheel, sdist, github=False, skip=None, strict=False) -> int:
    from .against import check_against, resolve_archive
    from .environment import from_python

    if site_packages:
        raise UsageError("--against/--wheel/--sdist check a release in a temporary directory; drop --site-packages")
    specs, selected, distribution = _selection(specs_dir, spec_ids, skip=skip)
    from .catalog import load_catalog

    source, archive = resolve_archive(against, wheel, sdist, distribution, load_catalog(distribution, specs_dir))
    trace_env = from_python(python) if python else None
    report = check_against(
        source, archive, specs, selected, trace=trace, trace_env=trace_env, specs_dir=specs_dir, required=_required(selected, spec_ids, strict),
        skip=frozenset(skip or ()),
    )
    if as_json:
        payload = {
            "against": report.source,
            "archive": str(report.archive),
            "kind": report.kind,
            "distribution": report.distribution,
            "version": report.version,
            "catalog": {"where": report.catalog, "message": report.catalog_message},
            "ok": report.ok,
            "specs": [r.to_json() for r in report.pristine],
            "after_apply": [r.to_json() for r in report.after_apply],
            "apply_error": report.apply_error,
            "drifted": report.drifted,
        }
        if trace:
            payload["trace"] = report.trace
            payload["trace_note"] = report.trace_note
            if report.trace_functions is not None:
                payload["trace_functions"] = report.trace_functions
        print(json.dumps({"schema": JSON_SCHEMA_VERSION, **payload}, indent=2))
    elif github:
        from .engine import SATISFIED

        prefix = f"{report.distribution} {report.version}: "
        from .render import github_annotations

        github_annotations(
            [r.to_json() for r in report.pristine], set(SATISFIED) | {"applicable"}, None, report.trace, prefix,
            {r.spec.id: r.spec for r in report.pristine}, functions=report.trace_functions,
        )
        for line in report.drifted:
            print(f"::error title=fp4patch --against {report.version}::{line}")
        if report.catalog != "known":
            print(f"::warning title=fp4patch --against {report.version}::{report.catalog_message}")
    else:
        style = {"known": "", "newer": "bold yellow", "unknown": "yellow"}[report.catalog]
        color = use_color()
        lines = [
            f"{paint(report.distribution + ' ' + report.version, 'bold', color)} ({report.kind} {report.archive.name}), unpacked in a temporary directory",
            paint(report.catalog_message, style, color),
            "on the pristine release:",
            *reports_lines([r.to_json() for r in report.pristine], color=color),
        ]
        if report.after_apply:
            lines += ["after apply (in the temporary copy):", *reports_lines([r.to_json() for r in report.after_apply], color=color)]
        lines += [w.replace("will not apply:", paint("will not apply:", "red", color), 1) for line in report.drifted for w in wrap(f"will not apply: {line}")]
        if report.trace is not None:
            lines += trace_lines(report.trace, color)
        if report.trace_functions:
            lines += ["patched functions under fullgraph:", *scan_lines(report.trace_functions)]
        if report.trace_note:
            lines.append(report.trace_note)
        verdict = "our patches apply to this release" if report.ok else "our patches do NOT apply cleanly to this release"
        lines.append(paint(f"verify --against: ok: {verdict}", "green", color) if report.ok else paint(f"verify --against: failed: {verdict}", "red", color))
        _print_lines(lines)
    return EXIT_OK if report.ok else EXIT_CHECK_FAILED


@app.command(cls=Command)
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
        _check_output_options(as_json, None, quiet)
        _, engine, _ = _context(python, site_packages, specs_dir, None, all_specs=True)
        from .selection import check_known

        check_known(spec or [], [s.id for s in engine.specs])  # a typo is "unknown spec", as in every other command
        if spec and engine.store.load() is None and not engine.interrupted():
            # the same answer as naming a spec that is not applied while others are (exit 2)
            raise UsageError(f"spec {min(spec)!r} is not applied here (applied: none); `fp4patch status` shows the state of each spec")
        recorded = engine.store.load() is not None
        restored = engine.revert(spec, force=force)
        manifest = engine.store.load()
        remaining = manifest.applied_specs() if manifest else []
        if as_json:
            print(json.dumps({**_header(engine), "restored": restored, "still_applied": remaining}, indent=2))
        elif not restored and not engine.dropped and not (spec and recorded):
            out.print("nothing to revert: no fp4patch manifest here")
        else:
            for relative in restored:
                out.print(f"restored {relative}")
            h = _header(engine)
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

    _run(as_json, body, quiet)


@app.command(cls=Command)
def clean(
    python: PythonOpt = None,
    site_packages: SitePackagesOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Remove fp4patch's state left for a distribution that was uninstalled or reinstalled. Never touches installed files."""

    def body() -> int:
        from .leftovers import clean as remove_leftovers

        removed, kept = remove_leftovers(_environment(python, site_packages))
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

    _run(as_json, body, quiet)


@app.command(cls=Command)
def new(
    spec_id: Annotated[str, typer.Argument(metavar="SPEC_ID", help="Id of the new spec (kebab-case); also its file name.")],
    function: Annotated[
        Optional[str],
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
    specs_dir: Annotated[Optional[Path], typer.Option("--specs-dir", help="Where to write: DIR/<distribution>/<id>.toml (default: ./patches).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing spec file.")] = False,
) -> None:
    """Scaffold a spec for a function of an installed distribution (target, anchors, a before/after case), or with --add-target a target of an existing spec for the installed release."""

    def body() -> int:
        from .environment import find_distribution
        from .locations import builtin_specs_dir
        from .scaffold import scaffold

        directory = specs_dir or Path("patches")
        where = " ".join([*(["--python", str(python)] if python else []), *(["--site-packages", str(site_packages)] if site_packages else [])])
        if add_target:
            from .scaffold import add_target as start_target

            if function:
                raise UsageError("--add-target starts from an existing spec's target; drop --function")
            own = specs_dir if specs_dir and (specs_dir / distribution / f"{spec_id}.toml").is_file() else None
            _, engine, (chosen, *_) = _context(python, site_packages, own, [spec_id])
            path = start_target(engine, chosen, directory)
            out.print(f"wrote {path}: a target for {engine.dist.version}, started from the nearest verified one", markup=False)
            out.print(f"next: check it as its comments say, then `fp4patch diff --spec {spec_id} --specs-dir {directory} {where}`".rstrip(), markup=False)
            return EXIT_OK
        if not function:
            raise UsageError("give --function MODULE:FUNCTION (a new spec), or --add-target (a target of an existing spec)")
        dist = find_distribution(_environment(python, site_packages), distribution)
        path = scaffold(dist, spec_id, function, summary, directory, force=force)
        out.print(f"wrote {path}")
        if not (directory / dist.name / "cuda-version-from-torch.toml").exists():
            out.print(f"note: --specs-dir replaces the built-in specs; copy them beside yours to keep them: cp -r {builtin_specs_dir()}/* {directory}/")
        out.print(f"next: edit its code and rationale, then `fp4patch diff --spec {spec_id} --specs-dir {directory} {where}`".rstrip())
        return EXIT_OK

    _run(False, body)


def version_callback(value: bool) -> None:
    if value:
        print(f"fp4patch {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Show the version.")] = False,
) -> None:
    """Statically patch an installed FlashInfer so that its FP4 path (quantizers, GEMM, MoE) compiles under torch.compile(fullgraph=True)."""


def run() -> None:
    """Console-script entry point: exit codes as documented; a usage error is one line (exit 2)."""
    try:  # typer >= 0.25 vendors click as typer._click; older typer uses click itself
        from typer._click.exceptions import NoArgsIsHelpError
        from typer._click.exceptions import UsageError as ClickUsageError
    except ImportError:
        from click.exceptions import NoArgsIsHelpError
        from click.exceptions import UsageError as ClickUsageError

    from . import interrupts

    try:
        code = app(prog_name="fp4patch", standalone_mode=False)
        if code == interrupts.EXIT_INTERRUPTED and not interrupts.reported:
            # typer returns a KeyboardInterrupt that escaped the command's parsing as a silent 130
            raise KeyboardInterrupt
    except NoArgsIsHelpError:
        sys.exit(EXIT_USAGE)  # typer has printed the help once already
    except ClickUsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "fp4patch"
        print(f"fp4patch: error: {exc.format_message()} (see `{command} --help`)", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except (*interrupts.INTERRUPTS, typer.Abort) as interrupt:
        from .interrupts import exit_code, message, settle

        settle()

        print(f"fp4patch: {message(_command_name(), interrupt)}", file=sys.stderr)
        sys.exit(exit_code(interrupt))
    sys.exit(code if isinstance(code, int) else EXIT_OK)
