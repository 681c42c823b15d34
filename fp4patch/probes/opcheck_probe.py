#!/usr/bin/env python3
"""GPU probe for ``fp4patch verify --opcheck``: every patched op against the real kernel.

Standalone on purpose, like ``trace_probe.py``: run by path in the target interpreter
(``python opcheck_probe.py [--json] [--filter TEXT] [--skip FUNCTION ...]``), where fp4patch itself
may not be installed. It needs torch with a CUDA device and the patched FlashInfer that interpreter
imports.

For each FlashInfer function whose fullgraph spec is applied (its module holds
``_fp4patch_<function>_entry``, set when ``_fp4patch_<function>_ready()`` registers the op; the op is the
``OP`` that entry calls, ``fp4patch::<function>_<8 hex>``)
and each case of the function's grid below, on the current CUDA device:

1. the real op runs once; when the kernel itself refuses (e.g. ``mm_fp4`` on sm90: "does not support
   backend 'cutlass' with capability 90", a JIT build that needs files the machine lacks), the case is
   ``skipped`` with the kernel's own first line;
2. ``torch.library.opcheck(op, args, kwargs, test_utils=("test_schema", "test_faketensor"))`` — the
   schema (mutations declared, no aliasing) and the fake against the real outputs; with float8 inputs
   (``bmm_fp8``) the fake-tensor test only, since the schema test's before/after comparison has no
   float8 arithmetic (``"mul_cuda" not implemented for 'Float8_e4m3fn'``);
3. the fake's outputs under ``FakeTensorMode`` are compared with the real outputs' (shape, stride,
   dtype), printed for both.

Values are not compared: on Hopper (sm90) FlashInfer compiles the e2m1 conversion out, so FP4 outputs
differ from call to call there. Exit status: 0 when no case failed (skips allowed), 1 when one failed,
2 when the probe cannot run (no CUDA device, FlashInfer not importable, no patched op).
"""
from __future__ import annotations

import argparse
import inspect
import json
import sys
import traceback


# --------------------------------------------------------------------------- #
# Case grids, one per function: yield (name, kwargs) with the wrapper's parameter names. Keyword
# arguments the installed op's schema lacks are dropped (a release without that parameter).
# --------------------------------------------------------------------------- #
def _cases_fp4_quantize(torch, dev):
    gs = torch.tensor([448.0 * 6.0], device=dev, dtype=torch.float32)
    for m in (1, 8, 127, 129):
        for k in (64, 7168):
            for sf_vec in (16, 32):
                for layout in ("128x4", "8x4", "linear"):
                    for column_major in (False, True):
                        if column_major and m % sf_vec:
                            continue  # a column-major input is quantized along M
                        x = torch.randn(k, m, device=dev, dtype=torch.bfloat16).t() if column_major else torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                        yield (
                            f"M={m} K={k} sf_vec={sf_vec} {layout} {'col' if column_major else 'row'}",
                            dict(input=x, global_scale=gs if sf_vec == 16 else None, sf_vec_size=sf_vec, sf_use_ue8m0=sf_vec == 32,
                                 is_sf_swizzled_layout=layout != "linear", is_sf_8x4_layout=layout == "8x4"),
                        )


def _cases_nvfp4_batched_quantize(torch, dev):
    for b in (1, 4):
        for m in (1, 8, 127, 129):
            a = torch.randn(b, m, 256, device=dev, dtype=torch.bfloat16)
            yield f"B={b} M={m} K=256", dict(a=a, a_global_sf=torch.ones(1, device=dev, dtype=torch.float32), sf_vec_size=16)


def _cases_scaled_fp4_grouped_quantize(torch, dev):
    for b in (1, 4):
        for m in (1, 8, 127, 129):
            a = torch.randn(b, m, 256, device=dev, dtype=torch.bfloat16)
            mask = torch.full((b,), m, device=dev, dtype=torch.int32)
            yield f"B={b} M={m} K=256", dict(a=a, mask=mask, a_global_sf=torch.ones(b, device=dev, dtype=torch.float32))


