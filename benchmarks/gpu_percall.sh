#!/usr/bin/env bash
# The per-call A/B/A' measurement alone (phase 4 of benchmarks/gpu_fullgraph.py with its A/A control
# arm), RUNS separate processes of ROUNDS interleaved rounds each, on the GPU machine (no registry
# there). Carried: .whl/ as for benchmarks/gpu_run.sh.
# Usage: bash benchmarks/gpu_percall.sh OUTDIR [ROUNDS] [RUNS] [checks]
# (checks: also the arms with the redirect check swapped, gpu_fullgraph.py CHECK_VARIANTS)
set -uo pipefail
out=${1:?OUTDIR}; rounds=${2:-301}; runs=${3:-2}; checks=${4:+--checks}
mkdir -p "$out"
source "$(dirname "$0")/gpu_install.sh"
for i in $(seq 1 "$runs"); do
  PYTHONPATH=/tmp/unpatched:$SITEPATH timeout 1200 python3 benchmarks/gpu_fullgraph.py percall-ab /tmp/patched \
    --rounds "$rounds" --control /tmp/unpatched $checks > "$out/percall-$i.json" 2> "$out/percall-$i.err"
  echo "run $i exit $?"; tail -3 "$out/percall-$i.err"
done
