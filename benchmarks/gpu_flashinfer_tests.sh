#!/usr/bin/env bash
# Issue 23, item 5, on the GPU machine (no registry there): FlashInfer's own tests of the patched functions,
# pristine eager against patched with the functions compiled, and mxfp8_quantize's host path. Resumable: each
# call runs, within DEADLINE seconds (560), the phases not done yet (state in /tmp/fp4t, kept while the machine
# stays warm; a fresh machine starts over) and leaves the logs of the phases it ran in OUTDIR/phases.tar.gz:
#   setup      benchmarks/gpu_install.sh (the carried wheels; CuTe-DSL as an xz tar of its unpacked wheel), an
#              unpatched and a patched copy (this checkout's fp4patch); with OLD_FP4PATCH=DIR also a copy patched
#              by DIR's fp4patch (/tmp/patched-old); FlashInfer's tests/ from .gpu/fitests.tar.xz
#   env        benchmarks/gpu_fi_env.py --warm on the pristine copy: versions, kernel paths, JIT builds -> env.json
#   mxfp8      benchmarks/gpu_mxfp8_host.py: eager on each copy, compiled on the patched ones; the opcheck probe's
#              mxfp8_quantize cases (CUDA and CPU) on the patched copy
#   pristine   the test grid on the unpatched copy, eager
#   nested     the grid on the patched copy, each patched function called from a compiled function (aot_eager)
#   direct     ... handed to torch.compile directly (aot_eager)
#   inductor   a sample (FP4T_SAMPLE, 10: crc32 of the id) with Inductor, nested then direct
#   peager     the grid on the patched copy, eager
#   old-nested with OLD_FP4PATCH: tests/utils/test_fp8_quantize.py (its host-path tests) on /tmp/patched-old, nested,
#              aot_eager: what the fake/real metadata check reports for an mxfp8_quantize fake without the host path
# PHASES="a b ...": run only those grid phases (setup, env and mxfp8 run whenever not done; MXFP8=0 skips mxfp8),
# so that a second call on a fresh machine runs the rest.
# (benchmarks/flashinfer_tests_compiled.py is the pytest plugin; benchmarks/flashinfer_tests_compare.py reads the logs.)
# Usage: bash benchmarks/gpu_flashinfer_tests.sh OUTDIR   (FLASHINFER_VERSION picks the carried wheel; WORKERS: 12)
set -uo pipefail
out=${1:?OUTDIR}; mkdir -p "$out"
deadline=${DEADLINE:-560}
left() { echo $(( deadline - SECONDS )); }
repo=$(cd "$(dirname "$0")/.." && pwd)
state=/tmp/fp4t; mkdir -p "$state"
log() { echo "[$(date +%T) ${SECONDS}s] $*" | tee -a "$out/driver.log"; }
ran=()  # the phases run in this call: their logs go back together in OUTDIR/phases.tar.gz (8 files come back at most)
pack() { ran+=("$1"); tar -C "$state" -czf "$out/phases.tar.gz" "${ran[@]}" 2>/dev/null; }
TESTS=(tests/utils/test_fp8_quantize.py tests/gemm/test_bmm_fp8.py tests/utils/test_norm.py::test_norm_quant
       tests/utils/test_norm.py::test_fused_add_rmsnorm_quant tests/utils/test_fp4_quantize.py
       tests/utils/test_fp4_quantize_padding.py tests/gemm/test_mm_fp4.py)
