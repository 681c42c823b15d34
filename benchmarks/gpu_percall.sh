#!/usr/bin/env bash
# The per-call A/B/A' measurement alone (phase 4 of benchmarks/gpu_fullgraph.py with its A/A control
# arm), RUNS separate processes of ROUNDS interleaved rounds each, on the GPU machine (no registry
# there). Carried: .whl/ as for benchmarks/gpu_run.sh.
# Usage: bash benchmarks/gpu_percall.sh OUTDIR [ROUNDS] [RUNS]
set -uo pipefail
out=${1:?OUTDIR}; rounds=${2:-301}; runs=${3:-2}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v flashinfer_python) || exit 3
for copy in unpatched patched; do
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/$copy .whl/flashinfer_python-*.whl || exit 3
done
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'
python3 -m fp4patch apply --site-packages /tmp/patched 2>&1 | tail -1 | cut -c1-120
for i in $(seq 1 "$runs"); do
  PYTHONPATH=/tmp/unpatched:/tmp/site timeout 1200 python3 benchmarks/gpu_fullgraph.py percall-ab /tmp/patched \
    --rounds "$rounds" --control /tmp/unpatched > "$out/percall-$i.json" 2> "$out/percall-$i.err"
  echo "run $i exit $?"; tail -3 "$out/percall-$i.err"
done