def _cases_silu_and_mul_scaled_nvfp4_experts_quantize(torch, dev):
    for b in (1, 4):
        for m in (1, 8, 127, 129):
            a = torch.randn(b, m, 512, device=dev, dtype=torch.bfloat16)
            mask = torch.full((b,), m, device=dev, dtype=torch.int32)
            yield f"B={b} M={m} 2K=512", dict(a=a, mask=mask, a_global_sf=torch.ones(b, device=dev, dtype=torch.float32))


def _cases_mxfp8_quantize(torch, dev):
    for m in (1, 8, 127, 129):
        for swizzled in (True, False):
            x = torch.randn(m, 256, device=dev, dtype=torch.bfloat16)
            yield f"M={m} K=256 {'swizzled' if swizzled else 'linear'}", dict(input=x, is_sf_swizzled_layout=swizzled)
    # the host path (a CPU input: float32, 2-D): uint8 x_q of the input's shape and uint8 scale factors
    for m in (1, 129):
        for swizzled in (True, False):
            x = torch.randn(m, 256, dtype=torch.float32)
            yield f"CPU M={m} K=256 {'swizzled' if swizzled else 'linear'}", dict(input=x, is_sf_swizzled_layout=swizzled)


def _cases_bmm_fp8(torch, dev):
    for b in (1, 2):
        for m in (1, 8, 127, 129):
            a = torch.randn(b, m, 128, device=dev, dtype=torch.bfloat16).to(torch.float8_e4m3fn)
            w = torch.randn(b, 256, 128, device=dev, dtype=torch.bfloat16).to(torch.float8_e4m3fn).transpose(-2, -1)
            one = torch.tensor(1.0, device=dev, dtype=torch.float32)
            # the op writes into out (the compiled call allocates it as the wrapper does)
            out = torch.empty(b, m, 256, device=dev, dtype=torch.bfloat16)
            yield f"B={b} M={m} K=128 N=256", dict(A=a, B=w, A_scale=one, B_scale=one, dtype=torch.bfloat16, out=out)


def _cases_mm_fp4(torch, dev):
    fq = _flashinfer().fp4_quantize
    for m in (1, 8, 127, 129):
        a = torch.randn(m, 256, device=dev, dtype=torch.bfloat16)
        w = torch.randn(128, 256, device=dev, dtype=torch.bfloat16)
        gs = torch.tensor([1.0], device=dev, dtype=torch.float32)
        try:
            a_q, a_sf = fq(a, gs)
            w_q, w_sf = fq(w, gs)
        except Exception as exc:  # the quantizer's own refusal (0.7.x: SM100 or newer)
            yield f"M={m} K=256 N=128", exc
            continue
        yield f"M={m} K=256 N=128", dict(a=a_q, b=w_q.t(), a_descale=a_sf, b_descale=w_sf.t(), alpha=torch.tensor(1.0, device=dev),
                                         out_dtype=torch.bfloat16, out=torch.empty(m, 128, device=dev, dtype=torch.bfloat16))



def _cases_rmsnorm_quant(torch, dev):
    # FlashInfer 0.6.7+ (flashinfer/norm/__init__.py): writes FP8 RMSNorm(input) * weight / scale into out
    for m in (1, 8, 127, 129):
        for k in (256, 7168):
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            w = torch.randn(k, device=dev, dtype=torch.bfloat16)
            out = torch.empty(m, k, device=dev, dtype=torch.float8_e4m3fn)
            yield f"M={m} K={k}", dict(out=out, input=x, weight=w, scale=torch.ones(1, device=dev, dtype=torch.float32), eps=1e-6)


