#!/usr/bin/env python3
"""Compare the phases of ``benchmarks/gpu_flashinfer_tests.sh`` (FlashInfer's own tests, pristine eager against
patched with the functions compiled) and write the result as JSON.

Each phase directory holds the JSON lines that ``benchmarks/flashinfer_tests_compiled.py`` wrote (``log.*.jsonl``).
For every phase and test file: the outcomes; the ids whose outcome differs from the pristine eager run's (the
reference: same outcome per test id is the check, since on sm90 FlashInfer promises no FP4/MXFP8 values, the
tests' own assertions decide pass or fail and the metadata is checked at every compiled call); the compiled calls
made, the graphs and fp4patch op nodes, the graphs with no fp4patch op, and every graph output whose real
shape, stride, dtype or device differed from the fake's. Usage:
``python benchmarks/flashinfer_tests_compare.py DIR --out FILE.json`` (DIR holds ``pristine/``, ``nested/``, ...).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import sys

PHASES = ("pristine", "peager", "nested", "direct", "inductor-nested", "inductor-direct", "old-nested")


def load(directory: str) -> dict[str, dict]:
    out = {}
    paths = sorted(glob.glob(os.path.join(directory, "log.*.jsonl")))
    workers = [p for p in paths if not p.endswith("log.main.jsonl")]
    # with xdist, the controller sees every worker's reports but runs no test: its log (log.main.jsonl, written by
    # plugins of fp4t before that was fixed) has no calls or graphs, so the workers' logs are read alone
    for path in workers or paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                out[rec["id"]] = rec
    return out


def test_file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def summarize(phases: dict[str, dict[str, dict]]) -> dict:
    ref = phases.get("pristine", {})
    result = {"phases": {}}
    for phase, recs in phases.items():
        files: dict[str, dict] = collections.defaultdict(lambda: {"outcomes": collections.Counter(), "differs": [], "skip_reasons": collections.Counter(), "failures": []})
        calls = collections.Counter()
        graphs = ops = no_op_graphs = 0
        mismatches = []
        missing = sorted(set(ref) - set(recs)) if phase != "pristine" else []
        for nodeid, rec in sorted(recs.items()):
            f = files[test_file(nodeid)]
            f["outcomes"][rec["outcome"]] += 1
            if rec["outcome"] == "skipped":
                f["skip_reasons"][rec.get("reason", "")[:160]] += 1
            if rec["outcome"] in ("failed", "error"):
                f["failures"].append({"id": nodeid, "reason": rec.get("reason", "")})
            if phase != "pristine" and nodeid in ref and ref[nodeid]["outcome"] != rec["outcome"]:
                f["differs"].append({"id": nodeid, "pristine": ref[nodeid]["outcome"], "here": rec["outcome"], "reason": rec.get("reason", "")})
            for name, n in rec.get("calls", {}).items():
                calls[name] += n
            for g in rec.get("graphs", []):
                graphs += 1
                ops += len(g["ops"])
                no_op_graphs += not g["ops"]
            for m in rec.get("mismatch", []):
                mismatches.append({"id": nodeid, **m})
        result["phases"][phase] = {
            "tests": len(recs),
            "not_run_here": len(missing),
            "not_run_examples": missing[:5],
            "compiled_calls": dict(calls),
            "graphs": graphs,
            "fp4patch_op_nodes": ops,
            "graphs_without_fp4patch_op": no_op_graphs,
            "fake_vs_real_mismatches": len(mismatches),
            "mismatch_examples": mismatches[:10],
            "files": {
                name: {
                    "outcomes": dict(v["outcomes"]),
                    "same_outcome_as_pristine": (not v["differs"]) if phase != "pristine" else None,
                    "differs": v["differs"][:20],
                    "failures": v["failures"][:20],
                    "skip_reasons": dict(v["skip_reasons"].most_common(6)),
                }
                for name, v in sorted(files.items())
            },
        }
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("directory")
    ap.add_argument("--out")
    ap.add_argument("--meta", action="append", default=[], help="KEY=JSON-or-text added to the output's top level")
    ns = ap.parse_args()
    phases = {p: load(os.path.join(ns.directory, p)) for p in PHASES if os.path.isdir(os.path.join(ns.directory, p))}
    result = summarize(phases)
    for item in ns.meta:
        key, _, value = item.partition("=")
        try:
            result[key] = json.loads(value)
        except ValueError:
            result[key] = value
    text = json.dumps(result, indent=1)
    if ns.out:
        with open(ns.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    for phase, p in result["phases"].items():
        print(f"{phase}: {p['tests']} tests, {p['graphs']} graphs, {p['fp4patch_op_nodes']} fp4patch op nodes, "
              f"{p['graphs_without_fp4patch_op']} graphs without one, {p['fake_vs_real_mismatches']} fake/real mismatches, "
              f"{p['not_run_here']} pristine ids not run; calls {p['compiled_calls']}")
        for name, f in p["files"].items():
            print(f"   {name}: {f['outcomes']} same={f['same_outcome_as_pristine']} differs={len(f['differs'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
