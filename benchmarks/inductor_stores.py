"""How many times Inductor stores an rms_norm output that several custom ops read (issue 19).

On the H200 the compiled block's fused rms_norm kernel stored its output four times per layer, once
for each fp4patch op reading it (``fp4_quantize``, ``nvfp4_batched_quantize``,
``scaled_fp4_grouped_quantize``, ``mxfp8_quantize``). This reproduces it on CPU without FlashInfer: a
toy ``torch.library.custom_op`` per consumer (``x.clone()`` body, ``new_empty`` fake) registered with
each layout tag torch has, and, as the baseline, four ``aten.mm`` consumers of the same rms_norm output.
It counts the stores of the normalised values in the Inductor output code (``.store(out_ptr`` in the
fused C++ kernel). Writes ``benchmarks/results/inductor-stores.json``.

Usage: ``python benchmarks/inductor_stores.py [--out FILE]`` (about a minute of CPU).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import re, sys, torch
from torch._inductor.utils import run_and_get_code
kind = sys.argv[1]
tags = {"none": (), "flexible_layout": (torch._C.Tag.flexible_layout,),
        "needs_fixed_stride_order": (torch._C.Tag.needs_fixed_stride_order,),
        "needs_exact_strides": (torch._C.Tag.needs_exact_strides,),
        "needs_contiguous_strides": (torch._C.Tag.needs_contiguous_strides,)}
def mk(i):
    @torch.library.custom_op(f"storebench::q{i}", mutates_args=(), tags=tags.get(kind, ()))
    def op(x: torch.Tensor) -> torch.Tensor:
        return x.clone()
    @op.register_fake
    def _(x):
        return x.new_empty(x.shape)
    return op
ops = [mk(i) for i in range(4)]
def f(x, w, b):
    h = torch.nn.functional.rms_norm(x, (x.shape[-1],), w)
    return [h @ b * (i + 1) for i in range(4)] if kind == "aten.mm" else [op(h) for op in ops]
x, w, b = torch.randn(8, 1024), torch.randn(1024), torch.randn(1024, 16)
_, code = run_and_get_code(torch.compile(f, fullgraph=True), x, w, b)
kernel = code[0].split("def call(self, args)")[0]
# full-size [8, 1024] stores (index x1 + 1024*x0) anywhere in the kernels: the normalised values
print(len(re.findall(r"\.store\(out_ptr\d+ \+ static_cast<int64_t>\(x1 \+ 1024L\*x0\)\)", kernel)))
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "inductor-stores.json")
    args = ap.parse_args()
    import torch

    kinds = ["aten.mm", "none", "flexible_layout", "needs_fixed_stride_order", "needs_exact_strides", "needs_contiguous_strides"]
    stores = {}
    for kind in kinds:  # a fresh process each: op names and Inductor caches do not carry over
        done = subprocess.run([sys.executable, "-c", CHILD, kind], capture_output=True, text=True, timeout=600)
        lines = [ln for ln in done.stdout.splitlines() if re.fullmatch(r"\d+", ln.strip())]
        stores[kind] = int(lines[-1]) if done.returncode == 0 and lines else f"failed: {done.stderr.strip().splitlines()[-1:]}"
    result = {
        "torch": torch.__version__,
        "what": "stores of an rms_norm output [8, 1024] read by 4 consumers, in Inductor's fused CPU kernel",
        "stores_by_consumer_kind": stores,
        "finding": "every custom-op layout tag gives one store per consumer, aten consumers one in all: the copies come "
                   "from Inductor's lowering of custom-op (fallback) inputs, not from how fp4patch registers its ops",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(stores))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
