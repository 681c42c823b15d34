#!/usr/bin/env bash
# The main job on real input: a fresh venv with the real flashinfer-python from the package
# registry, fp4patch installed from this checkout, then status -> diff -> apply -> verify -> revert.
# PYTHON (make demo PYTHON=python3.12) is the interpreter both venvs are made with; default python3.
set -euo pipefail
version="${1:-0.6.0}"
python="${PYTHON:-python3}"
here="$(cd "$(dirname "$0")/.." && pwd)"
demo="$here/.demo"
rm -rf "$demo"
echo "creating $demo/target (flashinfer-python==$version) and $demo/tool (fp4patch) ..."
"$python" -m venv "$demo/target"        # the environment to patch (like /opt/venv in a Docker build)
"$python" -m venv "$demo/tool"          # fp4patch in its own venv (like pipx)
"$demo/tool/bin/pip" install -q --disable-pip-version-check "$here"
# --no-deps: the static commands read files only; FlashInfer's CUDA dependencies are not needed.
"$demo/target/bin/pip" install -q --disable-pip-version-check --no-deps "flashinfer-python==$version"
fp4patch="$demo/tool/bin/fp4patch"
target=(--python "$demo/target/bin/python")
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
step() { printf '\n%s$ fp4patch %s%s\n' "$bold" "$*" "$plain"; }
step status "${target[@]}";           "$fp4patch" status "${target[@]}"
step diff --stat "${target[@]}";      "$fp4patch" diff --stat "${target[@]}"  # the whole diff: fp4patch diff (about 7,900 lines on 0.6.0)
step apply "${target[@]}";            "$fp4patch" apply "${target[@]}"
step apply "${target[@]}" "  # again: changes nothing";  "$fp4patch" apply "${target[@]}"
step verify "${target[@]}";           "$fp4patch" verify "${target[@]}"
step revert "${target[@]}";           "$fp4patch" revert "${target[@]}"
step verify --applicable "${target[@]}"; "$fp4patch" verify --applicable "${target[@]}"
printf '\n%srecord check:%s ' "$bold" "$plain"
"$demo/target/bin/python" - <<'PY'
import base64, hashlib, importlib.metadata as md
dist = md.distribution("flashinfer-python")
bad = [f for f in dist.files if f.hash and base64.urlsafe_b64encode(hashlib.sha256(f.locate().read_bytes()).digest()).rstrip(b"=").decode() != f.hash.value]
print("every file byte-identical to the wheel's RECORD" if not bad else f"{len(bad)} files differ: {bad[:3]}")
raise SystemExit(1 if bad else 0)
PY
