"""Child script of tests/test_op_nvfp4_quantize.py: run in a fresh interpreter with PYTHONPATH=<patched flashinfer site>.

Usage: python nvfp4_quantize_child.py '{"scan_probe": PATH, "hidden": K, "calls": {...}, "refusals": {...}, "runs": {...}}';
prints one line ``FP4PATCH-NVFP4-RESULT <json>``.

With the scan's device stubs (``fp4patch/probes/scan_probe.py``: an SM100 device on CPU), for the installed, patched
``flashinfer.nvfp4_quantize``:

* "graph": ``torch.compile(fullgraph=True, dynamic=False)`` of a caller making one of the call forms in ``calls``
  (name -> keyword arguments; ``"scale"`` is ``"tensor"`` for a float32 (1,) fake CUDA tensor, else the float
  passed; ``"sfLayout"`` a name of ``SfLayout``) on a fake CUDA bf16 ``[8, K]`` input: graphs, graph breaks,
  the custom-op nodes, each returned tensor's shape / stride / dtype, or the error's class and first line (and
  the start of its text);
* "refusals": the same for the calls fp4patch refuses under compile (the error's first line);
* "dynamic": the call ``runs[kind]["call"]`` compiled once and called at several token counts with the token
  dimension marked dynamic (``mark_dynamic``) or unbacked (``mark_unbacked``, a kind starting "unbacked"); meta inputs, each graph run under
  ``FakeTensorMode`` so the op's fake stands in for the kernel: graphs, frames, op nodes, the traced token size
  (a symbol) and each call's returned shapes.
"""

from __future__ import annotations

import json
import sys
import traceback

import child_support as support  # tests/child_support.py (this script's folder is first on sys.path)
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

MARK = "FP4PATCH-NVFP4-RESULT "
P = json.loads(sys.argv[1])
K = P["hidden"]

probe = support.stubbed_trace_probe(torch, P["scan_probe"], "_nvfp4_scan_probe")

import flashinfer  # after the device stubs
from flashinfer import SfLayout


def caller(kwargs, new):
    """What an engine compiles: ``nvfp4_quantize(h, scale, **kwargs)``, returning its outputs."""
    kw = dict(kwargs)
    scale = kw.pop("scale")
    if "sfLayout" in kw:
        kw["sfLayout"] = getattr(SfLayout, kw["sfLayout"])
    fixed = None if scale == "tensor" else scale

    def f(h, s):
        return flashinfer.nvfp4_quantize(h, s if fixed is None else fixed, **kw)

    return f, new((1,), torch.float32)


def run_graph(name, kwargs):
    compiles = support.Compiles(torch)
    rec = {"name": name}
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            new = support.tensor_maker(torch, "cuda")
            f, s = caller(kwargs, new)
            result = torch.compile(f, fullgraph=True, backend=compiles.record, dynamic=False)(new((8, K), torch.bfloat16), s)
        rec["outputs"] = [support.layout(r) for r in result]
    except Exception as e:  # noqa: BLE001
        rec["error"] = support.error_line(e)
        rec["text"] = str(e)[:4000]
        rec["tb"] = traceback.format_exc()[-2000:]
    rec["graphs"] = len(compiles.graphs)
    rec["breaks"] = compiles.breaks()
    rec["ops"] = compiles.ops(probe)
    return rec


def run_dynamic(kind, kwargs, token_counts):
    compiles = support.Compiles(torch)
    rec = {"kind": kind, "token_counts": token_counts}
    new = support.tensor_maker(torch, "meta")
    f, s = caller(kwargs, new)
    compiled = torch.compile(f, fullgraph=True, backend=compiles.fake)
    try:
        calls = []
        for m in token_counts:
            h = new((m, K), torch.bfloat16)
            if kind.startswith("unbacked"):
                torch._dynamo.decorators.mark_unbacked(h, 0)
            else:
                torch._dynamo.mark_dynamic(h, 0)
            calls.append([support.layout(t) for t in compiled(h, s)])
        rec["outputs"] = calls
    except Exception as e:  # noqa: BLE001
        rec["error"] = support.error_line(e)
        rec["tb"] = traceback.format_exc()[-3000:]
    rec["graphs"] = len(compiles.graphs)
    rec["frames"] = compiles.frames()
    rec["ops"] = compiles.ops(probe)
    if compiles.graphs:
        rec["inputs"] = [support.layout(t) for _, t in compiles.inputs()]
    return rec


out = {"graph": [run_graph(n, kw) for n, kw in P["calls"].items()],
       "refusals": [run_graph(n, kw) for n, kw in P["refusals"].items()],
       "dynamic": [run_dynamic(kind, r["call"], r["token_counts"]) for kind, r in P["runs"].items()]}
support.emit(MARK, out)
