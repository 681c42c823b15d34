# Sourced by benchmarks/gpu_run.sh and gpu_percall.sh on the GPU machine (no registry there): installs the
# carried wheels of .whl/ — FlashInfer's dependencies into /tmp/site, flashinfer-python into /tmp/unpatched
# and /tmp/patched (FLASHINFER_VERSION picks one of several carried wheels) — applies the default specs to
# /tmp/patched and exports PYTHONPATH=$SITEPATH (/tmp/site and the directories its .pth files name).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v flashinfer_python) || exit 3
# a wheel too large to carry is repacked as an xz tar of its unzipped tree (nvidia-cutlass-dsl 4.3.5: 58.6 MB as a
# wheel, 40.8 MB so), unpacked where pip --target puts a wheel
for t in .whl/*.tar.xz; do [ -e "$t" ] && { tar -C /tmp/site -xJf "$t" || exit 3; }; done
# a .pth file (CuTe-DSL's: nvidia_cutlass_dsl/python_packages) is read in site directories only, not in PYTHONPATH:
# SITEPATH is /tmp/site and the directories those files name; use it wherever PYTHONPATH is set
SITEPATH=/tmp/site
for pth in /tmp/site/*.pth; do
  [ -e "$pth" ] || continue
  while read -r line || [ -n "$line" ]; do
    case "$line" in ''|'#'*|import*) ;; *) [ -d "/tmp/site/$line" ] && SITEPATH="$SITEPATH:/tmp/site/$line" ;; esac
  done < "$pth"
done
for copy in unpatched patched; do
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/$copy .whl/flashinfer_python-${FLASHINFER_VERSION:-*}-py3-none-any.whl || exit 3
done
export PYTHONPATH=$SITEPATH SITEPATH PYTHONUNBUFFERED=1
python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))'
python3 -m fp4patch apply --site-packages /tmp/patched 2>&1 | tail -3
