"""``fp4patch scan``: each FP4/FP8 quantization, GEMM and MoE function under torch.compile(fullgraph=True) on CPU.

A report, not a check: one child interpreter (the target's) compiles one representative call per function on fake
CUDA tensors (:func:`fp4patch.checks.trace.run_scan`). Exit codes: 0 when the scan ran, whatever compiles; 2 for a usage
error (an unknown ``--function`` or ``--skip``) or a target that cannot import torch or FlashInfer
(:mod:`fp4patch.errors`).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ..errors import EXIT_OK, UsageError
from ..target.torch_support import check_torch
from .context import context, environment
from .options import JsonOpt, PythonOpt, QuietOpt, SitePackagesOpt, SkipOpt
from .render import JSON_SCHEMA_VERSION, is_terminal, out, scan_lines, scan_summary, scan_table, skipped_lines, wrap
from .running import run_body


def scan(
    python: PythonOpt = None,
    site_packages: SitePackagesOpt = None,
    as_json: JsonOpt = False,
    only: Annotated[list[str] | None, typer.Option("--function", help="Scan only this entry (repeatable), e.g. mm_fp4[auto].")] = None,
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
        from ..checks.trace import declare_not_needed, leave_out, probe_release_data, run_scan

        if skip:  # an unknown id is the same usage error as in apply and verify
            from ..catalog.spec import load_specs
            from ..engine.selection import select_specs

            select_specs(load_specs(None), None, skip)
        names = scan_names(only)
        env = environment(python, site_packages)
        check_torch(env, "scan")
        _, engine, selected = context(python, site_packages, None, None, all_specs=True, env=env)
        dist = engine.dist
        h = {"schema": JSON_SCHEMA_VERSION, "distribution": dist.name, "version": str(dist.version), "site_packages": str(dist.site_packages)}
        # each call's release-dependent arguments come from the release data the ops are rendered from
        payload = run_scan(
            env, dist.site_packages if site_packages else None, only=names, release=probe_release_data({s.id: engine.resolve(s).targets for s in selected}),
            expect=None if site_packages else dist.site_packages,
        )
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

    run_body(as_json, body, quiet)


def scan_names(only: list[str] | None) -> list[str] | None:
    """The scan entries ``--function`` names (``only``; None: every entry): a base name selects its entry and each of
    its variants (mm_fp4: mm_fp4[cutlass], mm_fp4[trtllm], ...; mxfp8_quantize: mxfp8_quantize, mxfp8_quantize[cuda],
    mxfp8_quantize[cute-dsl]), each once.

    Raises:
        fp4patch.errors.UsageError: a name that is no scan entry, with the closest one (exit 2).
    """
    if not only:
        return only
    from ..checks.trace import scan_entries

    known = [e["name"] for e in scan_entries()]
    names = list(dict.fromkeys(n for name in only for n in ([k for k in known if k == name or k.split("[")[0] == name] or [name])))
    unknown = [name for name in names if name not in known]
    if unknown:
        close = closest_entry(unknown[0], known)
        hint = f"did you mean {close}? " if close else ""
        raise UsageError(f"--function {unknown[0]}: not a scan entry; {hint}choose from {', '.join(known)}")
    return names


def closest_entry(name: str, known: list[str]) -> str | None:
    """The ``--function`` most likely meant by ``name``, which names no entry: among the entries and their base names
    (``mm_fp4`` selects ``mm_fp4[cutlass]``, ...), the one equal to it once ``-``/``_`` and case are normalised
    (``mm-fp4``, ``MM_FP4`` → ``mm_fp4``), else the closest such spelling
    (:func:`~fp4patch.engine.selection.closest_spelling`), else None."""
    from ..engine.selection import closest_spelling

    candidates = list(dict.fromkeys([*(k.split("[")[0] for k in known), *known]))
    return closest_spelling(name, candidates, lambda text: text.lower().replace("-", "_"))[0]
