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

The result is written as Markdown (default ``docs/compatibility.md``, :mod:`tools.compat_report`), and
what was verified on each release into the catalog's evidence (:func:`merge_evidence`; not with ``--no-evidence``).
Exit status 0 when every release is handled (:func:`tools.compat_report.problems`): each spec applied or
declared (``not-needed``/``unsupported``/``obsolete``), never ``drifted`` or ``not-targeted`` on a release with
fp4_quantize, every wheel release with the fullgraph spec applied traces, and every revert is byte-identical.

Usage: ``python -m tools.compat [-j N] [--output FILE] [--no-trace] [--no-scan] [--only VERSION ...]``;
``--replay [--from VERSION] [--to VERSION]`` runs the replay instead (:mod:`tools.replay`), the entry point
of both being this module's :func:`main`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from fp4patch.catalog.catalog_file import Catalog, Release, load_catalog
from fp4patch.catalog.releases import fetch, unpack
from fp4patch.catalog.spec import load_specs
from fp4patch.engine.coordinator import APPLICABLE, APPLIED, NOT_TARGETED, SATISFIED, Engine, select_specs  # noqa: F401
from fp4patch.errors import Fp4PatchError
from fp4patch.target.environment import current, find_distribution, from_site_packages
from tools.compat_report import DECLARED, KEPT_SECTIONS, REPLAY_BEGIN, REPLAY_END, TORCH_BEGIN, TORCH_END  # noqa: F401
from tools.compat_report import TRACE_SPEC, keep_sections, problems, render, scan_cell
from tools.replay import APPLIED_TIERS, TIERS, agreement, cut_catalog, render_replay, replay_release, replay_tier, write_replay  # noqa: F401
from tools.replay import replay


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
    from fp4patch.checks.trace import run_scan

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
    from fp4patch.checks.trace import entries_for_specs, probe_digest, probe_release_data, run_probe, run_scan, scan_entries

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
    from fp4patch.catalog.evidence import installed_signature
    from fp4patch.catalog.fingerprint import ModuleReader, fingerprint

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

    from fp4patch.catalog.catalog_file import Evidence

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.compat", description="Sweep every catalog release; write docs/compatibility.md.")
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
            trace_text += f" scan={scan_cell(result)}" if result.get("scan") else ""
            status = "ok" if not found else "PROBLEM: " + "; ".join(found)
            print(f"{result['version']:>13} {result.get('seconds', 0):6.1f}s {result['error'] or states}{trace_text}  {status}", flush=True)
    seconds = time.monotonic() - started
    if not args.no_evidence:
        from fp4patch.catalog.catalog_file import evidence_text
        from fp4patch.catalog.catalog_file import load_catalog as reload
        from fp4patch.engine.files import atomic_write

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


if __name__ == "__main__":
    sys.exit(main())
