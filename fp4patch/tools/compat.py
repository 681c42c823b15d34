"""The compatibility sweep (``make compat``): every catalog release × every spec.

For each release in the catalog (:mod:`fp4patch.catalog`), in worker processes (2 at a time by
default, ``-j N`` to change):

1. fetch the archive into the cache (:func:`fp4patch.catalog.releases.fetch`) and unpack it into a
   temporary site-packages; hash every file;
2. check every spec on the pristine files;
3. apply the default specs that are applicable, and check them again (they must be ``applied``);
4. where the release is a wheel (0.5.0 on), run the CPU trace probe with this interpreter and
   that site-packages first on its ``sys.path`` (the probe's ``--path``), and ``fp4patch scan``
   (``scan_probe.py``) on the pristine and on the patched copy: how many of the FP4/FP8 path's
   functions present in the release compile as one graph, unpatched -> patched. The scan costs two
   more interpreters per wheel release, each tracing about 20 functions: measured 2026-11-30 on the
   shared 2-core machine, 0.6.0 took 235 s and 0.6.18.post1 352 s with the scan (about 10 s each
   without), so the whole sweep grows from minutes to hours; ``--no-scan`` skips it;
5. revert, and compare every file with the pristine hashes (byte-identical, no file left over);
6. each non-default spec alike, on its own (apply, check, revert, compare).

The result is written as Markdown (default ``docs/compatibility.md``). Exit status 0 when every
release is handled: each spec applied or declared (``not-needed``/``unsupported``/``obsolete``),
never ``drifted`` or ``not-targeted`` on a release with fp4_quantize, every wheel release with
the fullgraph spec applied traces, and every revert is byte-identical.

Usage: ``python -m fp4patch.tools.compat [-j N] [--output FILE] [--no-trace] [--no-scan] [--only VERSION ...]``
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from .. import __version__
from ..catalog.catalog_file import Catalog, Release, load_catalog
from ..catalog.releases import fetch, unpack
from ..catalog.spec import load_specs
from ..engine.coordinator import APPLICABLE, APPLIED, NOT_TARGETED, SATISFIED, Engine, select_specs
from ..errors import Fp4PatchError
from ..target.environment import current, find_distribution, from_site_packages

TRACE_SPEC = "fp4-quantize-fullgraph"
DECLARED = {"not-needed", "unsupported", "obsolete"}


def tree_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (bytecode caches excluded), by relative path."""
    hashes = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            hashes[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes


def _compare(before: dict[str, str], after: dict[str, str]) -> str:
    """"" when identical, else a short description of the first differences."""
    if before == after:
        return ""
    extra = sorted(set(after) - set(before))
    missing = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    parts = [f"{label}: {', '.join(items[:3])}" for label, items in (("left over", extra), ("missing", missing), ("changed", changed)) if items]
    return "; ".join(parts)


def _state(report) -> dict[str, str]:
    return {"state": report.state, "detail": report.detail}


def _scan_count(site: Path) -> dict[str, Any]:
    """``{"compiles": n, "present": m}`` of ``fp4patch scan`` on ``site`` (this interpreter), or
    ``{"error": ...}`` when the scan cannot run there."""
    from ..checks.trace import run_scan

    try:
        results = run_scan(current(), site, timeout=900)["results"]
    except Fp4PatchError as exc:
        return {"error": str(exc)}
    present = [r for r in results if r["status"] != "not-present"]
    return {"compiles": sum(1 for r in present if r["status"] == "compiles"), "present": len(present)}


def sweep_release(version: str, specs_dir: str | None, trace: bool, scan: bool = False) -> dict[str, Any]:
    """Everything the sweep learns about one release, as plain data (runs in a worker process).

    ``scan``: also count the scan's functions that compile, unpatched and with the default specs
    applied (wheels only; ``result["scan"] = {"unpatched": ..., "patched": ...}``, see :func:`_scan_count`)."""
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # the trace probe imports the unpacked release
    started = time.monotonic()
    result: dict[str, Any] = {
        "version": version, "error": "", "specs": {}, "trace": None, "trace_note": "", "revert": {}, "scan": None, "fingerprints": {},
        "traced": None,
    }
    try:
        archive = fetch("flashinfer-python", version)
    except Fp4PatchError as exc:
        result["error"] = f"archive unavailable: {exc}"
        return result
    result["archive"] = "wheel" if archive.name.endswith(".whl") else "sdist"
    specs = load_specs(Path(specs_dir) if specs_dir else None)
    with tempfile.TemporaryDirectory(prefix=f"fp4patch-compat-{version}-") as scratch:
        site = unpack(archive, Path(scratch) / "site-packages")
        pristine_hashes = tree_hashes(site)
        scan = scan and result["archive"] == "wheel"
        if scan:
            result["scan"] = {"unpatched": _scan_count(site), "patched": None}
        dist = find_distribution(from_site_packages(site), "flashinfer-python")
        engine = Engine(dist, [s for s in specs if s.distribution == dist.name])
        pristine = {s.id: engine.report(s) for s in specs}
        for spec_id, report in pristine.items():
            result["specs"][spec_id] = {"pristine": _state(report), "after": _state(report), "default": report.spec.default}
        result["fingerprints"] = fingerprints(site, specs, dist.version)
        default = select_specs(specs, None)
        groups = [[s for s in default]] + [[s] for s in specs if not s.default]
        for group in groups:
            label = "default" if group is groups[0] else group[0].id
            to_apply = [s for s in group if pristine[s.id].state == APPLICABLE]
            if not to_apply:
                if label == "default" and scan:  # nothing to apply: patched is pristine
                    result["scan"]["patched"] = result["scan"]["unpatched"]
                continue
            try:
                engine.apply(to_apply)
            except Fp4PatchError as exc:
                for s in to_apply:
                    result["specs"][s.id]["after"] = {"state": "apply-failed", "detail": str(exc)}
                continue
            for s in to_apply:
                result["specs"][s.id]["after"] = _state(engine.report(s))
            if label == "default" and trace and result["archive"] != "wheel":
                result["trace_note"] = "sdist: not traced"
            elif label == "default" and trace:
                applied = [s for s in to_apply if result["specs"][s.id]["after"]["state"] == APPLIED]
                result["traced"] = trace_applied(engine, site, applied, result)
            if label == "default" and scan:
                result["scan"]["patched"] = _scan_count(site)
            try:
                engine.revert(None)
                result["revert"][label] = _compare(pristine_hashes, tree_hashes(site))
            except Fp4PatchError as exc:
                result["revert"][label] = f"revert failed: {exc}"
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def trace_applied(engine: Engine, site: Path, applied: list, result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What ``verify --trace`` compiles after apply, run on the release at ``site``: the trace probe's cases (when
    ``fp4-quantize-fullgraph`` is applied; summarized in ``result["trace"]``) and, called from a compiled function
    and handed directly, the scan's call of each function an applied spec covers, its release-dependent arguments
    from the release data. Returns spec id -> ``{"passed", "ops", "probe", "failures"}``: whether everything of
    that spec compiled, its rendered ops and the digest of what was compiled for it (the evidence's ``traced``)."""
    from ..checks.trace import entries_for_specs, probe_digest, probe_release_data, run_probe, run_scan, scan_entries

    ids = {s.id for s in applied}
    failures: dict[str, list[str]] = {s.id: [] for s in applied}
    if TRACE_SPEC in ids:
        try:
            cases = run_probe(current(), site, timeout=900)
            failed = [c for c in cases if not c.get("passed")]
            first = f"{failed[0]['name']}: {failed[0].get('error') or 'layout/graph check failed'}" if failed else ""
            result["trace"] = {"passed": len(cases) - len(failed), "total": len(cases), "first_failure": first}
        except Fp4PatchError as exc:
            result["trace"] = {"passed": 0, "total": 0, "first_failure": str(exc)}
        if result["trace"]["passed"] != result["trace"]["total"] or not result["trace"]["total"]:
            failures[TRACE_SPEC].append(f"trace: {result['trace']['first_failure']}")
    release = probe_release_data({s.id: engine.resolve(s).targets for s in applied})
    names = entries_for_specs(ids)
    try:
        functions = run_scan(current(), site, only=names, timeout=1800, release=release)["results"] if names else []
    except Fp4PatchError as exc:
        functions = [{"name": n, "spec": None, "passed": False, "error": str(exc)} for n in names]
    by_entry = {e["name"]: e for e in scan_entries()}
    for r in functions:
        if r.get("passed"):
            continue
        entry = by_entry.get(r["name"], {})
        owner = entry.get("spec") if entry.get("spec") in ids else entry.get("fallback_spec")
        for spec_id in ([owner] if owner in ids else sorted(ids)):
            failures[spec_id].append(f"{r['name']}: {r.get('error')}")
    return {
        s.id: {
            "passed": not failures[s.id],
            "ops": [op.op_name for t in engine.resolve(s).targets for op in t.custom_ops],
            "probe": probe_digest(s.id, release),
            "failures": failures[s.id][:3],
        }
        for s in applied
    }


def fingerprints(site: Path, specs: list, version) -> dict[str, list[dict[str, Any]]]:
    """spec id -> ``[{target, code, signature}]``: the fingerprint (:mod:`fp4patch.catalog.fingerprint`) of
    each patching target ``version`` takes, on the pristine files of ``site``."""
    from ..catalog.evidence import installed_signature
    from ..catalog.fingerprint import ModuleReader, fingerprint

    reader = ModuleReader(site)
    out: dict[str, list[dict[str, Any]]] = {}
    for spec in specs:
        targets = [t for t in spec.targets_for(version) if not t.status]
        if targets:
            out[spec.id] = [
                {"target": str(t.versions), "code": fingerprint(reader, t).pieces, "signature": installed_signature(reader, t)} for t in targets
            ]
    return out


def verified_specs(release: Release, result: dict[str, Any]) -> set[str]:
    """The specs this sweep verified on the release: applied after apply, the release's trace passed
    where the spec is the traced one, and its group's revert byte-identical."""
    if result["error"]:
        return set()
    trace = result.get("trace")
    trace_ok = not trace or (trace["total"] and trace["passed"] == trace["total"])
    traced = result.get("traced") or {}
    reverts_ok = not any(result["revert"].values())
    done = set()
    for spec_id, entry in result["specs"].items():
        if entry["after"]["state"] != APPLIED or not reverts_ok:
            continue
        if spec_id == TRACE_SPEC and not trace_ok:
            continue
        if spec_id in traced and not traced[spec_id]["passed"]:  # a function of it did not compile, nested or direct
            continue
        done.add(spec_id)
    return done


def merge_evidence(catalog: Catalog, results: list[dict[str, Any]]) -> dict[str, list]:
    """The catalog's evidence with every swept release's fingerprints in place of what it had for
    that release (releases not swept keep theirs): one :class:`~fp4patch.catalog.Evidence` per
    (spec, target, code, signature), its releases oldest first."""
    from packaging.version import Version

    from ..catalog.catalog_file import Evidence

    swept = {r["version"] for r in results}
    rows: dict[tuple, list[Version]] = {}

    def traced_key(traced: dict | None) -> tuple | None:
        return (tuple(traced["ops"]), traced["probe"]) if traced else None

    for spec_id, entries in catalog.evidence.items():
        for e in entries:
            for v in e.releases:
                if str(v) not in swept:
                    key = (spec_id, e.target, tuple(sorted(e.code.items())), tuple(e.code), e.signature, traced_key(e.traced))
                    rows.setdefault(key, []).append(v)
    by_version = {str(r.version): r for r in catalog.releases}
    for result in results:
        release = by_version.get(result["version"])
        if release is None:
            continue
        done = verified_specs(release, result)
        for spec_id, targets in result.get("fingerprints", {}).items():
            if spec_id not in done:
                continue
            traced = (result.get("traced") or {}).get(spec_id)
            for t in targets:
                signature = tuple(tuple(row) for row in t["signature"])
                key = (spec_id, t["target"], tuple(sorted(t["code"].items())), tuple(t["code"]), signature, traced_key(traced))
                rows.setdefault(key, []).append(Version(result["version"]))
    evidence: dict[str, list] = {}
    for (spec_id, target, items, order, signature, traced), versions in rows.items():
        digests = dict(items)
        pieces = {name: digests[name] for name in order}
        record = {"ops": list(traced[0]), "probe": traced[1]} if traced else None
        evidence.setdefault(spec_id, []).append(Evidence(target, tuple(sorted(set(versions))), pieces, signature, record))
    return evidence


# ---------------------------------------------------------------------------- replay: each release as if unseen
def cut_catalog(full: Catalog, version) -> Catalog:
    """``full`` as fp4patch had it before ``version`` was released: the releases before it, and the
    evidence of those releases only."""
    from ..catalog.catalog_file import Evidence

    return Catalog(
        full.distribution,
        [r for r in full.releases if r.version < version],
        full.path,
        {
            k: [Evidence(e.target, tuple(r for r in e.releases if r < version), e.code, e.signature) for e in entries if any(r < version for r in e.releases)]
            for k, entries in full.evidence.items()
        },
    )



def replay_release(version: str, specs_dir: str | None) -> dict[str, Any]:
    """What fp4patch would have done on ``version`` had it been unseen: the catalog cut before it
    (releases and evidence of ``version`` and later removed), each default spec resolved by code
    (:mod:`fp4patch.catalog.evidence`), a ``needs-check`` one checked on CPU with this interpreter's torch.
    Per spec: ``tier`` (``same-code``, ``checked``, ``refused``, ``declared``, ``by-specifier``,
    ``none``), ``detail``, the ``inherited`` target and the catalog's own ``truth`` target, and
    ``agrees``: ``same-target``, ``same-block`` (another target rendering the same op: same name),
    ``different-block`` or ``-`` (nothing applied)."""
    from packaging.version import Version

    from ..catalog.evidence import CHANGED
    from ..catalog.evidence import NEEDS_CHECK as NEEDS
    from ..states import DRIFTED as DRIFT
    from ..states import NOT_NEEDED as IDLE
    from ..states import OBSOLETE as GONE

    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    started = time.monotonic()
    v = Version(version)
    full = load_catalog("flashinfer-python", Path(specs_dir) if specs_dir else None)
    cut = cut_catalog(full, v)
    specs = load_specs(Path(specs_dir) if specs_dir else None)
    default = select_specs(specs, None)
    out: dict[str, Any] = {"version": version, "specs": {}, "error": ""}
    try:
        archive = fetch("flashinfer-python", version)
    except Fp4PatchError as exc:
        out["error"] = str(exc)
        return out
    with tempfile.TemporaryDirectory(prefix=f"fp4patch-replay-{version}-") as scratch:
        site = unpack(archive, Path(scratch) / "site-packages", sources_only=True)
        dist = find_distribution(from_site_packages(site), "flashinfer-python")
        evidenced = {k: {e.target for e in entries} for k, entries in full.evidence.items()}
        engine = Engine(dist, [s for s in specs if s.distribution == dist.name], lambda message: None, cut, current(), evidenced=evidenced)
        reports = {s.id: engine.report(s) for s in default}
        if any(r.state == NEEDS for r in reports.values()):
            engine.check_on_cpu(default)
            reports = {s.id: engine.report(s) for s in default}
        for spec in default:
            report, resolution = reports[spec.id], engine.resolve(spec)
            basis = resolution.basis
            truth = spec.targets_for(v)
            kind = basis.kind if basis else "none"
            if report.state in (IDLE, GONE) or any(t.status for t in resolution.targets):
                tier = "declared"
            elif report.state == DRIFT or kind == CHANGED:
                tier = "refused"
            else:
                tier = replay_tier(basis)
            applied = tier in APPLIED_TIERS
            agrees = agreement(spec, resolution, truth) if applied else "-"
            out["specs"][spec.id] = {
                "tier": tier, "detail": report.detail if tier == "refused" else (basis.describe() if basis else ""),
                "inherited": "; ".join(str(t.versions) for t in resolution.targets), "truth": "; ".join(str(t.versions) for t in truth),
                "agrees": agrees,
            }
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


#: The replay's tiers (:func:`replay_tier`), in the tiers table's order; those that apply a target.
TIERS = ["same-code", "moved", "checked", "launcher", "carried", "refused", "declared", "by-specifier"]
APPLIED_TIERS = ("same-code", "moved", "checked", "launcher", "carried", "by-specifier")


def replay_tier(basis) -> str:
    """The tier of a spec applied on ``basis`` (a :class:`~fp4patch.catalog.evidence.Basis`) in the replay: ``carried``
    (a parameter added with a default, carried with the compile-time guard), else ``launcher`` (checked on CPU,
    the outputs the CPU cannot see stood for by the C++ launcher's code), else ``moved`` (the function moved to
    another file), else ``checked`` / ``same-code`` / ``by-specifier`` as the basis's kind (``none``: no basis)."""
    from ..catalog.evidence import CHECKED

    if basis is None:
        return "none"
    if basis.carried:
        return "carried"
    if basis.launcher:
        return "launcher"
    if basis.moved:
        return "moved"
    return "checked" if basis.kind == CHECKED else basis.kind


def agreement(spec, resolution, truth: list) -> str:
    """How what the replay applied (``resolution``'s targets) compares with the catalog's own ``truth`` targets
    for the release: ``same-target``; ``same-block`` (another target rendering the same op: same name; for a
    carried target, the truth's op with each carried parameter bound to its default, as the guard allows no
    other value, and left out of the release data's parameter lists such as ``mutates``); ``different-block``
    (the applied op differs from the one verified for that release)."""
    from dataclasses import replace

    from ..ops.cache import render_cached

    def names(targets, drop: frozenset[str] = frozenset()) -> list[str]:
        out = []
        for t in targets:
            if t.status:
                continue
            for kind, kwargs in t.operation_specs:
                if kind != "custom-op":
                    continue
                op = kwargs["target"]
                if op.carried:  # the op as verified: the guard aside
                    op = replace(op, carried=(), carried_release="", carried_from="")
                if drop & set(op.params):  # the truth at the default: the carried parameters absent, named by no release list
                    release = {k: [x for x in v if x not in drop] if isinstance(v, list) else v for k, v in op.release.items()}
                    op = replace(op, params=tuple(p for p in op.params if p not in drop),
                                 defaults={k: v for k, v in op.defaults.items() if k not in drop}, release=release)
                out.append(render_cached(op).op_name)
        return out

    carried = frozenset(name for t in resolution.targets for kind, kw in t.operation_specs if kind == "custom-op" for name, _ in kw["target"].carried)
    same_file = [t.file for t in resolution.targets] == [t.file for t in truth]
    if not carried and same_file and [str(t.versions) for t in resolution.targets] == [str(t.versions) for t in truth]:
        return "same-target"
    return "same-block" if names(resolution.targets) == names(truth, carried) else "different-block"


def render_replay(results: list[dict[str, Any]], spec_ids: list[str], seconds: float) -> str:
    """The replay's Markdown section: per spec, how many steps each tier carried, and each step's cells."""
    tiers = TIERS
    lines = [
        REPLAY_BEGIN,
        "## Each release as if unseen (replay)",
        "",
        f"Generated by `make compat` (`python -m fp4patch.tools.compat --replay`), {len(results)} wheel releases in {seconds:.0f} s.",
        "For each wheel release after the first, the catalog is cut before it (its releases and evidence, and every later",
        "one's, removed) and each default spec is resolved by code as on a release fp4patch does not know: **same-code**",
        "(the code equals a verified release's: applied as verified), **moved** (the same, or checked, at the file the",
        "function moved to), **checked** (the nearest release's target, code differs, same signature, the CPU check",
        "passed: applied), **launcher** (checked, and the outputs the CPU cannot see, allocated by the C++ launcher, stood",
        "for by the launcher's allocation code, equal to the verified release's), **carried** (a parameter added with a",
        "default: the nearest target checked at that default, any other value refused under compile by fp4patch's guard),",
        "**refused** (another signature change, a changed launcher, or a failed check: not applied, nothing written),",
        "**declared** (not needed or unsupported there). `agrees` compares what was applied with the catalog's own target",
        "for the release: the same target, another target rendering the same op (same block; for a carried cell, the",
        "release's own op with the new parameter bound to its default), or a different block (the inherited op differs",
        "from the one verified for that release).",
        "",
        "| spec | " + " | ".join(tiers) + " | applied: same target / same block / different block |",
        "|---|" + "---|" * (len(tiers) + 1),
    ]
    totals = {t: 0 for t in tiers}
    for spec_id in spec_ids:
        cells = [r["specs"].get(spec_id) for r in results if not r["error"]]
        counts = {t: sum(1 for c in cells if c and c["tier"] == t) for t in tiers}
        for t in tiers:
            totals[t] += counts[t]
        agree = [sum(1 for c in cells if c and c["agrees"] == a) for a in ("same-target", "same-block", "different-block")]
        lines.append(f"| `{spec_id}` | " + " | ".join(str(counts[t]) for t in tiers) + f" | {agree[0]} / {agree[1]} / {agree[2]} |")
    lines.append("| all | " + " | ".join(str(totals[t]) for t in tiers) + " | |")
    carried = sum(1 for r in results if not r["error"] and all(c["tier"] in (*APPLIED_TIERS, "declared") for c in r["specs"].values()))
    lines += ["", f"Steps in which every default spec was carried (applied or declared, none refused): {carried} of {len([r for r in results if not r['error']])}.", ""]
    lines += ["| release | " + " | ".join(f"`{s}`" for s in spec_ids) + " |", "|---|" + "---|" * len(spec_ids)]
    for r in results:
        if r["error"]:
            lines.append(f"| {r['version']} | " + " | ".join(["error"] * len(spec_ids)) + " |")
            continue
        row = []
        for spec_id in spec_ids:
            c = r["specs"].get(spec_id)
            row.append("-" if not c else c["tier"] + ("" if c["agrees"] in ("-", "same-target") else f" ({c['agrees']})"))
        lines.append(f"| {r['version']} | " + " | ".join(row) + " |")
    refused = [(r["version"], s, c["detail"]) for r in results if not r["error"] for s, c in r["specs"].items() if c["tier"] == "refused"]
    if refused:
        lines += ["", "Refused, with the reason fp4patch gave:", ""]
        lines += [f"- {v} `{s}`: {' '.join(d.split())[:400]}" for v, s, d in refused]
    lines.append(REPLAY_END)
    return "\n".join(lines) + "\n"


REPLAY_BEGIN, REPLAY_END = "<!-- replay: written by python -m fp4patch.tools.compat --replay -->", "<!-- end of replay -->"
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


def write_replay(path: Path, section: str) -> None:
    """Put the replay ``section`` into ``path`` (replacing an earlier one, else appended)."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if REPLAY_BEGIN in text and REPLAY_END in text:
        head, _, rest = text.partition(REPLAY_BEGIN)
        _, _, tail = rest.partition(REPLAY_END)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text, encoding="utf-8")


# ---------------------------------------------------------------------------- evaluation
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


def _scan_cell(result: dict[str, Any]) -> str:
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
        "Generated by `make compat` (`python -m fp4patch.tools.compat`); do not edit by hand.",
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
        scan_cells = [_scan_cell(result)] if scan else []
        lines.append("| " + " | ".join([str(release.version), result.get("archive", release.archive), fp4] + cells + [trace_cell, revert_cell] + scan_cells) + " |")
    if reasons:
        lines += ["", "## Reasons", ""]
        for text, key in reasons.items():
            lines.append(f"- **{key}**: {text}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fp4patch.tools.compat", description="Sweep every catalog release; write docs/compatibility.md.")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="releases at a time (default 2)")
    parser.add_argument("--output", type=Path, default=Path("docs/compatibility.md"), help="Markdown report (default docs/compatibility.md)")
    parser.add_argument("--no-trace", action="store_true", help="static checks only (no trace probe, no scan)")
    parser.add_argument("--no-scan", action="store_true", help="skip `fp4patch scan` (two interpreters per wheel release)")
    parser.add_argument("--only", nargs="*", default=None, help="sweep only these versions (the report still lists them alone)")
    parser.add_argument("--specs-dir", type=Path, default=None)
    parser.add_argument("--no-evidence", action="store_true", help="do not rewrite the catalog's evidence (what each target was verified on)")
    parser.add_argument("--replay", action="store_true", help="only replay each wheel release from --from to --to as if unseen (the tiers table)")
    parser.add_argument("--from", dest="first", default="0.6.0", help="first release of the replay (its successor is the first step)")
    parser.add_argument("--to", dest="last", default=None, help="last release of the replay (default: the newest)")
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args)
    catalog = load_catalog("flashinfer-python", args.specs_dir)
    if args.only:
        wanted = {str(catalog.get(v).version) if catalog.get(v) else v for v in args.only}
        catalog = Catalog(catalog.distribution, [r for r in catalog.releases if str(r.version) in wanted], catalog.path)
    specs = [s for s in load_specs(args.specs_dir) if s.distribution == catalog.distribution]
    spec_ids = [s.id for s in sorted(specs, key=lambda s: (not s.default, s.id))]
    started = time.monotonic()
    versions = [str(r.version) for r in catalog.releases]
    specs_dir = str(args.specs_dir) if args.specs_dir else None
    results = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        scan = not args.no_trace and not args.no_scan
        futures = [pool.submit(sweep_release, v, specs_dir, not args.no_trace, scan) for v in versions]
        for release, future in zip(catalog.releases, futures):
            result = future.result()
            result["traced_requested"] = not args.no_trace
            results.append(result)
            found = problems(release, result)
            states = " ".join(f"{k}={e['after']['state']}" for k, e in result["specs"].items())
            trace = result["trace"]
            trace_text = f" trace={trace['passed']}/{trace['total']}" if trace else ""
            trace_text += f" scan={_scan_cell(result)}" if result.get("scan") else ""
            status = "ok" if not found else "PROBLEM: " + "; ".join(found)
            print(f"{result['version']:>13} {result.get('seconds', 0):6.1f}s {result['error'] or states}{trace_text}  {status}", flush=True)
    seconds = time.monotonic() - started
    if not args.no_evidence:
        from ..catalog.catalog_file import evidence_text
        from ..catalog.catalog_file import load_catalog as reload
        from ..engine.files import atomic_write

        full = reload("flashinfer-python", args.specs_dir)  # every release, not only --only's
        atomic_write(full.path, evidence_text(full.path, merge_evidence(full, results)).encode("utf-8"))
        print(f"wrote the evidence of {len({r['version'] for r in results})} releases into {full.path}")
    text = render(catalog, results, spec_ids, {s.id for s in specs if s.default}, seconds, args.jobs, not args.no_trace, scan)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    old = args.output.read_text(encoding="utf-8") if args.output.is_file() else ""
    text = keep_sections(text, old)  # the replay (--replay) and the torch matrix are kept until they run again
    args.output.write_text(text, encoding="utf-8")
    bad = [r for r in catalog.releases if problems(r, results[versions.index(str(r.version))])]
    print(f"wrote {args.output}: {len(catalog.releases) - len(bad)}/{len(catalog.releases)} releases handled in {seconds:.0f} s")
    return 1 if bad else 0


def replay(args: argparse.Namespace) -> int:
    """``--replay``: every wheel release after ``--from`` up to ``--to``, as if unseen (:func:`replay_release`)."""
    from packaging.version import Version

    catalog = load_catalog("flashinfer-python", args.specs_dir)
    last = Version(args.last) if args.last else catalog.latest.version
    versions = [str(r.version) for r in catalog.releases if r.archive == "wheel" and Version(args.first) < r.version <= last]
    specs = [s for s in select_specs(load_specs(args.specs_dir), None)]
    started = time.monotonic()
    results = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(replay_release, v, str(args.specs_dir) if args.specs_dir else None) for v in versions]
        for future in futures:
            result = future.result()
            results.append(result)
            cells = " ".join(f"{k}={c['tier']}" for k, c in result["specs"].items())
            print(f"{result['version']:>13} {result.get('seconds', 0):6.1f}s {result['error'] or cells}", flush=True)
    section = render_replay(results, [s.id for s in specs], time.monotonic() - started)
    write_replay(args.output, section)
    print(f"wrote the replay of {len(results)} releases into {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
