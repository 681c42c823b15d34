#!/usr/bin/env python3
"""``mxfp8_quantize`` on CPU tensors (its host path), eager and compiled, on the GPU machine (issue 23, item 5).

FlashInfer's kernel entry ``mxfp8_quantize_sm100`` has a host branch: for a CPU input it allocates uint8
``x_q`` of the input's shape and uint8 scale factors (``alignment`` ignored) and runs the C++ host kernel
``mxfp8_quantize_host`` (float32, 2-D). This script calls ``flashinfer.mxfp8_quantize`` on CPU inputs (and on
one CUDA input, the device path, for contrast) in the interpreter it runs in:

* eagerly: each output's shape, stride, dtype, device and a digest of its bytes, or the exception;
* with ``--compiled``, also called from a function compiled with ``fullgraph=True`` (``nested``) and handed to
  ``torch.compile`` directly (``direct``), backend ``aot_eager`` and ``inductor``: the same, plus the metadata
  the op's fake gave Dynamo for each graph output (``fake``) and the graph's fp4patch op nodes.

Usage (PYTHONPATH holds the FlashInfer copy and its dependencies):
``python benchmarks/gpu_mxfp8_host.py [--compiled] --label NAME --out FILE.json``; then, anywhere (no torch):
``python benchmarks/gpu_mxfp8_host.py --compare DIR --out FILE.json`` summarizes ``DIR/pristine.json`` against each
other ``DIR/*.json``: per case and call form, whether it ran or raised as pristine eager did, whether each output's
shape, stride, dtype and device match pristine eager's, and whether they match what the fake gave Dynamo. (The
bytes of the 128x4 scale factors' padding rows are uninitialized memory, so digests are not compared.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import traceback


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:400]


def _meta(t, torch):
    return [list(t.shape), list(t.stride()), str(t.dtype), t.device.type]


def _outcome(fn, torch):
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001 - the outcome is the exception
        root = exc
        while root.__cause__ is not None:
            root = root.__cause__
        return {"error": _first_line(exc), "root": _first_line(root), "mro": [c.__name__ for c in type(root).__mro__][:4]}
    leaves = list(out) if isinstance(out, (tuple, list)) else [out]
    res = []
    for t in leaves:
        data = t.detach().cpu().contiguous().view(torch.uint8) if t.numel() else t.detach().cpu()
        res.append(_meta(t, torch) + [hashlib.sha1(data.numpy().tobytes()).hexdigest()[:12] if t.numel() else ""])
    return {"ok": res}


def compare(directory: str) -> dict:
    """The summary ``--compare`` writes (see the module docstring)."""
    import glob
    import os

    def load(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    ref = load(os.path.join(directory, "pristine.json"))["cases"]
    out = {"reference": "pristine eager", "copies": {}}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        if os.path.basename(path) == "pristine.json":
            continue
        try:
            data = load(path)
        except ValueError:
            continue
        if "cases" not in data:
            continue
        rows, counts = {}, {"same_as_pristine": 0, "differs": 0, "fake_matches_real": 0, "fake_differs_from_real": 0}
        for name, row in data["cases"].items():
            want = ref.get(name, {}).get("eager", {})
            want_meta = [o[:4] for o in want["ok"]] if "ok" in want else None
            forms = {}
            for form, got in row.items():
                if "ok" in got:
                    meta = [o[:4] for o in got["ok"]]
                    same = want_meta == meta
                    fakes = [g["fake"] for g in got.get("graphs", [])]
                    fake_ok = None if not fakes else fakes[0] == meta
                    forms[form] = {"ran": True, "same_as_pristine": same, "fake_matches_real": fake_ok}
                    if not same:
                        forms[form]["outputs"] = meta
                    if fake_ok is False:
                        forms[form]["fake"] = fakes[0]
                else:
                    same = want_meta is None
                    fake_ok = None
                    forms[form] = {"ran": False, "same_as_pristine": same, "error": got.get("root", got.get("error"))}
                counts["same_as_pristine" if same else "differs"] += 1
                if fake_ok is not None:
                    counts["fake_matches_real" if fake_ok else "fake_differs_from_real"] += 1
            rows[name] = {"pristine eager": {"outputs": want_meta} if want_meta is not None else {"error": want.get("root", want.get("error"))}, **forms}
        out["copies"][data.get("label", os.path.basename(path))] = {"counts": counts, "cases": rows}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiled", action="store_true")
    ap.add_argument("--label")
    ap.add_argument("--compare", metavar="DIR")
    ap.add_argument("--out", required=True)
    ns = ap.parse_args()
    if ns.compare:
        summary = compare(ns.compare)
        with open(ns.out, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
        for label, copy in summary["copies"].items():
            print(label, copy["counts"])
        return 0
    if not ns.label:
        ap.error("--label is required (or --compare DIR)")
    import torch
    import flashinfer

    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 1_000_000)
    layout = getattr(flashinfer, "SfLayout", None)
    result = {"label": ns.label, "flashinfer": flashinfer.__version__, "file": flashinfer.__file__, "cases": {}}
    cases = [
        ("CPU M=1 K=64 128x4", (1, 64), torch.float32, "cpu", {}),
        ("CPU M=8 K=256 128x4", (8, 256), torch.float32, "cpu", {}),
        ("CPU M=129 K=64 128x4", (129, 64), torch.float32, "cpu", {}),
        ("CPU M=8 K=256 linear", (8, 256), torch.float32, "cpu", {"is_sf_swizzled_layout": False}),
        ("CPU M=129 K=64 linear", (129, 64), torch.float32, "cpu", {"is_sf_swizzled_layout": False}),
        ("CPU M=8 K=96 alignment=128", (8, 96), torch.float32, "cpu", {"alignment": 128}),
        ("CPU M=8 K=96 alignment=128 linear", (8, 96), torch.float32, "cpu", {"alignment": 128, "is_sf_swizzled_layout": False}),
        ("CPU bf16 input", (8, 64), torch.bfloat16, "cpu", {}),
        ("CPU 3-D input", (2, 8, 64), torch.float32, "cpu", {}),
        ("CUDA M=8 K=256 128x4 (device path)", (8, 256), torch.bfloat16, "cuda", {}),
    ]
    if layout is not None:
        cases.append(("CPU M=129 K=64 8x4", (129, 64), torch.float32, "cpu", {"sf_swizzle_layout": layout.layout_8x4}))
        cases.append(("CPU M=129 K=64 sf_swizzle_layout=linear", (129, 64), torch.float32, "cpu", {"sf_swizzle_layout": layout.layout_linear}))

    fakes: list = []

    def recording(inner):
        from torch._dynamo.backends.registry import lookup_backend

        def backend(gm, example_inputs):
            out = next(n for n in reversed(list(gm.graph.nodes)) if n.op == "output")
            metas = []
            for leaf in torch.utils._pytree.tree_leaves(out.args[0]):
                v = leaf.meta.get("example_value") if isinstance(leaf, torch.fx.Node) else None
                metas.append(_meta(v, torch) if isinstance(v, torch.Tensor) else None)
            ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function" and getattr(n.target, "namespace", None) == "fp4patch"]
            fakes.append({"fake": metas, "ops": ops})
            return lookup_backend(inner)(gm, example_inputs)

        return backend

    for name, shape, dtype, device, kwargs in cases:
        torch.manual_seed(0)
        x = (torch.randn(shape, dtype=torch.float32) * 16).to(dtype).to(device).contiguous()
        row = {"eager": _outcome(lambda: flashinfer.mxfp8_quantize(x, **kwargs), torch)}
        if ns.compiled:
            for backend in ("aot_eager", "inductor"):
                for how in ("nested", "direct"):
                    torch._dynamo.reset()
                    fakes.clear()
                    if how == "nested":
                        def nested(t):
                            return flashinfer.mxfp8_quantize(t, **kwargs)

                        c = torch.compile(nested, fullgraph=True, backend=recording(backend), dynamic=False)
                        call = lambda: c(x)  # noqa: E731
                    else:
                        c = torch.compile(flashinfer.mxfp8_quantize, fullgraph=True, backend=recording(backend), dynamic=False)
                        call = lambda: c(x, **kwargs)  # noqa: E731
                    t0 = time.perf_counter()
                    got = _outcome(call, torch)
                    got["seconds"] = round(time.perf_counter() - t0, 3)
                    got["graphs"] = list(fakes)
                    row[f"{how} {backend}"] = got
        result["cases"][name] = row
        print(name, json.dumps(row)[:300], file=sys.stderr)
    with open(ns.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
