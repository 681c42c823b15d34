"""The sweep's Markdown report, docs/compatibility.md (``make compat``): whether each swept release is handled
(:func:`problems`, which also makes the sweep's exit status), the summary, the table of releases by specs and the
reasons (:func:`render`), and the sections of that page that other commands write: the torch x FlashInfer matrix
(``make test-torch``) and the replay (:mod:`tools.replay`), whose markers are here and which the sweep
keeps when it rewrites the page (:func:`keep_sections`). It takes the sweep's results as plain data
(:func:`tools.compat.sweep_release`) and runs nothing.
"""

from __future__ import annotations

import datetime
from typing import Any

from fp4patch import __version__
from fp4patch.catalog.catalog_file import Catalog, Release
from fp4patch.states import APPLIED, NOT_TARGETED, SATISFIED

#: The spec whose function the trace probe's cases compile: a wheel release with it applied must trace.
TRACE_SPEC = "fp4-quantize-fullgraph"
#: The states a spec declares for a release (with a reason): handled, nothing to apply.
DECLARED = {"not-needed", "unsupported", "obsolete"}

#: The replay's section, written by ``python -m tools.compat --replay`` (:mod:`tools.replay`).
REPLAY_BEGIN, REPLAY_END = "<!-- replay: written by python -m tools.compat --replay -->", "<!-- end of replay -->"
#: The torch × FlashInfer section, written by ``make test-torch`` (``scripts/torch_matrix.py``, whose ``BEGIN`` and
#: ``END`` these are): the sweep keeps it.
TORCH_BEGIN = "<!-- torch matrix: written by make test-torch (scripts/torch_matrix.py); do not edit by hand -->"
TORCH_END = "<!-- end of torch matrix -->"
#: The sections of docs/compatibility.md that other commands write, kept (in this order) when the sweep rewrites it.
KEPT_SECTIONS = ((TORCH_BEGIN, TORCH_END), (REPLAY_BEGIN, REPLAY_END))


def keep_sections(text: str, old: str) -> str:
    """``text`` (the sweep's new report) followed by each of :data:`KEPT_SECTIONS` found in ``old`` (the report it
    replaces), each until the command that writes it runs again."""
    for begin, end in KEPT_SECTIONS:
        if begin in old and end in old:
            text = text.rstrip("\n") + "\n\n" + begin + old.split(begin, 1)[1].split(end, 1)[0] + end + "\n"
    return text


def problems(release: Release, result: dict[str, Any]) -> list[str]:
    """Why this release is not handled (empty when it is)."""
    if result["error"]:
        return [] if release.fp4_quantize is None else [result["error"]]
    found = []
    for spec_id, entry in result["specs"].items():
        state = entry["after"]["state"]
        if state in SATISFIED | DECLARED:
            continue
        if state == NOT_TARGETED and not release.has_fp4_quantize:
            continue
        found.append(f"{spec_id}: {state}: {entry['after']['detail']}")
    trace = result.get("trace")
    if trace and trace["passed"] != trace["total"] or trace and not trace["total"]:
        found.append(f"trace: {trace['passed']}/{trace['total']} ({trace['first_failure']})")
    for spec_id, traced in (result.get("traced") or {}).items():
        if not traced["passed"]:
            found.append(f"{spec_id}: does not compile: {'; '.join(traced['failures'])}")
    fullgraph_applied = result["specs"].get(TRACE_SPEC, {}).get("after", {}).get("state") == APPLIED
    if result.get("traced_requested") and result.get("archive") == "wheel" and fullgraph_applied and trace is None:
        found.append("trace: not run")
    for label, difference in result["revert"].items():
        if difference:
            found.append(f"revert ({label}) not byte-identical: {difference}")
    return found


def _cell(entry: dict[str, Any], reasons: dict[str, str]) -> str:
    """The state after apply; with a reason reference unless it is plainly ``applied``."""
    state, detail = entry["after"]["state"], entry["after"]["detail"]
    if state == APPLIED or not detail:
        return state
    return f"{state} [{reasons.setdefault(detail, f'r{len(reasons) + 1}')}]"


def scan_cell(result: dict[str, Any]) -> str:
    """``unpatched -> patched`` counts of functions compiling as one graph out of those present, or ``-``."""
    scan = result.get("scan")
    if not scan:
        return "-"

    def one(count: dict[str, Any] | None) -> str:
        if not count:
            return "?"
        return "error" if "error" in count else f"{count['compiles']}/{count['present']}"

    return f"{one(scan['unpatched'])} → {one(scan['patched'])}"


