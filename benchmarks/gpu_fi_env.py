#!/usr/bin/env python3
"""What the GPU machine's FlashInfer runs, and the JIT builds warmed before the test grid (issue 23, item 5).

Prints one JSON object: torch, CUDA, the device; FlashInfer's version and its declared dependencies as
imported (CuTe-DSL ``cutlass``, ``cuda.tile``, ``cudnn`` frontend and library, ``tvm_ffi``); which kernel path
each patched function the grid exercises takes on this machine (``rmsnorm_quant`` / ``fused_add_rmsnorm_quant``:
CuTe-DSL unless FlashInfer fell back to its CUDA JIT module, ``flashinfer.norm._USE_CUDA_NORM``; ``bmm_fp8``:
the backend the test names; ``mxfp8_quantize`` on CPU: the host kernel); and, with ``--warm``, the seconds each
first call took (JIT builds into ``~/.cache/flashinfer``, CuTe-DSL compiles), so that the test workers find
them built. Usage: ``python benchmarks/gpu_fi_env.py [--warm] > env.json``
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time


def _version(name):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception as exc:  # noqa: BLE001
        return f"not installed ({type(exc).__name__})"


def _try(fn):
    t0 = time.perf_counter()
    try:
        value = fn()
        return {"ok": value if isinstance(value, (str, int, float, bool, type(None), list, dict)) else repr(value)[:200], "s": round(time.perf_counter() - t0, 2)}
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}", "s": round(time.perf_counter() - t0, 2)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warm", action="store_true")
    ns = ap.parse_args()
    out = sys.stdout
    sys.stdout = sys.stderr  # FlashInfer may print
    import torch

    env = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
        "python": sys.version.split()[0],
    }
    env["import flashinfer"] = _try(lambda: importlib.import_module("flashinfer").__version__)
    import flashinfer

    env["flashinfer_file"] = flashinfer.__file__
    env["distributions"] = {d: _version(d) for d in ("flashinfer-python", "nvidia-cutlass-dsl", "cuda-tile", "nvidia-cudnn-frontend", "apache-tvm-ffi", "cuda-python", "cuda-bindings", "nvidia-cudnn-cu13", "libcst")}
    env["import cutlass"] = _try(lambda: importlib.import_module("cutlass").__file__)
    env["import cutlass.cute"] = _try(lambda: importlib.import_module("cutlass.cute").__name__)
    env["import cuda.tile"] = _try(lambda: importlib.import_module("cuda.tile").__name__)
    env["import cudnn"] = _try(lambda: importlib.import_module("cudnn").backend_version())
    env["flashinfer.cute_dsl.is_cute_dsl_available()"] = _try(lambda: importlib.import_module("flashinfer.cute_dsl").is_cute_dsl_available())
    norm = importlib.import_module("flashinfer.norm")
    use_cuda = getattr(norm, "_USE_CUDA_NORM", None)
    env["norm kernel path (rmsnorm_quant, fused_add_rmsnorm_quant)"] = (
        "CUDA JIT (flashinfer.norm._USE_CUDA_NORM is True: CuTe-DSL not importable, or FLASHINFER_USE_CUDA_NORM=1)" if use_cuda
        else "CuTe-DSL (flashinfer.norm.kernels, _USE_CUDA_NORM is False)" if use_cuda is False else "no switch in this release")
    env["patched"] = sorted(
        name[len("_fp4patch_"):-len("_entry")]
        for mod_name, mod in list(sys.modules.items()) if mod_name.startswith("flashinfer") and mod is not None
        for name in vars(mod) if name.startswith("_fp4patch_") and name.endswith("_entry")
    )
    if ns.warm:
        dev = "cuda"
        warm = {}
        x = torch.randn(8, 1024, device=dev, dtype=torch.bfloat16)
        w = torch.randn(1024, device=dev, dtype=torch.bfloat16)
        y = torch.empty(8, 1024, device=dev, dtype=torch.float8_e4m3fn)
        one = torch.tensor(1.0, device=dev)
        warm["rmsnorm_quant bf16 H=1024"] = _try(lambda: flashinfer.norm.rmsnorm_quant(y, x, w, one) or "ran")
        warm["fused_add_rmsnorm_quant bf16 H=1024"] = _try(lambda: flashinfer.norm.fused_add_rmsnorm_quant(y, x.clone(), x.clone(), w, one) or "ran")
        a = torch.randn(1, 48, 256, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(1, 64, 256, device=dev).to(torch.float8_e4m3fn).transpose(-2, -1)
        for backend in ("cublas", "cudnn", "auto"):
            warm[f"bmm_fp8 backend={backend}"] = _try(lambda: list(flashinfer.bmm_fp8(a, b, one, one, torch.bfloat16, backend=backend).shape))
        warm["mxfp8_quantize CPU fp32 [8, 256]"] = _try(lambda: [str(t.dtype) for t in flashinfer.mxfp8_quantize(torch.randn(8, 256))])
        warm["mxfp8_quantize CUDA bf16 [8, 256]"] = _try(lambda: [str(t.dtype) for t in flashinfer.mxfp8_quantize(x[:, :256].contiguous())])
        torch.cuda.synchronize()
        env["warm"] = warm
    print(json.dumps(env, indent=1), file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
