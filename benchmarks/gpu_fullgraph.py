#!/usr/bin/env python3
"""H200 benchmark of the ``fp4-quantize-fullgraph`` patch (issue: fullgraph).

Run on the GPU machine (see README "GPU results"); it drives two processes per FlashInfer copy:

    python benchmarks/gpu_fullgraph.py orchestrate --unpatched DIR --patched DIR --out FILE.json

where DIR are two site-packages directories holding the same flashinfer-python release, the
second already patched with ``fp4patch apply --site-packages DIR``. Each phase runs in its own
interpreter so that the unpatched and patched modules never meet.

Phase ``patched``:
  1. ``torch.library.opcheck`` (schema and fake-tensor tests) of ``fp4patch::fp4_quantize``
     against the real kernel for M in {1, 127, 128, 129}, K in {64, 7168}, sf_vec_size 16/32,
     128x4 / 8x4 / linear, row- and column-major input, global_scale given or not;
  2. a decode-like block, 4 x [rms_norm -> fp4_quantize -> elementwise], M=8, K=7168, bf16,
     compiled with fullgraph=True under a graph-recording backend (graph count), inductor and
     mode="reduce-overhead";
  3. the eager block captured with ``torch.cuda.graph`` and replayed;
  4. timings (CUDA events around ITER runs, median of REPEATS) of eager, inductor,
     reduce-overhead and raw graph replay; and the eager per-call host cost of fp4_quantize.
Phase ``unpatched``: the same eager per-call cost, and the eager block time.

On sm90 FlashInfer compiles the e2m1 conversion out (``__CUDA_ARCH__ >= 1000`` guard), so FP4
values are not deterministic there: only metadata (shape, stride, dtype) and time are compared.
Times are in microseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback

M_DECODE, K_DECODE, LAYERS = 8, 7168, 4
ITERS, REPEATS = 200, 7
CALL_ITERS = 2000


def _median_event_time(fn, iters=ITERS, repeats=REPEATS):
    import torch

    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / iters)
    return {"median_us": statistics.median(times), "min_us": min(times), "max_us": max(times), "repeats": repeats, "iters": iters}


def _per_call_host_cost(fp4_quantize, x, gs, iters=CALL_ITERS, repeats=REPEATS):
    """Host time per eager fp4_quantize call (us): a loop of calls, synchronised at the end."""
    import torch

    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            fp4_quantize(x, gs)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6 / iters)
    return {"median_us": statistics.median(times), "min_us": min(times), "max_us": max(times), "repeats": repeats, "iters": iters}


def make_block(fp4_quantize):
    import torch

    def block(x, weights, gs):
        for w in weights:
            h = torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)
            q, sf = fp4_quantize(h, gs)
            # a few elementwise ops that consume both outputs, so nothing is dead code
            x = x * 0.5 + q.to(x.dtype).repeat_interleave(2, dim=-1) * 1e-3
            x = torch.nn.functional.silu(x) + sf.to(torch.float32).mean().to(x.dtype) * 1e-3
        return x

    return block


def phase(name: str) -> dict:
    import torch
    import flashinfer

    result = {
        "phase": name,
        "flashinfer": flashinfer.__version__,
        "flashinfer_file": flashinfer.__file__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
        "errors": {},
    }
    dev = "cuda"
    torch.manual_seed(0)
    x = torch.randn(M_DECODE, K_DECODE, device=dev, dtype=torch.bfloat16)
    gs = torch.tensor([448.0 * 6.0], device=dev, dtype=torch.float32)
    weights = [torch.randn(K_DECODE, device=dev, dtype=torch.bfloat16) for _ in range(LAYERS)]
    fq = flashinfer.fp4_quantize
    t0 = time.perf_counter()
    fq(x, gs)  # first call: JIT build/load
    torch.cuda.synchronize()
    result["first_call_s"] = time.perf_counter() - t0
    result["eager_fp4_quantize_call"] = _per_call_host_cost(fq, x, gs)
    block = make_block(fq)
    result["eager_block"] = _median_event_time(lambda: block(x, weights, gs))

    if name != "patched":
        return result

    # 1. opcheck of the op against the real kernel: schema + fake-tensor tests only (values are
    #    not deterministic on sm90).
    op = torch.ops.fp4patch.fp4_quantize.default
    checks = []
    for m in (1, 127, 128, 129):
        for k in (64, 7168):
            for sf_vec in (16, 32):
                for layout in ("128x4", "8x4", "linear"):
                    for column_major in (False, True):
                        for with_gs in (True, False):
                            if column_major and m % sf_vec:
                                continue  # a column-major input is quantized along M: M % sf_vec must be 0
                            base = torch.randn(k, m, device=dev, dtype=torch.bfloat16).t() if column_major else torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                            kwargs = dict(
                                global_scale=gs if with_gs else None,
                                sf_vec_size=sf_vec,
                                sf_use_ue8m0=sf_vec == 32,
                                is_sf_swizzled_layout=layout != "linear",
                                is_sf_8x4_layout=layout == "8x4",
                            )
                            name_ = f"M={m} K={k} sf_vec={sf_vec} {layout} {'col' if column_major else 'row'} gs={'yes' if with_gs else 'no'}"
                            try:
                                torch.library.opcheck(op, (base,), kwargs, test_utils=("test_schema", "test_faketensor"))
                                real = op(base, **kwargs)
                                checks.append({"case": name_, "ok": True, "out": [[list(t.shape), list(t.stride()), str(t.dtype)] for t in real]})
                            except Exception as exc:  # noqa: BLE001 - reported, not raised
                                checks.append({"case": name_, "ok": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
    result["opcheck"] = {"cases": len(checks), "passed": sum(c["ok"] for c in checks), "failures": [c for c in checks if not c["ok"]][:20], "sample": checks[:3]}

    # 2. fullgraph compile: graph count with a recording backend, then inductor and reduce-overhead.
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    try:
        torch._dynamo.reset()
        torch.compile(block, fullgraph=True, backend=record)(x, weights, gs)
        ops = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function" and "fp4patch" in str(n.target)]
        result["fullgraph_record"] = {"graphs": len(graphs), "fp4patch_op_nodes": len(ops)}
    except Exception as exc:  # noqa: BLE001
        result["errors"]["fullgraph_record"] = traceback.format_exception_only(exc)[-1].strip()

    for label, kwargs in (("inductor", {}), ("reduce_overhead", {"mode": "reduce-overhead"})):
        try:
            torch._dynamo.reset()
            compiled = torch.compile(block, fullgraph=True, **kwargs)
            for _ in range(5):
                out = compiled(x, weights, gs)
            torch.cuda.synchronize()
            eager_out = block(x, weights, gs)
            result[f"{label}_output_meta_equal"] = (out.shape, out.stride(), out.dtype) == (eager_out.shape, eager_out.stride(), eager_out.dtype)
            result[label] = _median_event_time(lambda: compiled(x, weights, gs))
        except Exception as exc:  # noqa: BLE001
            result["errors"][label] = traceback.format_exception_only(exc)[-1].strip()

    # 3. raw CUDA graph of the eager block.
    try:
        static_x = x.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                block(static_x, weights, gs)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = block(static_x, weights, gs)
        graph.replay()
        torch.cuda.synchronize()
        result["graph_capture"] = {"ok": True, "out": [list(static_out.shape), str(static_out.dtype)]}
        result["graph_replay"] = _median_event_time(graph.replay)
    except Exception as exc:  # noqa: BLE001
        result["errors"]["graph_capture"] = traceback.format_exception_only(exc)[-1].strip()
    return result


def orchestrate(args) -> int:
    here = os.path.abspath(__file__)
    results = {"date": time.strftime("%Y-%m-%d"), "block": f"{LAYERS} x [rms_norm -> fp4_quantize -> elementwise], M={M_DECODE}, K={K_DECODE}, bf16"}
    for name, site in (("unpatched", args.unpatched), ("patched", args.patched)):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH", "")])))
        done = subprocess.run([sys.executable, here, "phase", name], capture_output=True, text=True, env=env)
        sys.stderr.write(done.stderr[-4000:])
        try:
            results[name] = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            results[name] = {"error": f"phase exited {done.returncode}", "stderr_tail": done.stderr[-2000:]}
    p, u = results.get("patched", {}), results.get("unpatched", {})
    summary = {}
    try:
        summary["per_call_overhead_pct"] = 100.0 * (p["eager_fp4_quantize_call"]["median_us"] / u["eager_fp4_quantize_call"]["median_us"] - 1.0)
        eager = p["eager_block"]["median_us"]
        for key in ("inductor", "reduce_overhead", "graph_replay"):
            if key in p:
                summary[f"speedup_{key}_vs_eager"] = eager / p[key]["median_us"]
        if "reduce_overhead" in p and "graph_replay" in p:
            summary["reduce_overhead_over_raw_graph"] = p["reduce_overhead"]["median_us"] / p["graph_replay"]["median_us"]
    except (KeyError, ZeroDivisionError, TypeError) as exc:
        summary["error"] = f"incomplete results: {exc!r}"
    results["summary"] = summary
    with open(args.out, "w") as handle:
        json.dump(results, handle, indent=2, default=str)
    print(json.dumps(summary, indent=2))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    o = sub.add_parser("orchestrate")
    o.add_argument("--unpatched", required=True)
    o.add_argument("--patched", required=True)
    o.add_argument("--out", required=True)
    ph = sub.add_parser("phase")
    ph.add_argument("name", choices=["unpatched", "patched"])
    args = parser.parse_args()
    if args.command == "orchestrate":
        return orchestrate(args)
    print(json.dumps(phase(args.name), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