def render(
    catalog: Catalog, results: list[dict[str, Any]], spec_ids: list[str], defaults: set[str], seconds: float, jobs: int, trace: bool, scan: bool = False
) -> str:
    """The Markdown report."""
    import platform

    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover - the sweep without torch cannot trace
        torch_version = "not installed"
    by_version = {r["version"]: r for r in results}
    reasons: dict[str, str] = {}
    lines = [
        "# flashinfer-python compatibility",
        "",
        "Generated by `make compat` (`python -m tools.compat`); do not edit by hand.",
        (
            f"fp4patch {__version__}, {datetime.date.today().isoformat()}, Python {platform.python_version()}, "
            f"torch {torch_version} (CPU), {len(results)} releases in {seconds:.0f} s with {jobs} at a time."
        ),
        "",
        "For every release in the catalog (`patches/flashinfer-python/catalog.json`): unpack into a temporary",
        "site-packages, check every spec, apply the default specs, verify, run the CPU fullgraph trace probe",
        "(wheels only, from 0.5.0; sdists need a CUDA toolchain), revert and compare every file with the pristine",
        "unpack; then each non-default spec alone, the same way. A spec cell is the state after apply: `applied`",
        "means it applied and verifies; `not-needed`, `unsupported` and `obsolete` are declared by the spec, with",
        "the reason listed below the table.",
        "",
    ]
    if scan:
        lines[-1:-1] = [
            "",
            "The scan column counts, per wheel release, the functions of the FP4/FP8 quantization, GEMM and MoE API",
            "present in the release that compile under `torch.compile(fullgraph=True)` as one graph (`fp4patch scan`,",
            "CPU, fake CUDA tensors), unpatched → with the default specs applied.",
        ]
    # summary
    lines += ["## Summary", ""]
    handled = [r for r in catalog.releases if not problems(r, by_version[str(r.version)])]
    with_fp4 = [r for r in catalog.releases if r.has_fp4_quantize]
    lines.append(f"- releases in the catalog: {len(catalog.releases)}; with fp4_quantize: {len(with_fp4)}; handled: {len(handled)}")
    no_fp4 = [str(r.version) for r in catalog.releases if r.fp4_quantize == ""]
    unknown = [str(r.version) for r in catalog.releases if r.fp4_quantize is None]
    lines.append(f"- without fp4_quantize (nothing to patch): {len(no_fp4)} ({no_fp4[0]} .. {no_fp4[-1]})" if no_fp4 else "- without fp4_quantize: none")
    for version in unknown:
        lines.append(f"- {version}: fp4_quantize unknown, {catalog.get(version).note or by_version[version]['error']}")
    for spec_id in spec_ids:
        counts: dict[str, int] = {}
        for r in with_fp4:
            entry = by_version[str(r.version)]["specs"].get(spec_id)
            state = entry["after"]["state"] if entry else "missing"
            counts[state] = counts.get(state, 0) + 1
        text = ", ".join(f"{state} {n}" for state, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        lines.append(f"- `{spec_id}`{' (default)' if spec_id in defaults else ''} on the {len(with_fp4)} releases with fp4_quantize: {text}")
    wheels = [r for r in with_fp4 if by_version[str(r.version)].get("archive") == "wheel"]
    traced = [by_version[str(r.version)]["trace"] for r in wheels if by_version[str(r.version)]["trace"]]
    passing = [t for t in traced if t["total"] and t["passed"] == t["total"]]
    if trace:
        lines.append(f"- fullgraph trace (CPU probe, wheel releases): {len(passing)}/{len(wheels)} releases pass every case")
    else:
        lines.append("- fullgraph trace: not run (--no-trace)")
    if scan:
        scanned = [by_version[str(r.version)] for r in wheels if by_version[str(r.version)].get("scan")]
        lines.append(f"- `fp4patch scan` (wheel releases): {len(scanned)} scanned; functions compiling as one graph, unpatched → patched, in the table")
    reverts = [d for r in results for d in r["revert"].values()]
    lines.append(f"- reverts byte-identical to the pristine unpack: {sum(1 for d in reverts if not d)}/{len(reverts)}")
    failing = [(r, problems(r, by_version[str(r.version)])) for r in catalog.releases]
    failing = [(r, p) for r, p in failing if p]
    if failing:
        lines += ["", "**Not handled:**", ""]
        for r, found in failing:
            lines.append(f"- {r.version}: " + "; ".join(found))
    # table
    lines += ["", "## Releases", ""]
    header = ["release", "archive", "fp4_quantize"] + [f"`{s}`" for s in spec_ids] + ["trace", "revert"] + (["scan"] if scan else [])
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for release in catalog.releases:
        result = by_version[str(release.version)]
        fp4 = release.fp4_quantize.removeprefix("flashinfer/") if release.fp4_quantize else ("no" if release.fp4_quantize == "" else "unknown")
        if result["error"]:
            text = f"archive unavailable: {release.note}" if release.note else result["error"]
            key = reasons.setdefault(text, f"r{len(reasons) + 1}")
            lines.append("| " + " | ".join([str(release.version), release.archive, fp4] + [f"- [{key}]"] * len(spec_ids) + ["-", "-"] + (["-"] if scan else [])) + " |")
            continue
        cells = [_cell(result["specs"][s], reasons) if s in result["specs"] else "missing" for s in spec_ids]
        t = result["trace"]
        if t:
            trace_cell = f"pass {t['passed']}/{t['total']}" if t["total"] and t["passed"] == t["total"] else f"FAIL {t['passed']}/{t['total']}"
        else:
            trace_cell = "n/a (sdist)" if result.get("archive") == "sdist" else "-"
        revert_cell = "identical" if result["revert"] and not any(result["revert"].values()) else ("-" if not result["revert"] else "DIFFERS")
        scan_cells = [scan_cell(result)] if scan else []
        lines.append("| " + " | ".join([str(release.version), result.get("archive", release.archive), fp4] + cells + [trace_cell, revert_cell] + scan_cells) + " |")
    if reasons:
        lines += ["", "## Reasons", ""]
        for text, key in reasons.items():
            lines.append(f"- **{key}**: {text}")
    return "\n".join(lines) + "\n"
