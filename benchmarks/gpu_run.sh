#!/usr/bin/env bash
# One call on the GPU machine (no registry there): install the carried wheels, make an unpatched and a
# patched copy of flashinfer-python, then, within DEADLINE seconds in all:
#   1. `import flashinfer`, patched against pristine, alternating fresh processes (benchmarks/import_bench.py):
#      CPU and wall time, peak memory, whether torch._dynamo was imported -> OUTDIR/import-h200.json;
#   2. benchmarks/gpu_fullgraph.py orchestrate: the eager per-call A/B/A' (patched vs unpatched vs a pristine
#      control, ROUNDS rounds), then the block (fullgraph record, inductor, reduce-overhead, CUDA-graph
#      replay, patched and unpatched eager) -> OUTDIR/gpu-fullgraph-h200.json, written after each phase;
#   3. with OPCHECK=1, `fp4patch verify --opcheck` -> OUTDIR/opcheck.json (first calls JIT-build FlashInfer's
#      modules into ~/.cache/flashinfer, shared by both copies: minutes on a fresh machine).
# Carried: .whl/ with flashinfer_python-<V>-py3-none-any.whl, apache-tvm-ffi, libcst and
# nvidia-cudnn-frontend wheels for the machine's Python (see docs/gpu-results.md).
# Usage: bash benchmarks/gpu_run.sh OUTDIR [ROUNDS]
#   IMPORT_ROUNDS (default 11), DEADLINE (default 560 s: one call of at most 600 s), OPCHECK=1, CHECKS=1
#   (the per-call arms with the redirect check swapped).
set -uo pipefail
out=${1:?OUTDIR}; rounds=${2:-61}
deadline=${DEADLINE:-560}
left() { local s=$(( deadline - SECONDS )); (( s < 30 )) && s=30; echo "$s"; }
mkdir -p "$out"
source "$(dirname "$0")/gpu_install.sh"
python3 -m fp4patch verify --site-packages /tmp/patched 2>&1 | tail -3
timeout "$(left)" python3 benchmarks/import_bench.py --sites /tmp/unpatched /tmp/patched --pythonpath "$SITEPATH" \
  --rounds "${IMPORT_ROUNDS:-11}" --out "$out/import-h200.json" 2> "$out/import.err"
echo "import bench exit $? at ${SECONDS}s"; tail -3 "$out/import.err"
if [ "${OPCHECK:-0}" = 1 ]; then
  PYTHONPATH=/tmp/patched:$SITEPATH timeout "$(left)" python3 -m fp4patch verify --opcheck --json --site-packages /tmp/patched > "$out/opcheck.json" 2> "$out/opcheck.err"
  echo "verify --opcheck exit $? at ${SECONDS}s"; tail -5 "$out/opcheck.err"
fi
timeout "$(( $(left) + 20 ))" python3 benchmarks/gpu_fullgraph.py orchestrate --unpatched /tmp/unpatched --patched /tmp/patched \
  --out "$out/gpu-fullgraph-h200.json" --rounds "$rounds" --deadline "$(left)" --skip-opcheck ${CHECKS:+--checks}
echo "bench exit $? at ${SECONDS}s"
