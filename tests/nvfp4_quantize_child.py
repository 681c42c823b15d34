"""Child script of tests/test_op_nvfp4_quantize.py: run in a fresh interpreter with PYTHONPATH=<patched flashinfer site>.

Usage: python nvfp4_quantize_child.py '{"scan_probe": PATH, "hidden": K, "calls": {...}, "refusals": {...}, "runs": {...}}';
prints one line ``FP4PATCH-NVFP4-RESULT <json>``.

With the scan's device stubs (``fp4patch/scan_probe.py``: an SM100 device on CPU), for the installed, patched
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

import importlib.util
import json
import sys
import traceback

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

MARK = "FP4PATCH-NVFP4-RESULT "
P = json.loads(sys.argv[1])
K = P["hidden"]


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


scan_probe = _load(P["scan_probe"], "_nvfp4_scan_probe")
scan_probe.install_device_stubs(torch)
probe = scan_probe._trace_probe()

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


def meta(t):
    def dim(d):
        return d if isinstance(d, int) else f"sym:{d}"

    return [[dim(d) for d in t.shape], [dim(s) for s in t.stride()], str(t.dtype)]


def _error(e):
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def run_graph(name, kwargs):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    rec = {"name": name}
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            new = lambda shape, dtype: torch.empty(shape, dtype=dtype, device="cuda")
            f, s = caller(kwargs, new)
            result = torch.compile(f, fullgraph=True, backend=record, dynamic=False)(new((8, K), torch.bfloat16), s)
        rec["outputs"] = [meta(r) for r in result]
    except Exception as e:  # noqa: BLE001
        rec["error"] = _error(e)
        rec["text"] = str(e)[:4000]
        rec["tb"] = traceback.format_exc()[-2000:]
    rec["graphs"] = len(graphs)
    rec["breaks"] = sum(torch._dynamo.utils.counters["graph_break"].values())
    rec["ops"] = [n for gm in graphs for n in probe._custom_op_nodes(gm)]
    return rec


def run_dynamic(kind, kwargs, token_counts):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)

        def run(*args):  # the op's fake in place of the kernel
            with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()):
                return gm(*args)

        return run

    rec = {"kind": kind, "token_counts": token_counts}
    new = lambda shape, dtype: torch.empty(shape, dtype=dtype, device="meta")
    f, s = caller(kwargs, new)
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    try:
        calls = []
        for m in token_counts:
            h = new((m, K), torch.bfloat16)
            if kind.startswith("unbacked"):
                torch._dynamo.decorators.mark_unbacked(h, 0)
            else:
                torch._dynamo.mark_dynamic(h, 0)
            calls.append([meta(t) for t in compiled(h, s)])
        rec["outputs"] = calls
    except Exception as e:  # noqa: BLE001
        rec["error"] = _error(e)
        rec["tb"] = traceback.format_exc()[-3000:]
    rec["graphs"] = len(graphs)
    rec["frames"] = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    rec["ops"] = [n for gm in graphs for n in probe._custom_op_nodes(gm)]
    if graphs:
        nodes = list(graphs[0].graph.nodes)
        rec["inputs"] = [meta(n.meta["example_value"]) for n in nodes
                         if n.op == "placeholder" and isinstance(n.meta.get("example_value"), torch.Tensor)]
    return rec


out = {"graph": [run_graph(n, kw) for n, kw in P["calls"].items()],
       "refusals": [run_graph(n, kw) for n, kw in P["refusals"].items()],
       "dynamic": [run_dynamic(kind, r["call"], r["token_counts"]) for kind, r in P["runs"].items()]}
print(MARK + json.dumps(out))