def _cases_fused_add_rmsnorm_quant(torch, dev):
    # FlashInfer 0.6.7+: residual += input in place, then out = FP8 RMSNorm(residual) * weight / scale
    for m in (1, 8, 127, 129):
        for k in (256, 7168):
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            residual = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            w = torch.randn(k, device=dev, dtype=torch.bfloat16)
            out = torch.empty(m, k, device=dev, dtype=torch.float8_e4m3fn)
            yield f"M={m} K={k}", dict(out=out, input=x, residual=residual, weight=w, scale=torch.tensor(1.0, device=dev), eps=1e-6)


def _cases_block_scale_interleave(torch, dev):
    # uint8 block scales (and bfloat16, accepted from 0.6.0) of [rows, cols] and [experts, rows, cols]: the op's flat
    # experts * round_up(rows, 128) * round_up(cols, 4) output. out= (0.7.2.post1+) never reaches the op (entry writes it).
    for rows in (1, 8, 127, 129):
        for cols in (6, 16, 448):
            yield f"rows={rows} cols={cols} uint8", {"unswizzled_sf": torch.randint(0, 256, (rows, cols), device=dev, dtype=torch.uint8)}
    yield "rows=129 cols=448 bfloat16", {"unswizzled_sf": torch.randn(129, 448, device=dev, dtype=torch.bfloat16)}
    for experts in (1, 4):
        shape = (experts, 129, 448)
        yield f"experts={experts} rows=129 cols=448 uint8", {"unswizzled_sf": torch.randint(0, 256, shape, device=dev, dtype=torch.uint8)}


CASES = {
    "fp4_quantize": _cases_fp4_quantize,
    "nvfp4_batched_quantize": _cases_nvfp4_batched_quantize,
    "scaled_fp4_grouped_quantize": _cases_scaled_fp4_grouped_quantize,
    "silu_and_mul_scaled_nvfp4_experts_quantize": _cases_silu_and_mul_scaled_nvfp4_experts_quantize,
    "mxfp8_quantize": _cases_mxfp8_quantize,
    "bmm_fp8": _cases_bmm_fp8,
    "mm_fp4": _cases_mm_fp4,
    "rmsnorm_quant": _cases_rmsnorm_quant,
    "fused_add_rmsnorm_quant": _cases_fused_add_rmsnorm_quant,
    "block_scale_interleave": _cases_block_scale_interleave,
}


def _flashinfer():
    import flashinfer

    return flashinfer


def _meta(t):
    return [list(t.shape), list(t.stride()), str(t.dtype)]


def _outputs(value, torch):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _outputs(v, torch)]
    return []


def _first_line(exc):
    text = str(exc).strip().splitlines()
    return "{}: {}".format(type(exc).__name__, text[0] if text else "")


def patched_op(function):
    """(module, OpOverload) of ``flashinfer.<function>``'s fp4patch op, or None when not patched."""
    flashinfer = _flashinfer()
    fn = getattr(flashinfer, function, None)
    if fn is None:
        return None
    module = sys.modules.get(getattr(inspect.unwrap(fn), "__module__", ""), None)
    ready = getattr(module, f"_fp4patch_{function}_ready", None)
    if ready is not None:  # the block registers its op on first need (fp4patch/ops/redirect.py), not at import
        ready()
    entry = getattr(module, f"_fp4patch_{function}_entry", None)
    if not entry:  # None: not patched; False: this torch cannot register it
        return None
    op = inspect.getclosurevars(inspect.unwrap(entry)).nonlocals.get("OP")
    return op


def _schema_defaults(op, function, given):
    """Values for the op's arguments a case leaves out that its schema declares without a default: the wrapper's own
    defaults (the rendered op declares its mutated parameters, and those before them, without one; see
    docs/op-source.md, ``MUTATES_ARGS``). Each is what the case's call of the wrapper would have used."""
    fn = getattr(_flashinfer(), function, None)
    try:
        defaults = {n: p.default for n, p in inspect.signature(inspect.unwrap(fn)).parameters.items() if p.default is not p.empty}
    except (TypeError, ValueError):
        return {}
    return {a.name: defaults[a.name] for a in op._schema.arguments if a.name not in given and not a.has_default_value() and a.name in defaults}


