#!/usr/bin/env python3
"""CPU trace probe: does ``flashinfer.fp4_quantize`` compile under ``torch.compile(fullgraph=True)``?

Standalone on purpose: it is run by path in the target interpreter
(``python trace_probe.py [--json]``), where fp4patch itself may not be installed.
It needs only the standard library, torch (a CPU build is enough) and the
flashinfer that interpreter imports.

How it works: ``torch.cuda.get_device_capability`` / ``get_device_properties``
are stubbed to report an SM100 device, flashinfer is imported, and for each case
a small function calling ``flashinfer.fp4_quantize`` is compiled with
``fullgraph=True`` and a backend that only records the FX graph, on fake CUDA
tensors (``FakeTensorMode``: no memory, no kernels). Per case it reports the
number of graphs, the graph breaks, the custom-op call nodes in the graph and
whether the traced outputs' (shape, stride, dtype) equal the layout formula
computed here, independently of any fake implementation. A Dynamo failure is
reported by the first line of its message, verbatim.

``--path DIR`` puts DIR first on ``sys.path`` (a site-packages to trace instead of
the interpreter's own; unlike ``PYTHONPATH`` this also works under ``python -I``)
and refuses a flashinfer imported from elsewhere. ``--expect DIR`` refuses a flashinfer imported from
anywhere but DIR without changing the path (``--python``: the interpreter's own site-packages, where fp4patch
read it). Runs under ``-O``/``-OO``.

Exit status: 0 when every case passes, 1 otherwise, 2 when flashinfer cannot
be imported (or not from ``--path``/``--expect``), 3 when the environment disables
torch.compile (``TORCH_COMPILE_DISABLE=1``, ``TORCHDYNAMO_DISABLE=1``): the
message names the variable.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import traceback

# fp4patch's op for fp4_quantize is named fp4patch::fp4_quantize_<8 hex>: the suffix is a
# fingerprint of its schema, fake and release data (fp4patch/ops/render.py).
EXPECTED_OP = re.compile(r"fp4patch::fp4_quantize_[0-9a-f]{8}")
#: Environment variables with which torch turns torch.compile into a no-op (torch 2.x:
#: ``torch/_dynamo/config.py`` reads TORCH_COMPILE_DISABLE, ``torch/_dynamo/eval_frame.py`` TORCHDYNAMO_DISABLE).
DYNAMO_DISABLING_VARIABLES = ("TORCH_COMPILE_DISABLE", "TORCHDYNAMO_DISABLE")


# --------------------------------------------------------------------------- #
# Layout formula (what fp4_quantize returns on a real GPU), kept independent
# from any fake: derived from the Python wrapper of each FlashInfer era.
# --------------------------------------------------------------------------- #
def _round_up(x, y):
    return (x + y - 1) // y * y


def _contiguous_strides(shape):
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc = acc * d
    return tuple(reversed(strides))


def _sf_reshape_uses_padded_columns(fi_version):
    """0.6.8+ reshapes swizzled sf to (-1, round_up(K/sf_vec, 4)); before, (-1, K/sf_vec)."""
    try:
        parts = fi_version.split("+")[0].split(".")
        nums = tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in parts[:3])
    except Exception:  # pragma: no cover - odd version string
        return True
    return nums >= (0, 6, 8)


def expected_layout(shape, column_major, k_sf_vec, layout, padded_columns):
    """(x_q, sf) metadata as ((shape, stride, dtype), (shape, stride, dtype)).

    ``shape`` is the logical input shape (..., M, K) as passed to fp4_quantize.
    """
    shape = list(shape)
    if column_major:  # the wrapper transposes, quantizes, transposes back
        shape[-2], shape[-1] = shape[-1], shape[-2]
    k = shape[-1]
    m = 1
    for d in shape[:-1]:
        m = m * d
    cols = k // k_sf_vec
    if layout == "linear":
        sf_shape = [m, cols]
    else:
        row = 128 if layout == "128x4" else 8
        numel = _round_up(m, row) * _round_up(cols, 4)
        sf_cols = _round_up(cols, 4) if padded_columns else cols
        sf_shape = [numel // sf_cols, sf_cols]
    q_shape = shape[:-1] + [k // 2]
    q_stride = list(_contiguous_strides(q_shape))
    sf_stride = list(_contiguous_strides(sf_shape))
    if column_major:
        for lst in (q_shape, q_stride, sf_shape, sf_stride):
            lst[-2], lst[-1] = lst[-1], lst[-2]
    return (
        (tuple(q_shape), tuple(q_stride), "torch.uint8"),
        (tuple(sf_shape), tuple(sf_stride), "torch.uint8"),
    )


# --------------------------------------------------------------------------- #
# Cases
# --------------------------------------------------------------------------- #
def build_cases():
    """Each value of every axis is covered; not the full cartesian product."""
    cases = []

    def add(m, k, sf_vec=16, layout="128x4", column_major=False, global_scale=True, dynamic=False):
        name = "M={}{} K={} sf_vec={} {} {} {}".format(
            m,
            "(dyn)" if dynamic else "",
            k,
            sf_vec,
            layout,
            "col-major" if column_major else "row-major",
            "gs" if global_scale else "no-gs",
        )
        cases.append(
            dict(
                name=name,
                m=m,
                k=k,
                sf_vec_size=sf_vec,
                layout=layout,
                column_major=column_major,
                global_scale=global_scale,
                dynamic=dynamic,
            )
        )

    # Column-major input is quantized along M (the wrapper transposes it), so M must be a
    # multiple of sf_vec_size there; a 1-row transpose would also count as row-major.
    for m in (1, 127, 128, 129):
        for k in (64, 7168):
            add(m, k)
    for layout in ("128x4", "8x4", "linear"):
        for sf_vec in (16, 32):
            add(129, 64, sf_vec=sf_vec, layout=layout, global_scale=sf_vec == 16)
            add(128, 7168, sf_vec=sf_vec, layout=layout, column_major=True, global_scale=False)
        add(256, 64, layout=layout, column_major=True)
        add(127, 7168, sf_vec=32, layout=layout, global_scale=False)
        add(1, 7168, layout=layout)
        add(129, 7168, layout=layout, dynamic=True)
        add(256, 64, sf_vec=32, layout=layout, column_major=True, dynamic=True, global_scale=False)
    seen = set()
    unique = []
    for c in cases:
        if c["name"] not in seen:
            seen.add(c["name"])
            unique.append(c)
    cases = unique
    return cases


# --------------------------------------------------------------------------- #
# Running one case
# --------------------------------------------------------------------------- #
def _install_device_stubs(torch):
    torch.cuda.get_device_capability = lambda device=None: (10, 0)
    props_type = collections.namedtuple(
        "_ProbeDeviceProperties", "major minor name multi_processor_count total_memory"
    )
    props = props_type(10, 0, "fp4patch-probe-sm100", 148, 1 << 37)
    torch.cuda.get_device_properties = lambda device=None: props


def _meta(t):
    return (tuple(t.shape), tuple(t.stride()), str(t.dtype))


def _same_dim(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    try:
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        if statically_known_true(a == b):
            return True
    except Exception:
        pass
    # Not provably equal without the guards Dynamo installed (e.g. M % sf_vec_size == 0 for a
    # column-major input): compare at sample sizes that satisfy any such guard.
    try:
        import sympy

        ea = a.node.expr if hasattr(a, "node") else sympy.Integer(a)
        eb = b.node.expr if hasattr(b, "node") else sympy.Integer(b)
        syms = ea.free_symbols | eb.free_symbols
        for val in (256, 512, 1024, 4096, 8192):
            sub = {sym: val for sym in syms}
            if sympy.simplify(ea.subs(sub) - eb.subs(sub)) != 0:
                return False
        return True
    except Exception:
        return str(a) == str(b)


def _same_meta(traced, expected):
    if traced is None or len(traced) != len(expected):
        return False
    for (ts, tst, tdt), (es, est, edt) in zip(traced, expected):
        if tdt != edt or len(ts) != len(es) or len(tst) != len(est):
            return False
        if not all(_same_dim(a, b) for a, b in zip(ts, es)):
            return False
        if not all(_same_dim(a, b) for a, b in zip(tst, est)):
            return False
    return True


def _show(metas):
    if metas is None:
        return None
    return [[[str(d) if not isinstance(d, int) else d for d in shape],
             [str(d) if not isinstance(d, int) else d for d in stride], dt]
            for shape, stride, dt in metas]


def _custom_op_nodes(gm):
    """call_function nodes whose target is a non-aten operator, as 'ns::name'."""
    import torch

    found = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        tgt = node.target
        if isinstance(tgt, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            name = tgt._schema.name if isinstance(tgt, torch._ops.OpOverload) else tgt._qualified_op_name
            ns = name.split("::")[0]
            if ns not in ("aten", "prim", "prims"):
                found.append(name)
        elif getattr(tgt, "__module__", "") and "flashinfer" in str(getattr(tgt, "__module__", "")):
            found.append("python:" + getattr(tgt, "__qualname__", repr(tgt)))
    return found


def root_cause(exc):
    """``(text, location)`` of the innermost exception behind ``exc`` (``__cause__``, else ``__context__``, even
    where Dynamo suppressed it: a ``TorchRuntimeError`` "RuntimeError when making fake tensor call" hides the
    fake's or torch's own error there), or ``(None, None)`` when ``exc`` is its own cause. ``text`` is
    ``"Type: first line"``, ``location`` ``path:line`` of its innermost frame (the part after ``site-packages/``)."""
    seen, inner = {id(exc)}, exc
    while True:
        nxt = inner.__cause__ or inner.__context__
        if nxt is None or id(nxt) in seen:
            break
        seen.add(id(nxt))
        inner = nxt
    if inner is exc:
        return None, None
    lines = str(inner).strip().splitlines()
    frames = traceback.extract_tb(inner.__traceback__) if inner.__traceback__ is not None else []
    location = None
    if frames:
        filename = frames[-1].filename.replace(os.sep, "/")
        location = "{}:{}".format(filename.split("site-packages/")[-1], frames[-1].lineno)
    return "{}: {}".format(type(inner).__name__, lines[0][:300] if lines else ""), location


def run_case(case, torch, flashinfer, padded_columns):
    import torch._dynamo
    from torch._subclasses.fake_tensor import FakeTensorMode

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs = []
    breaks = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    kwargs = dict(sf_vec_size=case["sf_vec_size"])
    if case["layout"] == "linear":
        kwargs["is_sf_swizzled_layout"] = False
    else:
        kwargs["is_sf_swizzled_layout"] = True
        if case["layout"] == "8x4":
            kwargs["is_sf_8x4_layout"] = True
    if case["sf_vec_size"] == 32:
        kwargs["sf_use_ue8m0"] = True

    use_gs = case["global_scale"]

    def f(x, gs):
        if use_gs:
            return flashinfer.fp4_quantize(x, gs, **kwargs)
        return flashinfer.fp4_quantize(x, **kwargs)

    m, k = case["m"], case["k"]
    result = dict(case)
    result.update(graphs=None, graph_breaks=None, custom_ops=None, op_node_ok=False,
                  layout_ok=False, expected=None, traced=None, error=None, error_explanation=None, root_cause=None, root_location=None)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            if case["column_major"]:
                x = torch.empty(k, m, dtype=torch.bfloat16, device="cuda").t()
            else:
                x = torch.empty(m, k, dtype=torch.bfloat16, device="cuda")
            if case["dynamic"]:
                torch._dynamo.mark_dynamic(x, 0)
            gs = torch.ones(1, dtype=torch.float32, device="cuda")
            compiled = torch.compile(f, fullgraph=True, backend=record, dynamic=False if not case["dynamic"] else None)
            compiled(x, gs)
    except Exception as e:  # Dynamo / fake failures: first line verbatim
        msg = str(e).strip().splitlines()
        result["error"] = "{}: {}".format(type(e).__name__, msg[0] if msg else "")
        expl = [ln.strip() for ln in msg if ln.strip().startswith("Explanation:")]
        result["error_explanation"] = expl[0] if expl else None
        result["root_cause"], result["root_location"] = root_cause(e)
        result["graphs"] = len(graphs)
        return result

    try:
        counters = torch._dynamo.utils.counters
        breaks = sum(counters["graph_break"].values())
    except Exception:
        breaks = None
    result["graphs"] = len(graphs)
    result["graph_breaks"] = breaks
    ops = []
    for gm in graphs:
        ops.extend(_custom_op_nodes(gm))
    result["custom_ops"] = ops
    result["op_node_ok"] = len(ops) == 1 and EXPECTED_OP.fullmatch(ops[0]) is not None

    traced = None
    m_dim = m
    if len(graphs) == 1:
        nodes = list(graphs[0].graph.nodes)
        for n in nodes:  # the symbolic M of a dynamic case, from the traced input
            ev = n.meta.get("example_value") if n.op == "placeholder" else None
            if ev is not None and getattr(ev, "dtype", None) == torch.bfloat16 and ev.dim() == 2:
                m_dim = ev.shape[0]
                break
        outs = [n for n in nodes if n.op == "output"]
        vals = outs[0].args[0] if outs else None
        if isinstance(vals, (tuple, list)) and len(vals) == 1 and isinstance(vals[0], (tuple, list)):
            vals = vals[0]
        metas = []
        for v in vals or ():
            ev = getattr(v, "meta", {}).get("example_value")
            if ev is None:
                metas = None
                break
            metas.append(_meta(ev))
        traced = metas
    expected = expected_layout((m_dim, k), case["column_major"], case["sf_vec_size"], case["layout"], padded_columns)
    result["expected"] = _show(expected)
    result["traced"] = _show(traced)
    result["layout_ok"] = _same_meta(traced, expected)
    return result


def passed(r):
    return r["error"] is None and r["graphs"] == 1 and not r["graph_breaks"] and r["op_node_ok"] and r["layout_ok"]


def dynamo_disabled(torch):
    """What turns torch.compile into a no-op here (``TORCH_COMPILE_DISABLE=1``), or ""."""
    found = [f"{name}={os.environ[name]}" for name in DYNAMO_DISABLING_VARIABLES if os.environ.get(name) == "1"]
    if found:
        return " and ".join(found) + " in the environment"
    try:
        import torch._dynamo

        disabled = bool(torch._dynamo.config.disable)
    except (ImportError, AttributeError):  # an odd torch: let the cases report what fails
        disabled = False
    return "torch._dynamo.config.disable = True" if disabled else ""


def imported_elsewhere(flashinfer, path):
    """A message naming the file imported when ``--path`` or ``--expect`` was given and ``flashinfer`` came from
    another directory, else ""."""
    file = os.path.abspath(getattr(flashinfer, "__file__", "") or "")
    where = os.path.dirname(os.path.dirname(file))
    if path and os.path.realpath(where) != os.path.realpath(path):
        return (
            f"flashinfer was imported from {file}, not from {path}; take {where} off this interpreter's sys.path "
            "(PYTHONPATH, a .pth file, sitecustomize)"
        )
    return ""


def main(argv=None):
    ap = argparse.ArgumentParser(description="CPU trace probe")  # not __doc__: None under python -OO
    ap.add_argument("--json", action="store_true", help="print a JSON list of case results")
    ap.add_argument("--filter", default="", help="run only cases whose name contains this text")
    ap.add_argument("--path", default="", help="import flashinfer from this site-packages directory")
    ap.add_argument("--expect", default="", help="refuse a flashinfer imported from anywhere but this directory")
    ns = ap.parse_args(argv)
    if ns.path:
        sys.path.insert(0, ns.path)
    # --json: the JSON alone goes to stdout. FlashInfer's API logging (FLASHINFER_LOGLEVEL > 0, FLASHINFER_LOGDEST
    # default "stdout") binds a handler to sys.stdout at import and prints a banner: send it to stderr.
    out = sys.stdout
    if ns.json:
        sys.stdout = sys.stderr

    try:
        import torch
    except ImportError as e:  # fp4patch names the pip line that installs it (fp4patch.checks.trace.install_line)
        print("cannot import torch: {}: {}".format(type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else ""), file=sys.stderr)
        return 2

    disabling = dynamo_disabled(torch)
    if disabling:
        print(f"{disabling} disables torch.compile (Dynamo) in this interpreter, so nothing can be traced; unset it for the trace", file=sys.stderr)
        return 3
    _install_device_stubs(torch)
    try:
        import flashinfer
    except Exception as e:
        msg = str(e).strip().splitlines()
        print("cannot import flashinfer: {}: {}".format(type(e).__name__, msg[0] if msg else ""), file=sys.stderr)
        return 2
    elsewhere = imported_elsewhere(flashinfer, ns.path or ns.expect)
    if elsewhere:
        print(elsewhere, file=sys.stderr)
        return 2

    import warnings

    warnings.filterwarnings("ignore")
    version = getattr(flashinfer, "__version__", "unknown")
    padded = _sf_reshape_uses_padded_columns(version)

    results = []
    for case in build_cases():
        if ns.filter and ns.filter not in case["name"]:
            continue
        r = run_case(case, torch, flashinfer, padded)
        r["passed"] = passed(r)
        r["flashinfer"] = version
        r["torch"] = torch.__version__
        results.append(r)

    ok = all(r["passed"] for r in results)
    if ns.json:
        json.dump(results, out, indent=1)
        out.write("\n")
    else:
        print("flashinfer {} at {} | torch {}".format(version, getattr(flashinfer, "__file__", "?"), torch.__version__))
        for r in results:
            status = "PASS" if r["passed"] else "FAIL"
            if r["error"]:
                detail = r["error"]
            else:
                detail = "graphs={} breaks={} ops={} layout={}".format(
                    r["graphs"], r["graph_breaks"], r["custom_ops"], "ok" if r["layout_ok"] else
                    "expected {} got {}".format(r["expected"], r["traced"]))
            print("{:4} {:58} {}".format(status, r["name"], detail))
        print("{}/{} cases passed".format(sum(r["passed"] for r in results), len(results)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