cd "$repo"
if [ ! -e "$state/setup.done" ]; then
  log "setup"
  source benchmarks/gpu_install.sh || { log "install failed"; exit 3; }
  if [ -n "${OLD_FP4PATCH:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/patched-old .whl/flashinfer_python-${FLASHINFER_VERSION:-*}-py3-none-any.whl
    (cd "$OLD_FP4PATCH" && python3 -m fp4patch apply --site-packages /tmp/patched-old 2>&1 | tail -1)
  fi
  python3 -m fp4patch verify --site-packages /tmp/patched 2>&1 | tail -2
  mkdir -p /tmp/fitests && tar -C /tmp/fitests -xJf .gpu/fitests.tar.xz || exit 3
  echo "export PYTHONPATH='$PYTHONPATH' SITEPATH='$SITEPATH' PYTHONUNBUFFERED=1" > "$state/env.sh"
  touch "$state/setup.done"; log "setup done"
fi
source "$state/env.sh"
if [ ! -e "$state/env.done" ]; then
  log "env + warm"
  PYTHONPATH=/tmp/unpatched:$SITEPATH timeout "$(left)" python3 benchmarks/gpu_fi_env.py --warm > "$out/env.json" 2> "$state/env.err" && touch "$state/env.done"
  tail -3 "$state/env.err"; log "env exit"
fi
if [ "${MXFP8:-1}" = 1 ] && [ ! -e "$state/mxfp8.done" ] && (( $(left) > 120 )); then
  log "mxfp8 host path"
  mkdir -p "$state/mxfp8"
  PYTHONPATH=/tmp/unpatched:$SITEPATH timeout 200 python3 benchmarks/gpu_mxfp8_host.py --label pristine --out "$state/mxfp8/pristine.json" 2> "$state/mxfp8/pristine.err"
  PYTHONPATH=/tmp/patched:$SITEPATH timeout 200 python3 benchmarks/gpu_mxfp8_host.py --compiled --label patched --out "$state/mxfp8/patched.json" 2> "$state/mxfp8/patched.err" &
  if [ -d /tmp/patched-old ]; then
    PYTHONPATH=/tmp/patched-old:$SITEPATH timeout 200 python3 benchmarks/gpu_mxfp8_host.py --compiled --label patched-before-fix --out "$state/mxfp8/patched-old.json" 2> "$state/mxfp8/patched-old.err" &
  fi
  PYTHONPATH=$SITEPATH timeout 200 python3 fp4patch/opcheck_probe.py --json --filter mxfp8_quantize --path /tmp/patched > "$state/mxfp8/opcheck.json" 2> "$state/mxfp8/opcheck.err"
  wait; touch "$state/mxfp8.done"; pack mxfp8; log "mxfp8 done"
fi
# run_grid PHASE SITE MODE BACKEND SAMPLE MIN_SECONDS [TEST...] (default: the whole grid, TESTS)
run_grid() {
  local phase=$1 site=$2 mode=$3 backend=$4 sample=$5 need=$6; shift 6
  local tests=("$@"); (( ${#tests[@]} )) || tests=("${TESTS[@]}")
  [ -e "$state/$phase.done" ] && return 0
  [ -n "${PHASES:-}" ] && [[ " $PHASES " != *" $phase "* ]] && return 0
  (( $(left) < need )) && { log "$phase: $(left)s left, not started"; return 1; }
  mkdir -p "$state/$phase"; log "$phase ($mode, $backend, sample $sample)"
  (cd /tmp/fitests && FP4T_MODE=$mode FP4T_BACKEND=$backend FP4T_SAMPLE=$sample FP4T_LOG=$state/$phase/log FP4T_RESUME=1 \
    PYTHONPATH=$repo/benchmarks:/tmp/fitests:$site:$SITEPATH timeout -s INT -k 20 "$(( $(left) - 15 ))" \
    python3 -m pytest -q -p no:cacheprovider -p flashinfer_tests_compiled -n "${WORKERS:-12}" --dist loadgroup \
    --timeout 240 "${tests[@]}" >> "$state/$phase/pytest.log" 2>&1)
  local rc=$?; tail -2 "$state/$phase/pytest.log"; log "$phase exit $rc"
  (( rc == 0 || rc == 1 )) && touch "$state/$phase.done"
  pack "$phase"
}
run_grid pristine /tmp/unpatched eager aot_eager 0 60
run_grid nested /tmp/patched nested aot_eager 0 90
run_grid direct /tmp/patched direct aot_eager 0 90
run_grid inductor-nested /tmp/patched nested inductor 10 60
run_grid inductor-direct /tmp/patched direct inductor 10 60
run_grid peager /tmp/patched eager aot_eager 0 60
[ -d /tmp/patched-old ] && run_grid old-nested /tmp/patched-old nested aot_eager 0 30 tests/utils/test_fp8_quantize.py
log "end: $(ls $state | tr '\n' ' ')"
