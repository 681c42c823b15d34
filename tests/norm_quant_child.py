"""Child script of tests/test_op_norm_quant.py: run in a fresh interpreter with PYTHONPATH=<patched flashinfer site>.

Usage: python norm_quant_child.py '{"scan_probe": PATH, "hidden": H, "runs": [...]}'; prints one line
``FP4PATCH-NORM-RESULT <json>``.

For ``rmsnorm_quant`` and ``fused_add_rmsnorm_quant`` (the installed, patched public functions), with the scan's
device stubs (``fp4patch/scan_probe.py``: an SM100 device on CPU):

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
import importlib.util
import json
import sys
import traceback

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

MARK = "FP4PATCH-NORM-RESULT "
P = json.loads(sys.argv[1])
H = P["hidden"]


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


scan_probe = _load(P["scan_probe"], "_norm_scan_probe")
scan_probe.install_device_stubs(torch)
probe = scan_probe._trace_probe()

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


def meta(t):
    def dim(d):
        return d if isinstance(d, int) else f"sym:{d}"

    return [[dim(d) for d in t.shape], [dim(s) for s in t.stride()], str(t.dtype)]


def _error(e):
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def run_graph(function, scale):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    rec = {"function": function, "scale": scale}
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            kw = make(function, 8, lambda shape, dtype: torch.empty(shape, dtype=dtype, device="cuda"), scale)
            result = torch.compile(caller(function, scale), fullgraph=True, backend=record, dynamic=False)(kw)
        names = [n for n in TOKEN_ARGS[function] if n != "input"]
        rec["returned_callers"] = [r is kw[n] for r, n in zip(result, names)]
        rec["outputs"] = [meta(r) for r in result]
    except Exception as e:  # noqa: BLE001
        rec["error"] = _error(e)
        rec["tb"] = traceback.format_exc()[-3000:]
    rec["graphs"] = len(graphs)
    rec["breaks"] = sum(torch._dynamo.utils.counters["graph_break"].values())
    rec["ops"] = [n for gm in graphs for n in probe._custom_op_nodes(gm)]
    return rec


def run_dynamic(function, kind, token_counts):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs = []

    def under_fake(fn):
        def run(*args):  # the op's fake in place of the kernel
            with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()):
                return fn(*args)

        return run

    def backend(gm, example_inputs):
        graphs.append(gm)
        return under_fake(gm)

    def aot(gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd

        graphs.append(gm)
        return aot_autograd(fw_compiler=lambda fw, fw_inputs: under_fake(fw))(gm, example_inputs)

    rec = {"function": function, "kind": kind, "token_counts": token_counts}
    compiled = torch.compile(caller(function, "tensor"), fullgraph=True, backend=aot if kind == "aot" else backend)
    oblivious = torch.fx.experimental._config.patch(backed_size_oblivious=True) if kind == "oblivious" else contextlib.nullcontext()
    try:
        calls = []
        with oblivious:
            for m in token_counts:
                kw = make(function, m, lambda shape, dtype: torch.empty(shape, dtype=dtype, device="meta"))
                for name in TOKEN_ARGS[function]:
                    if kind == "unbacked":
                        torch._dynamo.decorators.mark_unbacked(kw[name], 0)
                    else:
                        torch._dynamo.mark_dynamic(kw[name], 0)
                calls.append([meta(t) for t in compiled(kw)])
        rec["outputs"] = calls
    except Exception as e:  # noqa: BLE001
        rec["error"] = _error(e)
        rec["tb"] = traceback.format_exc()[-3000:]
    rec["graphs"] = len(graphs)
    rec["frames"] = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    rec["ops"] = [n for gm in graphs for n in probe._custom_op_nodes(gm)]
    if graphs:
        nodes = list(graphs[0].graph.nodes)
        rec["inputs"] = {n.name: meta(n.meta["example_value"]) for n in nodes
                         if n.op == "placeholder" and isinstance(n.meta.get("example_value"), torch.Tensor)}
    return rec


out = {"graph": [], "dynamic": []}
for function in TOKEN_ARGS:
    for scale in ("tensor", 0.5):
        out["graph"].append(run_graph(function, scale))
    for kind, counts in P["runs"].items():
        out["dynamic"].append(run_dynamic(function, kind, counts))
print(MARK + json.dumps(out))
