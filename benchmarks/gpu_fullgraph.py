#!/usr/bin/env python3
"""H200 benchmark of fp4patch's fullgraph specs on the part of the FP4 path that sm90 runs.

Run on the GPU machine (see docs/gpu-results.md); it drives several processes per FlashInfer copy:

    python benchmarks/gpu_fullgraph.py orchestrate --unpatched DIR --patched DIR --out FILE.json

where DIR are two site-packages directories holding the same flashinfer-python release, the second
already patched with ``fp4patch apply --site-packages DIR``. Each phase runs in its own interpreter so
that the unpatched and patched modules never meet, except in the same-process A/B of phase 4.

1. ``opcheck``: ``fp4patch/probes/opcheck_probe.py`` (what ``fp4patch verify --opcheck`` runs):
   ``torch.library.opcheck`` (schema and fake-tensor tests) of every patched op against the real
   kernel over its case grid, and fake vs real output metadata; a kernel that refuses sm90 is
   ``skipped`` with its own message.
2. A decode-like block of what sm90 runs (FlashInfer 0.6.0; 0.6.7+ adds the FP8 norm path: rmsnorm_quant ->
   bmm_fp8 and fused_add_rmsnorm_quant): per layer, rms_norm -> fp4_quantize,
   nvfp4_batched_quantize, scaled_fp4_grouped_quantize, silu_and_mul_scaled_nvfp4_experts_quantize,
   mxfp8_quantize -> bmm_fp8 (fp8 x fp8 -> bf16), elementwise ops consuming every output; M=8,
   K=7168, LAYERS layers. Compiled with ``fullgraph=True`` under a graph-recording backend (graphs and
   fp4patch op nodes), inductor and ``mode="reduce-overhead"``; the eager block captured with
   ``torch.cuda.graph`` and replayed. All variants timed interleaved (CUDA events).
3. The redirect's own check, timed alone.
4. Per patched function, the eager per-call host cost unpatched vs patched in ONE process: the
   patched module file is loaded beside the unpatched one (same package, so relative imports
   resolve) and both wrappers are called round by round, interleaved.

On sm90 FlashInfer compiles the e2m1 conversion out (``__CUDA_ARCH__ >= 1000`` guard), so FP4 values
are not deterministic there: only metadata (shape, stride, dtype), capture and time are compared.
Times are in microseconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
import timeit
import traceback

M_DECODE, K_DECODE, N_DECODE, LAYERS = 8, 7168, 1024, 2
REPEATS = 7
HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "..", "fp4patch", "probes", "opcheck_probe.py")

# The functions of the block, in call order; each is timed per call in phase 4.
FUNCTIONS = (
    "fp4_quantize",
    "nvfp4_batched_quantize",
    "scaled_fp4_grouped_quantize",
    "silu_and_mul_scaled_nvfp4_experts_quantize",
    "mxfp8_quantize",
    "bmm_fp8",
)
# The FP8 norm path (FlashInfer 0.6.7+, flashinfer/norm/__init__.py; not exported before): in the block
# where the release has it, timed per call as the others.
FP8_NORM = ("rmsnorm_quant", "fused_add_rmsnorm_quant")


def functions(fi):
    """The block's functions on this release: :data:`FUNCTIONS`, then those of :data:`FP8_NORM` it exports."""
    return FUNCTIONS + tuple(name for name in FP8_NORM if hasattr(fi, name))


def make_inputs(torch):
    """The block's inputs on the GPU (seeded)."""
    torch.manual_seed(0)
    dev = "cuda"
    return {
        "x": torch.randn(M_DECODE, K_DECODE, device=dev, dtype=torch.bfloat16),
        "norm": [torch.randn(K_DECODE, device=dev, dtype=torch.bfloat16) for _ in range(LAYERS)],
        "gs": torch.tensor([448.0 * 6.0], device=dev, dtype=torch.float32),
        "gs1": torch.ones(1, device=dev, dtype=torch.float32),
        "mask": torch.full((1,), M_DECODE, device=dev, dtype=torch.int32),
        # bmm_fp8 wants B column-major: (1, K, N) as a transposed (1, N, K)
        "w_fp8": [torch.randn(1, N_DECODE, K_DECODE, device=dev, dtype=torch.bfloat16).to(torch.float8_e4m3fn).transpose(-2, -1) for _ in range(LAYERS)],
        "one": torch.tensor(1.0, device=dev, dtype=torch.float32),
    }


