# Sourced by benchmarks/gpu_run.sh and gpu_percall.sh on the GPU machine (no registry there): installs the
# carried wheels of .whl/ — FlashInfer's dependencies into /tmp/site, flashinfer-python into /tmp/unpatched
# and /tmp/patched (FLASHINFER_VERSION picks one of several carried wheels) — applies the default specs to
# /tmp/patched and exports PYTHONPATH=/tmp/site.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v flashinfer_python) || exit 3
for copy in unpatched patched; do
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/$copy .whl/flashinfer_python-${FLASHINFER_VERSION:-*}-py3-none-any.whl || exit 3
done
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))'
python3 -m fp4patch apply --site-packages /tmp/patched 2>&1 | tail -3
