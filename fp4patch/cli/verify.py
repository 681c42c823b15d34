"""``fp4patch verify``: check each selected spec on the installed files, or on a release before upgrading; never writes.

``--trace`` also compiles the probe's cases and the applied specs' functions with fullgraph=True on fake CUDA tensors
in the target interpreter, ``--opcheck`` runs ``torch.library.opcheck`` against the real kernels (a GPU), and
``--against``/``--wheel``/``--sdist`` check a release unpacked in a temporary directory (:mod:`fp4patch.tools.against`).
A plain ``verify`` compares the installed files with the sha256s fp4patch recorded when it wrote them.

Exit codes: 0 when every selected spec passes (and every trace case and patched function compiles, and no opcheck
case fails); 1 otherwise, or for an interrupted apply or revert; 2 for a usage error, an environment that cannot be
read or a torch below the supported range; 3 for a file this user may not read (:mod:`fp4patch.errors`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import EXIT_CHECK_FAILED, EXIT_OK, Fp4PatchError, UsageError
from ..target.torch_support import check_torch
from .context import context, environment, header, print_lines, required, selection, specs_options
from .options import (
    FormatOpt,
    JsonOpt,
    PythonOpt,
    QuietOpt,
    SitePackagesOpt,
    SkipOpt,
    SpecOpt,
    SpecsDirOpt,
    StrictOpt,
    check_output_options,
)
from .render import (
    JSON_SCHEMA_VERSION,
    apply_command,
    blocking,
    err,
    github_annotations,
    paint,
    reports_lines,
    scan_lines,
    skipped_lines,
    trace_lines,
    use_color,
    verify_output,
    workflow_command,
    wrap,
)
from .running import run_body


def verify(
    python: PythonOpt = None,
    site_packages: SitePackagesOpt = None,
    spec: SpecOpt = None,
    as_json: JsonOpt = False,
    specs_dir: SpecsDirOpt = None,
    applicable: Annotated[bool, typer.Option("--applicable", help="Pass when each spec is applied or could be applied.")] = False,
    trace: Annotated[bool, typer.Option("--trace", help="Also compile fp4_quantize, and every function whose fullgraph spec is applied, with fullgraph=True on fake CUDA tensors in the target interpreter (CPU is enough).")] = False,
    opcheck: Annotated[bool, typer.Option("--opcheck", help="Also run torch.library.opcheck of every patched op against the real kernel (needs a CUDA GPU in the target environment).")] = False,
    against: Annotated[str | None, typer.Option("--against", metavar="<name==version>", help="Check a release before upgrading, e.g. flashinfer-python==0.7.4: fetched and unpacked into a temporary directory; no environment is touched.")] = None,
    wheel: Annotated[Path | None, typer.Option("--wheel", help="Like --against, for a local wheel file.")] = None,
    sdist: Annotated[Path | None, typer.Option("--sdist", help="Like --against, for a local sdist (.tar.gz) file.")] = None,
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
    check_output_options(as_json, output_format, quiet)
    as_json = as_json or output_format == "json"
    github = output_format == "github"
    if against or wheel or sdist:
        run_body(as_json, lambda: verify_against(python, site_packages, spec, as_json, specs_dir, trace, against, wheel, sdist, github, skip, strict), quiet, github)
        return

    def body() -> int:
        from ..engine.coordinator import SATISFIED

        must_pass_all = strict or bool(spec)  # every selected spec must apply: none may be left out as unsupported
        ok_states = set(SATISFIED) | ({"applicable"} if applicable else set()) | (set() if must_pass_all else {"unsupported"})
        env = environment(python, site_packages)
        check_torch(env, "verify")  # below the supported torch: one line
        env, engine, selected = context(python, site_packages, specs_dir, spec, env=env, skip=skip)
        if applicable:  # as apply would: a spec in needs-check is checked on CPU
            engine.check_on_cpu(selected, required(selected, spec, strict))
        head, reports = header(engine), [engine.report(s).to_json() for s in selected]
        interrupted, specs_by_id, where = engine.interrupted(), {s.id: s for s in selected}, engine.dist.site_packages
        # a spec undone by an edit of a file fp4patch patched: apply refuses that file, so say what works first
        waiting = {t["file"] for r in reports if r["state"] in ("applicable", "needs-check") for t in r.get("targets", [])}
        edited = [f for f in engine.changed_since_apply() if f in waiting]
        if edited and not interrupted:
            waiting_reports = [r for r in reports if r["state"] in ("applicable", "needs-check")]
            then = apply_command(waiting_reports, [*env.options, *specs_options(specs_dir)], blocking(reports, ok_states))
            interrupted = (
                f"{', '.join(edited)}: changed since fp4patch patched it, and apply refuses such a file: run "
                f"`{engine.command('revert', '--force')}` (puts the installed originals back), then `{then}`"
            )
        # a spec that is not applied yet, in a file apply refuses to write (a symbolic link on its way down from
        # site-packages): not "could be applied"; --json gives it as apply_refused, as status --json does
        refused = engine.apply_refusal(waiting)
        ok = all(r["state"] in ok_states for r in reports)
        if interrupted or refused:
            err.print(f"fp4patch: {interrupted or refused}", markup=False)
            ok = False
        cases = functions = None
        trace_note = ""
        if trace:
            from ..checks.cpu_check import TRACED_SPEC
            from ..checks.trace import entries_for_specs, probe_release_data, run_probe, run_scan

            if TRACED_SPEC in (skip or ()):  # the probe's cases are fp4_quantize's: they go with its spec
                trace_note = f"the trace probe's fp4_quantize cases are {TRACED_SPEC}'s, left out with --skip {TRACED_SPEC}"
            else:
                # --python / this interpreter: the probe imports what the target imports, and must find it where it was checked
                cases = run_probe(env, where if site_packages else None, expect=None if site_packages else where)
                ok = ok and bool(cases) and all(c.get("passed") for c in cases)
            # every function whose fullgraph spec is applied: the scan's call must compile as one graph,
            # called from a compiled function and handed to torch.compile directly
            names = entries_for_specs({r["id"] for r in reports if r["state"] == "applied"})
            if names:
                release = probe_release_data({s.id: engine.resolve(s).targets for s in selected})
                functions = run_scan(env, where if site_packages else None, only=names, release=release, expect=None if site_packages else where)["results"]
                ok = ok and all(r.get("passed") for r in functions)
        checked = None
        if opcheck:
            from ..checks.trace import run_opcheck

            checked = run_opcheck(env, where if site_packages else None)
            ok = ok and not any(r["status"] == "failed" for r in checked)
        if show_changes:
            print_changes(engine, list(specs_by_id.values()))
        output = "json" if as_json else "github" if github else "table"
        verify_output(
            head, reports, ok, ok_states, output, interrupted, cases, specs_by_id, quiet=quiet, functions=functions, opcheck=checked,
            apply_options=[*env.options, *specs_options(specs_dir)], left_out=skipped_lines(skip), trace_note=trace_note,
            apply_refused=refused,
        )
        return EXIT_OK if ok else EXIT_CHECK_FAILED

    run_body(as_json, body, quiet, github)


def verify_against(python, site_packages, spec_ids, as_json, specs_dir, trace, against, wheel, sdist, github=False, skip=None, strict=False) -> int:
    """``verify --against NAME==VERSION`` / ``--wheel FILE`` / ``--sdist FILE`` (the options of :func:`verify`): the
    release unpacked in a temporary directory, each spec checked on the pristine copy and after patching it
    (:func:`fp4patch.tools.against.check_against`); printed as JSON, annotations or text.

    Returns:
        0 when every spec applies to the release, else 1.

    Raises:
        fp4patch.errors.UsageError: with ``--site-packages`` (exit 2).
        fp4patch.errors.Fp4PatchError: a release that cannot be fetched or unpacked, an unusable download cache.
    """
    from ..catalog.catalog_file import load_catalog
    from ..target.environment import from_python
    from ..tools.against import check_against, resolve_archive

    if site_packages:
        raise UsageError("--against/--wheel/--sdist check a release in a temporary directory; drop --site-packages")
    specs, selected, distribution = selection(specs_dir, spec_ids, skip=skip)
    source, archive = resolve_archive(against, wheel, sdist, distribution, load_catalog(distribution, specs_dir))
    trace_env = from_python(python) if python else None
    report = check_against(
        source, archive, specs, selected, trace=trace, trace_env=trace_env, specs_dir=specs_dir, required=required(selected, spec_ids, strict),
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
        from ..engine.coordinator import SATISFIED

        prefix = f"{report.distribution} {report.version}: "
        github_annotations(
            [r.to_json() for r in report.pristine], set(SATISFIED) | {"applicable"}, None, report.trace, prefix,
            {r.spec.id: r.spec for r in report.pristine}, functions=report.trace_functions,
        )
        for line in report.drifted:
            print(workflow_command("error", line, title=f"fp4patch --against {report.version}"))
        if report.catalog != "known":
            print(workflow_command("warning", report.catalog_message, title=f"fp4patch --against {report.version}"))
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
        print_lines(lines)
    return EXIT_OK if report.ok else EXIT_CHECK_FAILED


def print_changes(engine, selected) -> None:
    """``verify --show-changes``: on stderr, the hunks of each spec's code (``selected``: :class:`fp4patch.catalog.spec.Spec`)
    against the nearest verified release (:func:`fp4patch.catalog.evidence.changed_hunks`), or why they cannot be fetched.
    ``engine``: the :class:`fp4patch.engine.Engine` of the installed release. Raises nothing of its own."""
    import tempfile

    from ..catalog.evidence import changed_hunks

    with tempfile.TemporaryDirectory(prefix="fp4patch-changes-") as scratch:
        for spec in selected:
            try:
                text = changed_hunks(engine.resolve(spec), engine.dist, engine.sources.released_bytes, scratch)
            except Fp4PatchError as exc:
                err.print(f"fp4patch: {spec.id}: no hunks ({exc})", markup=False)
                continue
            if text:
                err.print(f"fp4patch: {spec.id}: the code that differs from the nearest verified release:", markup=False)
                sys.stderr.write(text)
                sys.stderr.flush()