def calls(fi, inp):
    """One representative call per function (name -> zero-argument callable), for phase 4."""
    h = inp["x"]
    hb = h.view(1, M_DECODE, K_DECODE)
    h2 = hb.repeat(1, 1, 2)
    fp8 = fi.mxfp8_quantize(h)[0].view(1, M_DECODE, K_DECODE)
    import torch

    out8 = torch.empty(M_DECODE, K_DECODE, device=h.device, dtype=torch.float8_e4m3fn)
    residual = h.clone()
    return {
        "rmsnorm_quant": lambda f: f(out8, h, inp["norm"][0], inp["one"]),
        "fused_add_rmsnorm_quant": lambda f: f(out8, h, residual, inp["norm"][0], inp["one"]),
        "fp4_quantize": lambda f: f(h, inp["gs"]),
        "nvfp4_batched_quantize": lambda f: f(hb, inp["gs"]),
        "scaled_fp4_grouped_quantize": lambda f: f(hb, inp["mask"], inp["gs1"]),
        "silu_and_mul_scaled_nvfp4_experts_quantize": lambda f: f(h2, inp["mask"], inp["gs1"]),
        "mxfp8_quantize": lambda f: f(h),
        "bmm_fp8": lambda f: f(fp8, inp["w_fp8"][0], inp["one"], inp["one"], torch_bf16()),
    }


def torch_bf16():
    import torch

    return torch.bfloat16


