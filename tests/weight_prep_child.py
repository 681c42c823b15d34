"""Child script of tests/test_op_weight_prep.py: run in a fresh interpreter with PYTHONPATH=<patched flashinfer site>.

Usage: python weight_prep_child.py '{"scan_probe": PATH, "calls": {label: {"form": NAME, "out_size": N,
"out_dtype": DTYPE}}, "runs": {kind: [rows, ...]}}'; prints one line
``FP4PATCH-WEIGHTPREP-RESULT <json>``.

With the scan's device stubs (``fp4patch/probes/scan_probe.py``: an SM100 device on CPU), for the installed, patched
``flashinfer.block_scale_interleave``:

* "calls": each engine call form (``FORMS`` below, named by the test) compiled with
  ``torch.compile(fullgraph=True, dynamic=False)`` on fake CUDA tensors (``FakeTensorMode``): the graphs, graph
  breaks, the custom-op nodes, what comes back (shape, stride, dtype) and whether it is the caller's ``out``; or the
  error's class and first line;
* "runs": the default call compiled once and called at several row counts with the row dimension marked dynamic
  (``mark_dynamic``) or unbacked (``mark_unbacked``): meta inputs, each graph run under ``FakeTensorMode`` (the
  op's fake in place of the kernel); graphs, frames, op nodes, the traced row size, each call's output shape.
"""

from __future__ import annotations

import json
import sys
import traceback

import child_support as support  # tests/child_support.py (this script's folder is first on sys.path)
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

MARK = "FP4PATCH-WEIGHTPREP-RESULT "
P = json.loads(sys.argv[1])

probe = support.stubbed_trace_probe(torch, P["scan_probe"], "_weightprep_scan_probe")

import flashinfer  # after the device stubs


def _forms():
    """Engine call forms: name -> (function of the tensors dict, tensors dict maker(new))."""
    bsi = flashinfer.block_scale_interleave
    alias = getattr(flashinfer, "nvfp4_block_scale_interleave", bsi)

    def weight_load(kw):  # vLLM / SGLang MoE weight loading: one expert's (permuted) scales, reshaped to [rows, cols]
        # the engines permute the rows first (s[perm]): a CUDA getitem, which a CPU-only torch cannot run on fake
        # tensors (its device guard), so the permuted copy is the input here
        s = kw["scales"]
        return bsi(s.contiguous()).reshape(s.shape[0], -1)

    def a2a(kw):  # vLLM's FlashInfer A2A prepare: the received e4m3 scales swizzled, then viewed [-1, hidden // 16]
        x_sf = kw["x_sf"].view(-1, kw["x_sf"].shape[-1]).view(torch.uint8)
        return alias(x_sf).view(-1, kw["x_sf"].shape[-1])

    def experts(kw):  # a 3-D [experts, rows, cols] buffer at once, viewed per expert
        return bsi(kw["scales3"]).view(kw["scales3"].shape[0], -1)

    def out_given(kw):  # 0.7.2.post1+: the caller's buffer, kept across CUDA graph replays
        return bsi(kw["scales"], out=kw["out"])

    def bf16(kw):
        return bsi(kw["bf16"])

    def f32(kw):  # refused by the wrapper's dtype assertion
        return bsi(kw["f32"])

    return {"weight_load": weight_load, "a2a": a2a, "experts": experts, "out": out_given, "bf16": bf16, "f32": f32}


def _tensors(new, call, cols=448):
    """The tensors of the forms; ``new(shape, dtype)`` makes one; ``call`` may give the rows (129) and ``out``'s
    size and dtype."""
    rows = call.get("rows", 129)
    size = (rows + 127) // 128 * 128 * ((cols + 3) // 4 * 4)
    return {
        "scales": new((rows, cols), torch.uint8),
        "x_sf": new((2, rows, cols), torch.float8_e4m3fn),
        "scales3": new((4, rows, cols), torch.uint8),
        "bf16": new((rows, cols), torch.bfloat16),
        "f32": new((rows, cols), torch.float32),
        "out": new((call.get("out_size", size),), getattr(torch, call.get("out_dtype", "uint8"))),
    }


def run_call(name, call):
    compiles = support.Compiles(torch)
    rec = {"name": name}
    fn = FORMS[call["form"]]
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            kw = _tensors(support.tensor_maker(torch, "cuda"), call)
            result = torch.compile(fn, fullgraph=True, backend=compiles.record, dynamic=False)(kw)
        rec["output"] = support.layout(result)
        rec["is_out"] = result is kw["out"]
    except Exception as e:  # noqa: BLE001 - the error is the result
        lines = str(e).strip().splitlines()
        rec["error"] = lines[0] if lines else ""
        rec["type"] = type(e).__name__
        rec["is_value_error"] = isinstance(e, ValueError)
        rec["is_assertion_error"] = isinstance(e, AssertionError)
    rec["graphs"] = len(compiles.graphs)
    rec["breaks"] = compiles.breaks()
    rec["ops"] = compiles.ops(probe)
    return rec


def run_dynamic(kind, row_counts):
    compiles = support.Compiles(torch)
    compiled = torch.compile(lambda s: flashinfer.block_scale_interleave(s), fullgraph=True, backend=compiles.fake)
    rec = {"kind": kind, "row_counts": row_counts}
    try:
        calls = []
        for m in row_counts:
            s = torch.empty((m, 448), dtype=torch.uint8, device="meta")
            if kind == "unbacked":
                torch._dynamo.decorators.mark_unbacked(s, 0)
            else:
                torch._dynamo.mark_dynamic(s, 0)
            calls.append(support.layout(compiled(s)))
        rec["outputs"] = calls
    except Exception as e:  # noqa: BLE001
        rec["error"] = support.error_line(e)
        rec["tb"] = traceback.format_exc()[-3000:]
    rec["graphs"] = len(compiles.graphs)
    rec["frames"] = compiles.frames()
    rec["ops"] = compiles.ops(probe)
    if compiles.graphs:
        inputs = compiles.inputs()
        rec["input"] = support.layout(inputs[0][1]) if inputs else None
    return rec


FORMS = _forms()
out = {"calls": {name: run_call(name, call) for name, call in P["calls"].items()}, "dynamic": [run_dynamic(k, v) for k, v in P["runs"].items()]}
support.emit(MARK, out)
