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
REPEATS = 7
CALL_ITERS = 2000


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


def percall(name: str) -> dict:
    """Only the eager per-call host cost (JIT already cached by an earlier phase)."""
    import torch
    import flashinfer

    x = torch.randn(M_DECODE, K_DECODE, device="cuda", dtype=torch.bfloat16)
    gs = torch.tensor([448.0 * 6.0], device="cuda", dtype=torch.float32)
    for _ in range(200):
        flashinfer.fp4_quantize(x, gs)
    torch.cuda.synchronize()
    return {"phase": name, "eager_fp4_quantize_call": _per_call_host_cost(flashinfer.fp4_quantize, x, gs)}


def percall_ab(patched_site: str, rounds: int = 61) -> dict:
    """Eager per-call host cost, unpatched vs patched, in ONE process, interleaved round by round.

    The unpatched flashinfer is imported normally; the patched ``fp4_quantization.py`` from
    ``patched_site`` is loaded beside it as ``flashinfer._fp4patch_ab`` (same package, so its
    relative imports resolve). Both run the same kernel; only the Python wrapper differs.
    """
    import importlib.util

    import torch
    import flashinfer

    unpatched = sys.modules[flashinfer.fp4_quantize.__module__]
    relative = os.path.relpath(unpatched.__file__, os.path.dirname(os.path.dirname(flashinfer.__file__)))
    spec = importlib.util.spec_from_file_location("flashinfer._fp4patch_ab", os.path.join(patched_site, relative))
    patched = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = patched
    spec.loader.exec_module(patched)
    x = torch.randn(M_DECODE, K_DECODE, device="cuda", dtype=torch.bfloat16)
    gs = torch.tensor([448.0 * 6.0], device="cuda", dtype=torch.float32)
    fns = {"unpatched": unpatched.fp4_quantize, "patched": patched.fp4_quantize}
    for fn in fns.values():
        for _ in range(500):
            fn(x, gs)
    torch.cuda.synchronize()
    times = {k: [] for k in fns}
    for r in range(rounds):
        order = ("unpatched", "patched") if r % 2 == 0 else ("patched", "unpatched")
        for k in order:
            times[k].append(_per_call_host_cost(fns[k], x, gs, iters=1000, repeats=1)["median_us"])
    diffs = sorted(p - u for p, u in zip(times["patched"], times["unpatched"]))
    return {
        "paired_diff_iqr_us": [diffs[len(diffs) // 4], diffs[3 * len(diffs) // 4]],
        "rounds": rounds,
        "unpatched_us": statistics.median(times["unpatched"]),
        "patched_us": statistics.median(times["patched"]),
        "median_paired_diff_us": statistics.median(diffs),
        "overhead_pct": 100.0 * statistics.median(diffs) / statistics.median(times["unpatched"]),
        "times_us": times,
    }


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
    variants = {"eager_block": lambda: block(x, weights, gs)}

    if name != "patched":
        result.update(_interleaved(variants))
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
                            if not with_gs and sf_vec == 16:
                                continue  # the kernel requires global_scale unless sf_use_ue8m0 (sf_vec 32 here)
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
    kinds: dict = {}
    for c in checks:
        if not c["ok"]:
            kinds[c["error"][:160]] = kinds.get(c["error"][:160], 0) + 1
    result["opcheck"] = {"cases": len(checks), "passed": sum(c["ok"] for c in checks), "failure_kinds": kinds, "failures": [c for c in checks if not c["ok"]][:10], "sample": checks[:3]}

    # The redirect's eager cost in isolation: the condition fp4_quantize evaluates first.
    import timeit

    module = sys.modules[flashinfer.fp4_quantize.__module__]
    n = 1_000_000
    check = timeit.timeit("_fp4patch_is_compiling()", globals=vars(module), number=n)
    empty = timeit.timeit("pass", number=n)
    result["redirect_check_ns"] = (check - empty) * 1e9 / n

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
            variants[label] = (lambda c: (lambda: c(x, weights, gs)))(compiled)
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
        variants["graph_replay"] = graph.replay
    except Exception as exc:  # noqa: BLE001
        result["errors"]["graph_capture"] = traceback.format_exception_only(exc)[-1].strip()
    result.update(_interleaved(variants))
    return result


def _interleaved(variants: dict, rounds: int = 15, iters: int = 100) -> dict:
    """Time every variant round by round (CUDA events, ``iters`` runs each), so that host noise
    hits all of them alike; report the median over rounds (us per run)."""
    import torch

    for fn in variants.values():
        for _ in range(10):
            fn()
    torch.cuda.synchronize()
    samples = {k: [] for k in variants}
    for _ in range(rounds):
        for key, fn in variants.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            torch.cuda.synchronize()
            samples[key].append(start.elapsed_time(end) * 1000.0 / iters)
    return {
        key: {"median_us": statistics.median(v), "min_us": min(v), "max_us": max(v), "rounds": rounds, "iters": iters}
        for key, v in samples.items()
    }


def orchestrate(args) -> int:
    here = os.path.abspath(__file__)
    results = {"date": time.strftime("%Y-%m-%d"), "block": f"{LAYERS} x [rms_norm -> fp4_quantize -> elementwise], M={M_DECODE}, K={K_DECODE}, bf16"}
    sites = {"unpatched": args.unpatched, "patched": args.patched}

    def child(mode: str, name: str) -> dict:
        site = sites[name]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH", "")])))
        done = subprocess.run([sys.executable, here, mode, name], capture_output=True, text=True, env=env)
        sys.stderr.write(done.stderr[-4000:])
        try:
            return json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"error": f"{mode} {name} exited {done.returncode}", "stderr_tail": done.stderr[-2000:]}

    for name in ("unpatched", "patched"):
        results[name] = child("phase", name)
    # Per-call cost, patched vs unpatched: fresh processes, interleaved, so drift hits both alike.
    rounds = {"unpatched": [], "patched": []}
    for _ in range(args.rounds):
        for name in ("unpatched", "patched"):
            r = child("percall", name)
            if "eager_fp4_quantize_call" in r:
                rounds[name].append(r["eager_fp4_quantize_call"]["median_us"])
    results["percall_rounds_us"] = rounds
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [args.unpatched, os.environ.get("PYTHONPATH", "")])))
    done = subprocess.run([sys.executable, here, "percall-ab", args.patched], capture_output=True, text=True, env=env)
    sys.stderr.write(done.stderr[-4000:])
    try:
        results["percall_ab"] = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        results["percall_ab"] = {"error": f"percall-ab exited {done.returncode}", "stderr_tail": done.stderr[-2000:]}
    p, u = results.get("patched", {}), results.get("unpatched", {})
    summary = {}
    try:
        pu, uu = statistics.median(rounds["patched"]), statistics.median(rounds["unpatched"])
        summary["eager_call_unpatched_us"] = uu
        summary["eager_call_patched_us"] = pu
        summary["per_call_overhead_pct"] = 100.0 * (pu / uu - 1.0)
        summary["redirect_check_ns"] = p.get("redirect_check_ns")
        ab = results.get("percall_ab", {})
        summary["same_process_ab"] = {k: ab.get(k) for k in ("unpatched_us", "patched_us", "median_paired_diff_us", "paired_diff_iqr_us", "overhead_pct")}
        if p.get("redirect_check_ns") and ab.get("unpatched_us"):
            summary["redirect_check_pct_of_call"] = 100.0 * p["redirect_check_ns"] / 1000.0 / ab["unpatched_us"]
        eager = p["eager_block"]["median_us"]
        summary["eager_block_us"] = eager
        for key in ("inductor", "reduce_overhead", "graph_replay"):
            if key in p:
                summary[f"{key}_us"] = p[key]["median_us"]
        for key in ("inductor", "reduce_overhead", "graph_replay"):
            if key in p:
                summary[f"speedup_{key}_vs_eager"] = eager / p[key]["median_us"]
        if "reduce_overhead" in p and "graph_replay" in p:
            summary["reduce_overhead_over_raw_graph"] = p["reduce_overhead"]["median_us"] / p["graph_replay"]["median_us"]
    except (KeyError, ZeroDivisionError, TypeError) as exc:
        summary["error"] = f"incomplete results: {exc!r}"
    summary["opcheck"] = f"{p.get('opcheck', {}).get('passed')}/{p.get('opcheck', {}).get('cases')}"
    summary["fullgraph_record"] = p.get("fullgraph_record")
    summary["errors"] = p.get("errors")
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
    o.add_argument("--rounds", type=int, default=5, help="interleaved per-call rounds per copy")
    for mode in ("phase", "percall"):
        ph = sub.add_parser(mode)
        ph.add_argument("name", choices=["unpatched", "patched"])
    ab = sub.add_parser("percall-ab")
    ab.add_argument("patched_site")
    ab.add_argument("--rounds", type=int, default=61)
    args = parser.parse_args()
    if args.command == "percall-ab":
        print(json.dumps(percall_ab(args.patched_site, args.rounds), default=str))
        return 0
    if args.command == "orchestrate":
        return orchestrate(args)
    print(json.dumps((phase if args.command == "phase" else percall)(args.name), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