def make_block(fi, inp):
    """The block as a module: weights and scales are buffers, so CUDA-graph capture
    (``mode="reduce-overhead"``) treats them as static, as it treats a model's parameters."""
    import torch

    fp8_norm = all(hasattr(fi, name) for name in FP8_NORM)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for i, (w, wq) in enumerate(zip(inp["norm"], inp["w_fp8"])):
                self.register_buffer(f"norm{i}", w)
                self.register_buffer(f"w_fp8{i}", wq)
            for name in ("gs", "gs1", "mask", "one"):
                self.register_buffer(name, inp[name])

        def forward(self, x):
            for i in range(LAYERS):
                w, wq = getattr(self, f"norm{i}"), getattr(self, f"w_fp8{i}")
                h = torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)
                hb = h.view(1, h.shape[0], h.shape[1])
                q1, s1 = fi.fp4_quantize(h, self.gs)
                q2, s2 = fi.nvfp4_batched_quantize(hb, self.gs)
                q3, s3 = fi.scaled_fp4_grouped_quantize(hb, self.mask, self.gs1)
                q4, s4 = fi.silu_and_mul_scaled_nvfp4_experts_quantize(torch.cat([hb, hb], dim=-1), self.mask, self.gs1)
                q5, s5 = fi.mxfp8_quantize(h)
                y = fi.bmm_fp8(q5.view(1, h.shape[0], h.shape[1]), wq, self.one, self.one, torch.bfloat16)
                # elementwise ops consuming every output, so nothing is dead code
                x = x * 0.5 + q1.to(x.dtype).repeat_interleave(2, dim=-1) * 1e-3
                side = sum(t.to(torch.float32).mean() for t in (s1, s2, s3, s4, s5, q2, q3, q4))
                x = torch.nn.functional.silu(x) + side.to(x.dtype) * 1e-3
                x = x + y.view(h.shape[0], -1).repeat(1, x.shape[1] // y.shape[-1]) * 1e-3
                if fp8_norm:  # FP8 forward path: RMSNorm straight to FP8 -> bmm_fp8; fused residual add + RMSNorm -> FP8
                    n8 = torch.empty(x.shape, device=x.device, dtype=torch.float8_e4m3fn)
                    fi.rmsnorm_quant(n8, x, w, self.one)
                    y8 = fi.bmm_fp8(n8.view(1, x.shape[0], x.shape[1]), wq, self.one, self.one, torch.bfloat16)
                    residual = x * 1.0  # a fresh tensor: the op adds h into it in place
                    r8 = torch.empty(x.shape, device=x.device, dtype=torch.float8_e4m3fn)
                    fi.fused_add_rmsnorm_quant(r8, h, residual, w, self.one)
                    x = x + y8.view(x.shape[0], -1).repeat(1, x.shape[1] // y8.shape[-1]) * 1e-3
                    x = x + residual * 1e-3 + r8.to(x.dtype) * 1e-3
            return x

    return Block()


def _per_call_host_cost(call, fn, iters, repeats=1):
    """Host time per eager call (us): a loop of calls, synchronised at the end."""
    import torch

    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            call(fn)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6 / iters)
    return statistics.median(times)


def _load_beside(unpatched, site: str, relative: str, tag: str):
    """``site``'s copy of ``relative`` loaded as ``<package>._fp4patch_<tag>_<stem>`` beside the
    imported module ``unpatched`` (same package, so its relative imports resolve)."""
    stem = os.path.splitext(os.path.basename(relative))[0]
    label = f"{unpatched.__package__}._fp4patch_{tag}_{stem}"
    module = sys.modules.get(label)
    if module is None:
        # not a package, also for a package's __init__.py (flashinfer/norm/__init__.py, 0.6.7+): its relative
        # imports then resolve from the package, as the imported module's do
        spec = importlib.util.spec_from_file_location(label, os.path.join(site, relative), submodule_search_locations=None)
        module = importlib.util.module_from_spec(spec)
        sys.modules[label] = module
        spec.loader.exec_module(module)
    return module


#: ``--checks``: the patched module loaded again with what its redirect check reads swapped, to split the
#: overhead into the check and the rest. The check is ``_fp4patch_<function>_compiler._is_compiling_flag``
#: (an attribute of ``torch.compiler``, then ``_fp4patch_<function>_tracing()`` only while it is True):
#: ``check_class`` reads the same attribute of a class instead (``_fp4patch_<function>_never_compiling``),
#: ``check_is_compiling`` reads it through a property calling ``torch.compiler.is_compiling()`` (what
#: torch < 2.5 pays, ``_fp4patch_<function>_flag_from_is_compiling``)
CHECK_VARIANTS = {
    "check_class": lambda module, name: getattr(module, f"_fp4patch_{name}_never_compiling"),
    "check_is_compiling": lambda module, name: getattr(module, f"_fp4patch_{name}_flag_from_is_compiling")(),
}


def percall_ab(patched_site: str, rounds: int = 61, iters: int = 300, control_site: str | None = None, checks: bool = False) -> dict:
    """Per function: eager per-call host cost (us), unpatched vs patched, in ONE process, interleaved.

    The unpatched flashinfer is imported normally; each patched module file from ``patched_site`` is
    loaded beside its unpatched module (:func:`_load_beside`). All arms run the same kernel; only the
    Python wrapper differs. With ``control_site`` (a pristine copy of the same release), its module
    is loaded the same way as a third arm, ``control``: an A/A comparison of two unpatched wrappers,
    one imported and one loaded beside it. The overhead is read against it (``overhead_pct``:
    median paired patched - control difference over the unpatched median), so what loading a second
    copy of a module costs by itself (code placement, a second JIT-module handle) is not charged to
    the patch; ``overhead_vs_imported_pct`` keeps the plain patched - unpatched figure. Arms rotate
    their order every round. With ``checks``, the arms of :data:`CHECK_VARIANTS` too (each a
    patched copy whose ``_fp4patch_<function>_compiler`` is swapped), read against ``control``.
    """
    import inspect

    import torch
    import flashinfer

    inp = make_inputs(torch)
    table = calls(flashinfer, inp)
    root = os.path.dirname(os.path.dirname(flashinfer.__file__))
    out = {}
    for name in functions(flashinfer):
        unpatched = sys.modules[inspect.unwrap(getattr(flashinfer, name)).__module__]
        relative = os.path.relpath(unpatched.__file__, root)
        patched = _load_beside(unpatched, patched_site, relative, "ab")
        if not hasattr(patched, f"_fp4patch_{name}_tracing"):  # the redirect's second test (fp4patch/ops/redirect.py)
            out[name] = {"error": "not patched in " + relative}
            continue
        fns = {"unpatched": getattr(unpatched, name), "patched": getattr(patched, name)}
        if control_site:
            fns["control"] = getattr(_load_beside(unpatched, control_site, relative, "aa"), name)
        if checks:
            for variant, make in CHECK_VARIANTS.items():
                copy = _load_beside(unpatched, patched_site, relative, variant)
                setattr(copy, f"_fp4patch_{name}_compiler", make(copy, name))
                fns[variant] = getattr(copy, name)
        call = table[name]
        for fn in fns.values():
            for _ in range(200):
                call(fn)
        torch.cuda.synchronize()
        times = {k: [] for k in fns}
        arms = list(fns)
        for r in range(rounds):
            for k in arms[r % len(arms) :] + arms[: r % len(arms)]:
                times[k].append(_per_call_host_cost(call, fns[k], iters))

        def paired(a: str, b: str, times: dict = times) -> tuple[float, list[float]]:
            diffs = sorted(x - y for x, y in zip(times[a], times[b]))
            return statistics.median(diffs), [diffs[len(diffs) // 4], diffs[3 * len(diffs) // 4]]

        base = statistics.median(times["unpatched"])
        diff, iqr = paired("patched", "unpatched")
        out[name] = {
            "rounds": rounds,
            "iters": iters,
            **{f"{k}_us": statistics.median(v) for k, v in times.items()},
            "median_paired_diff_us": diff,
            "paired_diff_iqr_us": iqr,
            "overhead_vs_imported_pct": 100.0 * diff / base,
            "overhead_pct": 100.0 * diff / base,
        }
        if "control" in times:
            diff_c, iqr_c = paired("patched", "control")
            aa, aa_iqr = paired("control", "unpatched")
            out[name].update(
                median_paired_diff_vs_control_us=diff_c,
                paired_diff_vs_control_iqr_us=iqr_c,
                aa_control_minus_imported_us=aa,
                aa_iqr_us=aa_iqr,
                overhead_pct=100.0 * diff_c / base,
            )
            for variant in CHECK_VARIANTS:
                if variant in times:
                    d, q = paired(variant, "control")
                    out[name][f"{variant}_minus_control_us"] = d
                    out[name][f"{variant}_minus_control_iqr_us"] = q
    return out


def opcheck() -> dict:
    spec = importlib.util.spec_from_file_location("opcheck_probe", PROBE)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    import torch

    results = []
    for function in probe.CASES:
        try:
            results.extend(probe.check_function(function, torch, torch.device("cuda")))
        except Exception as exc:  # noqa: BLE001 - reported
            results.append({"function": function, "case": "*", "status": "failed", "detail": traceback.format_exception_only(exc)[-1].strip()})
    summary: dict = {}
    for r in results:
        s = summary.setdefault(r["function"], {"passed": 0, "failed": 0, "skipped": 0})
        s[r["status"]] += 1
    return {"by_function": summary, "not_passed": [r for r in results if r["status"] != "passed"][:40], "cases": len(results)}


def phase(name: str) -> dict:
    import inspect

    import torch
    import flashinfer

    result = {
        "phase": name,
        "flashinfer": flashinfer.__version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
        "errors": {},
    }
    inp = make_inputs(torch)
    args = (inp["x"],)
    block = make_block(flashinfer, inp)
    t0 = time.perf_counter()
    block(*args)  # first calls: JIT build/load of every module
    torch.cuda.synchronize()
    result["first_block_s"] = time.perf_counter() - t0
    variants = {"eager_block": lambda: block(*args)}
    if name == "patched":
        if not os.environ.get("FP4PATCH_BENCH_SKIP_OPCHECK"):
            result["opcheck"] = opcheck()
        checks = {}
        for fn_name in functions(flashinfer):
            module = sys.modules.get(inspect.unwrap(getattr(flashinfer, fn_name)).__module__)
            if hasattr(module, f"_fp4patch_{fn_name}_tracing"):  # the redirect's condition, as it stands in the wrapper
                n = 1_000_000
                condition = f"_fp4patch_{fn_name}_compiler._is_compiling_flag and _fp4patch_{fn_name}_tracing()"
                checks[fn_name] = (timeit.timeit(condition, number=n, globals=vars(module)) - timeit.timeit("pass", number=n)) * 1e9 / n
        result["redirect_check_ns"] = checks

        graphs = []

        def record(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        try:
            torch._dynamo.reset()
            torch.compile(block, fullgraph=True, backend=record)(*args)
            ops = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function" and "fp4patch" in str(n.target)]
            result["fullgraph_record"] = {"graphs": len(graphs), "fp4patch_op_nodes": len(ops), "ops": sorted(set(ops))}
        except Exception as exc:  # noqa: BLE001
            result["errors"]["fullgraph_record"] = traceback.format_exception_only(exc)[-1].strip()
        for label, kwargs in (("inductor", {}), ("reduce_overhead", {"mode": "reduce-overhead"})):
            try:
                torch._dynamo.reset()
                compiled = torch.compile(block, fullgraph=True, **kwargs)
                for _ in range(5):
                    out = compiled(*args)
                torch.cuda.synchronize()
                eager_out = block(*args)
                result[f"{label}_output_meta_equal"] = (out.shape, out.stride(), out.dtype) == (eager_out.shape, eager_out.stride(), eager_out.dtype)
                variants[label] = (lambda c: (lambda: c(*args)))(compiled)
            except Exception as exc:  # noqa: BLE001
                result["errors"][label] = traceback.format_exception_only(exc)[-1].strip()
    try:
        static = (inp["x"].clone(),)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                block(*static)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = block(*static)
        graph.replay()
        torch.cuda.synchronize()
        result["graph_capture"] = {"ok": True, "out": [list(static_out.shape), str(static_out.dtype)]}
        variants["graph_replay"] = graph.replay
    except Exception as exc:  # noqa: BLE001
        result["errors"]["graph_capture"] = traceback.format_exception_only(exc)[-1].strip()
    result.update(_interleaved(variants))
    return result


def _interleaved(variants: dict, rounds: int = 15, iters: int = 50) -> dict:
    """Time every variant round by round (CUDA events, ``iters`` runs each), so that host noise
    hits all of them alike; report the median over rounds (us per run)."""
    import torch

    for fn in variants.values():
        for _ in range(5):
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
    return {key: {"median_us": statistics.median(v), "min_us": min(v), "max_us": max(v), "rounds": rounds, "iters": iters} for key, v in samples.items()}


def orchestrate(args) -> int:
    """Run the phases, each in its own interpreter, writing ``args.out`` after each one (a phase cut
    short by the deadline leaves the others' results): the per-call A/B first (the number most
    sensitive to the redirect), then the patched block (opcheck unless ``--skip-opcheck``, fullgraph,
    inductor, reduce-overhead, CUDA-graph replay), then the unpatched block. ``--deadline`` seconds
    bound the whole: each child gets what is left (at least 30 s), then is killed and reported."""
    here = os.path.abspath(__file__)
    started = time.monotonic()
    results = {"date": time.strftime("%Y-%m-%d"), "block": f"{LAYERS} x [rms_norm -> {', '.join(FUNCTIONS)} -> elementwise; where the release has them, {' -> bmm_fp8, '.join(FP8_NORM)}], M={M_DECODE}, K={K_DECODE}, N={N_DECODE}, bf16"}
    sites = {"unpatched": args.unpatched, "patched": args.patched}

    def child(argv, site, extra_env=None):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH", "")])), **(extra_env or {}))
        left = max(30.0, args.deadline - (time.monotonic() - started)) if args.deadline else None
        try:
            done = subprocess.run([sys.executable, here, *argv], capture_output=True, text=True, env=env, check=False, timeout=left)
        except subprocess.TimeoutExpired as exc:
            return {"error": f"{' '.join(argv)}: cut at the deadline after {left:.0f} s", "stderr_tail": (exc.stderr or b"")[-3000:].decode(errors="replace") if isinstance(exc.stderr, bytes) else str(exc.stderr)[-3000:]}
        sys.stderr.write(done.stderr[-4000:])
        try:
            return json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"error": f"{' '.join(argv)} exited {done.returncode}", "stderr_tail": done.stderr[-3000:]}

    def write():
        p = results.get("patched", {})
        summary: dict = {"errors": p.get("errors"), "fullgraph_record": p.get("fullgraph_record"), "opcheck": (p.get("opcheck") or {}).get("by_function")}
        try:
            eager = p["eager_block"]["median_us"]
            summary["eager_block_us"] = eager
            for key in ("inductor", "reduce_overhead", "graph_replay"):
                if key in p:
                    summary[f"{key}_us"] = p[key]["median_us"]
                    summary[f"speedup_{key}_vs_eager"] = eager / p[key]["median_us"]
            if "reduce_overhead" in p and "graph_replay" in p:
                summary["reduce_overhead_over_raw_graph"] = p["reduce_overhead"]["median_us"] / p["graph_replay"]["median_us"]
            summary["eager_block_unpatched_us"] = results["unpatched"]["eager_block"]["median_us"]
        except (KeyError, ZeroDivisionError, TypeError) as exc:
            summary["error"] = f"incomplete results: {exc!r}"
        summary["per_call_overhead_pct"] = {k: v.get("overhead_pct") for k, v in results.get("percall_ab", {}).items() if isinstance(v, dict)}
        summary["redirect_check_ns"] = p.get("redirect_check_ns")
        summary["elapsed_s"] = round(time.monotonic() - started, 1)
        results["summary"] = summary
        with open(args.out, "w") as handle:
            json.dump(results, handle, indent=2, default=str)
        return summary

    percall = ["percall-ab", args.patched, "--rounds", str(args.rounds), "--control", args.unpatched]
    results["percall_ab"] = child(percall + (["--checks"] if args.checks else []), args.unpatched)
    write()
    for name in ("patched", "unpatched"):
        results[name] = child(["phase", name], sites[name], {"FP4PATCH_BENCH_SKIP_OPCHECK": "1"} if args.skip_opcheck else None)
        write()
    print(json.dumps(write(), indent=2, default=str))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    o = sub.add_parser("orchestrate")
    o.add_argument("--unpatched", required=True)
    o.add_argument("--patched", required=True)
    o.add_argument("--out", required=True)
    o.add_argument("--rounds", type=int, default=61, help="interleaved per-call rounds per function")
    o.add_argument("--deadline", type=float, default=0, help="seconds for the whole (0: none); each phase gets what is left")
    o.add_argument("--skip-opcheck", action="store_true", help="leave the opcheck grid out of the patched phase")
    o.add_argument("--checks", action="store_true", help="per-call: also the arms with the redirect check swapped")
    ph = sub.add_parser("phase")
    ph.add_argument("name", choices=["unpatched", "patched"])
    ab = sub.add_parser("percall-ab")
    ab.add_argument("patched_site")
    ab.add_argument("--rounds", type=int, default=61)
    ab.add_argument("--iters", type=int, default=300, help="calls per timed loop")
    ab.add_argument("--control", help="a pristine site-packages of the same release: the A/A arm")
    ab.add_argument("--checks", action="store_true", help="also the patched copies with the redirect check swapped (CHECK_VARIANTS)")
    args = parser.parse_args()
    if args.command == "percall-ab":
        print(json.dumps(percall_ab(args.patched_site, args.rounds, args.iters, args.control, args.checks), default=str))
        return 0
    if args.command == "orchestrate":
        return orchestrate(args)
    print(json.dumps(phase(args.name), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