def check_function(function, torch, dev, name_filter=""):
    """Results of every case of ``function``: dicts with function, op, case, status, detail, real, fake."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = patched_op(function)
    if op is None:
        return []
    schema_names = {a.name for a in op._schema.arguments}
    results = []
    for name, kwargs in CASES[function](torch, dev):
        if name_filter and name_filter not in f"{function} {name}":
            continue
        row = {"function": function, "op": str(op._schema.name), "case": name, "status": "", "detail": "", "real": None, "fake": None}
        results.append(row)
        if isinstance(kwargs, Exception):
            row.update(status="skipped", detail=_first_line(kwargs))
            continue
        kwargs = {k: v for k, v in kwargs.items() if k in schema_names}
        kwargs = {**_schema_defaults(op, function, kwargs), **kwargs}
        try:
            real = op(**kwargs)
            torch.cuda.synchronize()
        except Exception as exc:  # the kernel's own refusal: this GPU cannot run the case
            row.update(status="skipped", detail=_first_line(exc))
            continue
        row["real"] = [_meta(t) for t in _outputs(real, torch)]
        # opcheck's schema test compares inputs before and after with arithmetic that float8 lacks
        # ("mul_cuda" not implemented for 'Float8_e4m3fn'): with float8 inputs only the fake-tensor test runs.
        has_fp8 = any(isinstance(v, torch.Tensor) and "float8" in str(v.dtype) for v in kwargs.values())
        tests = ("test_faketensor",) if has_fp8 else ("test_schema", "test_faketensor")
        row["opcheck_tests"] = list(tests)
        try:
            torch.library.opcheck(op, (), kwargs, test_utils=tests)
            with FakeTensorMode() as mode:
                fake_kwargs = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
                row["fake"] = [_meta(t) for t in _outputs(op(**fake_kwargs), torch)]
        except Exception as exc:
            row.update(status="failed", detail=_first_line(exc))
            continue
        if row["fake"] != row["real"]:
            row.update(status="failed", detail="fake output metadata differs from the real call's")
        else:
            row["status"] = "passed"
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description="GPU opcheck of fp4patch's ops")  # not __doc__: None under -OO
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--path", default="", help="import flashinfer from this site-packages directory")
    parser.add_argument("--filter", default="", help="only cases whose 'function case' contains this text")
    parser.add_argument("--skip", action="append", default=[], help="leave out a function (repeatable)")
    args = parser.parse_args(argv)
    if args.path:
        sys.path.insert(0, args.path)
    # --json: the JSON alone goes to stdout. FlashInfer's API logging (FLASHINFER_LOGLEVEL > 0, FLASHINFER_LOGDEST
    # default "stdout") binds a handler to sys.stdout at import and prints a banner: send it to stderr.
    out = sys.stdout
    if args.json:
        sys.stdout = sys.stderr
    try:
        import torch
    except Exception as exc:
        print("opcheck probe: cannot import torch: " + _first_line(exc), file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("opcheck probe: no CUDA device in this interpreter; verify --opcheck runs the real kernels", file=sys.stderr)
        return 2
    try:
        _flashinfer()
    except Exception as exc:
        print("opcheck probe: cannot import flashinfer: " + _first_line(exc), file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    results = []
    for function in CASES:
        if function in args.skip:
            continue
        try:
            results.extend(check_function(function, torch, dev, args.filter))
        except Exception as exc:  # a grid that cannot even be built: report, go on
            results.append({"function": function, "op": None, "case": "*", "status": "failed", "detail": _first_line(exc),
                            "traceback": traceback.format_exc()[-2000:]})
    if not results:
        print("opcheck probe: no patched op found; run fp4patch apply first", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results), file=out)
    else:
        for r in results:
            print("{:<44} {:<34} {:<8} {}".format(r["function"], r["case"], r["status"], r["detail"]))
    return 1 if any(r["status"] == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
