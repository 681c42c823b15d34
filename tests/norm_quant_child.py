"""Child script of tests/test_op_norm_quant.py: run in a fresh interpreter with PYTHONPATH=<patched flashinfer site>.

Usage: python norm_quant_child.py '{"scan_probe": PATH, "hidden": H, "runs": [...]}'; prints one line
``FP4PATCH-NORM-RESULT <json>``.

For ``rmsnorm_quant`` and ``fused_add_rmsnorm_quant`` (the installed, patched public functions), with the scan's
device stubs (``fp4patch/probes/scan_probe.py``: an SM100 device on CPU):

* "graph": ``torch.compile(fullgraph=True, dynamic=False)`` of a function that calls the wrapper as an engine does
  (vLLM's static-FP8 RMSNorm: ``out`` allocated by the caller, ``scale`` a float32 (1,) tensor; also a float
  ``scale``, the wrapper's deprecated form) on fake CUDA tensors (``FakeTensorMode``), returning the mutated
  tensors: the graphs, graph breaks, the custom-op nodes, and whether each returned tensor is the caller's;
* "dynamic" runs: the same function compiled once, called at several token counts with the token dimension of
  ``out`` / ``input`` / ``residual`` marked dynamic (``mark_dynamic``; "oblivious": under
  ``backed_size_oblivious``), unbacked (``mark_unbacked``), or (``aot``) marked dynamic with the graph taken
  through AOTAutograd, which functionalizes the op's mutations as Inductor does. The inputs are meta tensors
  (Dynamo makes its own ShapeEnv for them, as for real inputs); each graph runs under ``FakeTensorMode``, so the
  op's fake stands in for the kernel. Recorded: graphs, frames Dynamo compiled, op nodes, the traced token
  size (a symbol), each call's returned shapes.
"""

from __future__ import annotations

import contextlib
import json
import sys
import traceback

import child_support as support  # tests/child_support.py (this script's folder is first on sys.path)
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

MARK = "FP4PATCH-NORM-RESULT "
P = json.loads(sys.argv[1])
H = P["hidden"]

probe = support.stubbed_trace_probe(torch, P["scan_probe"], "_norm_scan_probe")

import flashinfer  # after the device stubs

TOKEN_ARGS = {"rmsnorm_quant": ("out", "input"), "fused_add_rmsnorm_quant": ("out", "input", "residual")}


def make(function, m, new, scale="tensor"):
    """The call's tensors for ``m`` tokens; ``new(shape, dtype)`` makes one."""
    kw = {"out": new((m, H), torch.float8_e4m3fn), "input": new((m, H), torch.bfloat16)}
    if function == "fused_add_rmsnorm_quant":
        kw["residual"] = new((m, H), torch.bfloat16)
    kw["weight"] = new((H,), torch.bfloat16)
    if scale == "tensor":
        kw["scale"] = new((1,), torch.float32)
    return kw


def caller(function, scale):
    """What an engine compiles: the wrapper writing into the caller's tensors, which it returns."""
    fn = getattr(flashinfer, function)

    def f(kw):
        fn(**kw) if scale == "tensor" else fn(**kw, scale=scale)
        return tuple(kw[n] for n in TOKEN_ARGS[function] if n != "input")

    return f


def run_graph(function, scale):
    compiles = support.Compiles(torch)
    rec = {"function": function, "scale": scale}
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            kw = make(function, 8, support.tensor_maker(torch, "cuda"), scale)
            result = torch.compile(caller(function, scale), fullgraph=True, backend=compiles.record, dynamic=False)(kw)
        names = [n for n in TOKEN_ARGS[function] if n != "input"]
        rec["returned_callers"] = [r is kw[n] for r, n in zip(result, names)]
        rec["outputs"] = [support.layout(r) for r in result]
    except Exception as e:  # noqa: BLE001
        rec["error"] = support.error_line(e)
        rec["tb"] = traceback.format_exc()[-3000:]
    rec["graphs"] = len(compiles.graphs)
    rec["breaks"] = compiles.breaks()
    rec["ops"] = compiles.ops(probe)
    return rec


def run_dynamic(function, kind, token_counts):
    compiles = support.Compiles(torch)
    rec = {"function": function, "kind": kind, "token_counts": token_counts}
    compiled = torch.compile(caller(function, "tensor"), fullgraph=True, backend=compiles.aot if kind == "aot" else compiles.fake)
    oblivious = torch.fx.experimental._config.patch(backed_size_oblivious=True) if kind == "oblivious" else contextlib.nullcontext()
    try:
        calls = []
        with oblivious:
            for m in token_counts:
                kw = make(function, m, support.tensor_maker(torch, "meta"))
                for name in TOKEN_ARGS[function]:
                    if kind == "unbacked":
                        torch._dynamo.decorators.mark_unbacked(kw[name], 0)
                    else:
                        torch._dynamo.mark_dynamic(kw[name], 0)
                calls.append([support.layout(t) for t in compiled(kw)])
        rec["outputs"] = calls
    except Exception as e:  # noqa: BLE001
        rec["error"] = support.error_line(e)
        rec["tb"] = traceback.format_exc()[-3000:]
    rec["graphs"] = len(compiles.graphs)
    rec["frames"] = compiles.frames()
    rec["ops"] = compiles.ops(probe)
    if compiles.graphs:
        rec["inputs"] = {name: support.layout(t) for name, t in compiles.inputs()}
    return rec


out = {"graph": [], "dynamic": []}
for function in TOKEN_ARGS:
    for scale in ("tensor", 0.5):
        out["graph"].append(run_graph(function, scale))
    for kind, counts in P["runs"].items():
        out["dynamic"].append(run_dynamic(function, kind, counts))
support.emit(MARK, out)
