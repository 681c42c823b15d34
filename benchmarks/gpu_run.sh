#!/usr/bin/env bash
# One call on the GPU machine (no registry there): install the carried wheels, make an unpatched and a
# patched copy of flashinfer-python, then `fp4patch verify --opcheck` and the benchmark.
# Carried: .whl/ with flashinfer_python-<V>-py3-none-any.whl, apache-tvm-ffi, libcst and
# nvidia-cudnn-frontend wheels for the machine's Python (see README "GPU results").
# Usage: bash benchmarks/gpu_run.sh OUTDIR [ROUNDS]
set -uo pipefail
out=${1:?OUTDIR}; rounds=${2:-61}
mkdir -p "$out"
source "$(dirname "$0")/gpu_install.sh"
python3 -m fp4patch verify --site-packages /tmp/patched 2>&1 | tail -20
# first calls JIT-build FlashInfer's modules into ~/.cache/flashinfer (shared by both copies)
PYTHONPATH=/tmp/patched:/tmp/site timeout 900 python3 -m fp4patch verify --opcheck --json --site-packages /tmp/patched > "$out/opcheck.json" 2> "$out/opcheck.err"
echo "verify --opcheck exit $?"; tail -5 "$out/opcheck.err"
python3 - "$out/opcheck.json" <<'PY'
import json, sys, collections
try:
    data = json.load(open(sys.argv[1]))
except Exception as exc:
    print("no opcheck json:", exc); sys.exit(0)
rows = data.get("opcheck") or []
count = collections.Counter((r["function"], r["status"]) for r in rows)
for key in sorted(count):
    print("opcheck", *key, count[key])
for r in rows:
    if r["status"] != "passed":
        print("  ", r["function"], r["case"], r["status"], r["detail"][:200])
PY
timeout 1200 python3 benchmarks/gpu_fullgraph.py orchestrate --unpatched /tmp/unpatched --patched /tmp/patched --out "$out/gpu-fullgraph-h200.json" --rounds "$rounds"
echo "bench exit $?"
