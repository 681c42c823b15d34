#!/usr/bin/env python3
"""CPU scan: which public FlashInfer FP4/FP8 quantization, GEMM and MoE functions compile under fullgraph.

Standalone, like ``trace_probe.py`` next to it (whose device stubs and graph helpers it loads by
path): run it by path in the target interpreter, ``python scan_probe.py [--json] [--only NAME ...]``;
it needs the standard library, torch (a CPU build is enough) and the flashinfer that interpreter
imports, not fp4patch.

For each entry of :data:`FUNCTIONS` it looks the function up on the installed ``flashinfer``
(``not-present`` when absent), builds one representative call from the installed signature
(DeepSeek/Qwen-MoE-like shapes, M = 8 tokens: only the parameters the installed function has are
passed, by keyword; values are fake CUDA tensors made under ``FakeTensorMode``), and compiles a
function making that call with ``torch.compile(fullgraph=True)`` and a backend that only records the
FX graph, after a fresh ``torch._dynamo.reset()``, then hands the function itself to ``torch.compile`` with the same
arguments (:data:`FORMS`: ``nested`` and ``direct``; ``--forms`` picks). Where a call's argument depends on the release
(a backend the installed release accepts), its value comes from fp4patch's release data for that release, the same
data the op is rendered from (``--release-data``, :func:`release_choice`); without it, the wrapper's default. Per
function it reports (for the first form that fails, else the first; each form's own in ``forms``):

* ``compiles``: one graph, no graph break, and the non-aten ops in it (``ns::name``);
* ``fails``: the Dynamo error's first line verbatim, its ``Explanation:`` line (and for an
  ``Observed exception``, the exception FlashInfer raised, as ``raised``), the innermost exception behind it
  (``root_cause`` and ``root_location``: what a ``TorchRuntimeError`` hides), and the
  ``flashinfer/...py:LINE`` (with that source line) where tracing stopped: the innermost frame
  inside the flashinfer package of the exception's user stack (Dynamo's ``real_stack``), else of
  its traceback;
* ``not-present``: the installed flashinfer has no such function, or (a variant) lacks a parameter
  the variant sets (``error`` names it);
* ``no-call``: the scan has no value for a required parameter of the installed signature.

The calls are the table of ``scan_calls.py`` next to it (:data:`FUNCTIONS`, offered here with the rest of its
public names): each function's default call and the variants engines make, the spec that makes each traceable and
the arguments taken from fp4patch's release data.

Device stubs (CPU stand-ins): those of ``trace_probe`` (capability (10, 0), device properties),
plus ``torch.cuda.current_device`` -> 0, ``torch.cuda.device_count`` -> 1 (so FlashInfer's
compilation context targets sm100), ``torch._C._cuda_getCurrentRawStream`` -> 0 and
``Tensor.cuda`` -> the tensor itself, ``torch.cuda.device(...)`` -> a null context.

Exit status: 0 when the scan ran (it is a report, whatever compiles), 2 when flashinfer cannot
be imported.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import json
import linecache
import os
import sys
import traceback

#: This probe's directory: its siblings (``trace_probe.py``, ``scan_calls.py``) are loaded from it by path.
_HERE = os.path.dirname(os.path.abspath(__file__))


def _sibling(filename, name):
    """``filename`` of this probe's directory, loaded by path once and kept in ``sys.modules`` as ``name`` (fp4patch
    need not be importable: only this directory need be on disk)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, filename))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _trace_probe():
    """``trace_probe.py`` of the same directory, loaded by path (fp4patch need not be importable)."""
    return _sibling("trace_probe.py", "_fp4patch_trace_probe")


_calls = _sibling("scan_calls.py", "_fp4patch_scan_calls")
#: The call table (``scan_calls.py``): the entries, the spec of each, what a call is made of (:func:`planned_pool`,
#: which fp4patch hashes) and the arguments chosen per release; read here by the scan and by fp4patch's checks.
FUNCTIONS = _calls.FUNCTIONS
spec_for, catalog = _calls.spec_for, _calls.catalog
planned_pool, release_choice, release_lacks = _calls.planned_pool, _calls.release_choice, _calls.release_lacks
#: the shapes the calls are made of (tokens, hidden size, output features, experts, ...), offered here as before
#: the call table had a file of its own
M, K, N, E, TOP_K, I_MOE, L, MAX_M = _calls.M, _calls.K, _calls.N, _calls.E, _calls.TOP_K, _calls.I_MOE, _calls.L, _calls.MAX_M


def install_device_stubs(torch):
    """The trace probe's stubs, plus the device queries the GEMM and MoE paths make."""
    _trace_probe()._install_device_stubs(torch)
    torch.cuda.current_device = lambda: 0
    torch.cuda.device_count = lambda: 1
    torch._C._cuda_getCurrentRawStream = lambda device=0: 0
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.cuda.device = lambda device=None: contextlib.nullcontext()


# --------------------------------------------------------------------------- #
# Where tracing stopped
# --------------------------------------------------------------------------- #
def _frames(exc):
    """(filename, line) pairs, innermost last: the user stack Dynamo kept, then the traceback."""
    seen = set()
    chain = []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    stacks = []
    for e in chain:
        real = getattr(e, "real_stack", None)
        if real:
            stacks.append([(f.filename, f.lineno) for f in real])
    for e in chain:
        if e.__traceback__ is not None:
            stacks.append([(f.filename, f.lineno) for f in traceback.extract_tb(e.__traceback__)])
    return stacks


def stopped_at(exc, package_dir):
    """``(relative file, line, source line)`` of the innermost frame inside ``package_dir``, or Nones."""
    root = os.path.dirname(os.path.realpath(package_dir))
    prefix = os.path.realpath(package_dir) + os.sep
    for stack in _frames(exc):
        inside = [(f, n) for f, n in stack if f and os.path.realpath(f).startswith(prefix)]
        if inside:
            filename, line = inside[-1]
            source = linecache.getline(filename, line or 0).strip()
            return os.path.relpath(os.path.realpath(filename), root).replace(os.sep, "/"), line, source
    return None, None, None


# --------------------------------------------------------------------------- #
# One function
# --------------------------------------------------------------------------- #
def _find(flashinfer, function):
    for module in (flashinfer, getattr(flashinfer, "fused_moe", None)):
        fn = getattr(module, function, None) if module is not None else None
        if callable(fn):
            return fn
    return None


def _is_tensor_value(torch, v):
    return isinstance(v, torch.Tensor) or (isinstance(v, (list, tuple)) and v and all(isinstance(x, torch.Tensor) for x in v))


#: How a scanned call is compiled: "nested", a function making the call handed to ``torch.compile`` (how a model's
#: forward reaches it); "direct", the FlashInfer function itself handed to ``torch.compile`` (as FlashInfer's own
#: tests and benchmarks do; before torch 2.13 Dynamo starts in the function's own body there).
FORMS = ("nested", "direct")


def _describe_value(torch, value):
    """A call argument as text, for the result's ``call``: ``bfloat16[8, 7168]`` for a tensor, else ``repr``."""
    if isinstance(value, torch.Tensor):
        return "{}[{}]".format(str(value.dtype).replace("torch.", ""), ", ".join(str(d) for d in value.shape))
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return "[{}]".format(", ".join(_describe_value(torch, v) for v in value))
    return repr(value)


def _compile_once(torch, form, fn, tensors, static, settings, probe):
    """Compile the call once in ``form`` (:data:`FORMS`) with a graph-recording backend; a result fragment:
    ``passed``, ``graphs``, ``graph_breaks``, ``ops``, ``error`` (``Type: first line``), ``explanation``,
    ``raised``, ``root_cause``, ``root_location`` and the exception (``_exc``, for the caller's location)."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    out = {"passed": False, "graphs": None, "graph_breaks": None, "ops": None, "error": None, "explanation": None, "raised": None,
           "root_cause": None, "root_location": None, "_exc": None}
    try:
        with torch._dynamo.config.patch(**settings):
            if form == "direct":
                torch.compile(fn, fullgraph=True, backend=record, dynamic=False)(**tensors, **static)
            else:
                def call(tensors):
                    return fn(**tensors, **static)

                torch.compile(call, fullgraph=True, backend=record, dynamic=False)(tensors)
    except Exception as exc:  # noqa: BLE001 - Dynamo / fake failures: first line verbatim, and where it stopped
        lines = str(exc).strip().splitlines()
        explanation = [ln.strip() for ln in lines if ln.strip().startswith("Explanation:")]
        # an exception FlashInfer raised while traced ("Observed exception"): what it was
        raised = [ln.strip()[len("Developer debug context: raised exception "):] for ln in lines
                  if ln.strip().startswith("Developer debug context: raised exception ")]
        cause, where = _trace_probe().root_cause(exc)
        out.update(
            graphs=len(graphs),
            error="{}: {}".format(type(exc).__name__, lines[0] if lines else ""),
            explanation=explanation[0] if explanation else None,
            raised=raised[0][:300] if raised else None,
            root_cause=cause,
            root_location=where,
            _exc=exc,
        )
        return out
    try:
        breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    except Exception:  # noqa: BLE001 - counters are best effort
        breaks = None
    ops = []
    for gm in graphs:
        ops.extend(probe._custom_op_nodes(gm))
    compiled = len(graphs) == 1 and not breaks
    out.update(passed=compiled, graphs=len(graphs), graph_breaks=breaks, ops=ops)
    if not compiled:
        out["error"] = f"{len(graphs)} graphs, {breaks} graph breaks"
    return out


def scan_one(entry, torch, flashinfer, release=None, forms=FORMS):
    """The scan result of one :data:`FUNCTIONS` entry (see the module docstring), compiled in each of ``forms``.

    The result's top-level fields are those of the first form that fails (else of the first form), so ``status``
    is ``compiles`` only when every form compiles; ``forms`` holds each form's own fragment, ``form`` names the
    failing one, ``call`` each argument as passed (``bfloat16[8, 7168]``, ``'cutile'``) and ``release_args`` the
    values taken from the release data (:func:`release_choice`).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    probe = _trace_probe()
    result = {
        "name": entry["name"], "function": entry["function"], "spec": spec_for(entry), "status": "not-present", "passed": False,
        "graphs": None, "graph_breaks": None, "ops": None, "error": None, "explanation": None, "raised": None, "location": None, "source": None,
        "defined_at": None, "root_cause": None, "root_location": None, "form": None, "forms": {}, "call": None, "release_args": {},
    }
    fn = _find(flashinfer, entry["function"])
    if fn is None:
        return result
    try:
        defined = inspect.unwrap(fn)
        filename = inspect.getsourcefile(defined)
        line = inspect.getsourcelines(defined)[1]
        root = os.path.dirname(os.path.dirname(os.path.realpath(flashinfer.__file__)))
        result["defined_at"] = "{}:{}".format(os.path.relpath(os.path.realpath(filename), root).replace(os.sep, "/"), line)
    except (TypeError, OSError):
        pass
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError) as exc:
        result.update(status="no-call", error=f"no signature: {exc}")
        return result
    lacking = [n for n in entry.get("variant", ()) if n not in parameters]
    if lacking:  # the variant's parameters are not in this release: nothing to scan
        result["error"] = "{} has no parameter {}".format(entry["function"], ", ".join(lacking))
        return result
    lacks = release_lacks(entry, release)
    if lacks:  # the variant's value is not one this release takes (fp4patch's release data)
        result["error"] = lacks
        return result
    chosen = release_choice(entry, parameters, release)
    result["release_args"] = {k: repr(v) for k, v in chosen.items()}

    fake_mode = {}
    if entry.get("dynamo_config", {}).get("capture_dynamic_output_shape_ops"):
        # the inputs are this mode's fake tensors, so Dynamo traces in this mode: its ShapeEnv must allow
        # the data-dependent output size the option allows
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        fake_mode["shape_env"] = ShapeEnv(allow_dynamic_output_shape_ops=True)
    # an entry's Dynamo settings: what engines set for that call form (deferred finalize returns a
    # row count only the launcher knows: SGLang and TensorRT-LLM compile it with
    # capture_dynamic_output_shape_ops); settings this torch lacks are left out
    settings = {k: v for k, v in entry.get("dynamo_config", {}).items() if hasattr(torch._dynamo.config, k)}
    fragments = {}
    with FakeTensorMode(allow_non_fake_inputs=True, **fake_mode):
        def t(shape, dtype):
            return torch.empty(shape, dtype=dtype, device="cuda")

        pool = {**entry["args"](t, torch), **{name: (lambda v=v: v) for name, v in chosen.items()}}
        missing = [
            n for n, p in parameters.items()
            if n not in pool and p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        if missing:
            result.update(status="no-call", error="the scan has no value for required parameter(s) {}".format(", ".join(missing)))
            return result
        values = {n: pool[n]() for n in parameters if n in pool}
        result["call"] = {n: _describe_value(torch, v) for n, v in values.items()}
        tensors = {n: v for n, v in values.items() if _is_tensor_value(torch, v)}
        static = {n: v for n, v in values.items() if n not in tensors}
        for form in forms:
            fragments[form] = _compile_once(torch, form, fn, tensors, static, settings, probe)
    failed = [f for f in forms if not fragments[f]["passed"]]
    shown = fragments[failed[0] if failed else forms[0]]
    exc = shown.pop("_exc")
    for fragment in fragments.values():
        fragment.pop("_exc", None)
    result.update({k: v for k, v in shown.items()})
    result["forms"] = fragments
    result["form"] = failed[0] if failed else None
    result["status"] = "fails" if failed else "compiles"
    if exc is not None:
        where, line, source = stopped_at(exc, os.path.dirname(os.path.realpath(flashinfer.__file__)))
        result.update(location=f"{where}:{line}" if where else None, source=source)
    return result


def describe(r):
    """One line of text for a result: what the terminal and the logs show."""
    if r["status"] == "compiles":
        return "compiles (1 graph, ops: {})".format(", ".join(r["ops"]) or "none")
    if r["status"] == "not-present":
        return "not present ({})".format(r["error"]) if r.get("error") else "not present"
    if r["status"] == "no-call":
        return "not scanned: {}".format(r["error"])
    if r["status"] == "not-needed":  # set by fp4patch (trace.declare_not_needed): the spec declares it, with a reason
        return "not needed: {}".format(r.get("declared") or "declared by its spec")
    text = r["error"] or "fails"
    if r.get("form") == "direct":
        text = "handed to torch.compile directly: " + text
    if r.get("root_cause") and r["root_cause"] not in text:
        text += " (root cause: {}{})".format(r["root_cause"], " at " + r["root_location"] if r.get("root_location") else "")
    if r.get("raised"):
        text += " ({})".format(r["raised"] if len(r["raised"]) <= 80 else r["raised"][:77] + "...")
    if r.get("location"):
        text += " at {}".format(r["location"])
    if r.get("source"):
        text += ": {}".format(r["source"])
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description="CPU scan of the FP4 path under fullgraph")  # not __doc__: None under -OO
    ap.add_argument("--json", action="store_true", help="print a JSON object: flashinfer and torch versions, results")
    ap.add_argument("--only", nargs="*", default=None, help="scan only these entry names")
    ap.add_argument("--list", action="store_true", help="print the entries (name, function, spec) as JSON and exit; no torch")
    ap.add_argument("--path", default="", help="import flashinfer from this site-packages directory")
    ap.add_argument("--expect", default="", help="refuse a flashinfer imported from anywhere but this directory")
    ap.add_argument("--release-data", default="", help="JSON {spec id: RELEASE dict} of the installed release (fp4patch passes it)")
    ap.add_argument("--forms", default=",".join(FORMS), help="how each call is compiled: nested, direct or both (comma-separated)")
    ns = ap.parse_args(argv)
    release = json.loads(ns.release_data) if ns.release_data else None
    forms = tuple(f for f in ns.forms.split(",") if f)
    if not forms or any(f not in FORMS for f in forms):
        print("--forms takes {} (comma-separated)".format(" or ".join(FORMS)), file=sys.stderr)
        return 2
    if ns.list:
        json.dump(catalog(), sys.stdout)
        sys.stdout.write("\n")
        return 0
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

    disabling = _trace_probe().dynamo_disabled(torch)
    if disabling:
        print(f"{disabling} disables torch.compile (Dynamo) in this interpreter, so nothing can be traced; unset it for the scan", file=sys.stderr)
        return 3
    install_device_stubs(torch)
    try:
        import flashinfer
    except Exception as e:  # noqa: BLE001 - any import failure is reported
        msg = str(e).strip().splitlines()
        print("cannot import flashinfer: {}: {}".format(type(e).__name__, msg[0] if msg else ""), file=sys.stderr)
        return 2
    elsewhere = _trace_probe().imported_elsewhere(flashinfer, ns.path or ns.expect)
    if elsewhere:
        print(elsewhere, file=sys.stderr)
        return 2

    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("torch._dynamo").setLevel(logging.CRITICAL)
    entries = [e for e in FUNCTIONS if ns.only is None or e["name"] in ns.only]
    results = [scan_one(e, torch, flashinfer, release, forms) for e in entries]
    payload = {
        "flashinfer": getattr(flashinfer, "__version__", "unknown"), "flashinfer_file": getattr(flashinfer, "__file__", "?"),
        "torch": torch.__version__, "results": results,
    }
    if ns.json:
        json.dump(payload, out, indent=1)
        out.write("\n")
    else:
        print("flashinfer {} at {} | torch {}".format(payload["flashinfer"], payload["flashinfer_file"], payload["torch"]))
        width = max((len(r["name"]) for r in results), default=0)
        for r in results:
            print("  {:{}}  {}".format(r["name"], width, describe(r)))
        print("{}/{} present functions compile".format(sum(r["passed"] for r in results), sum(r["status"] != "not-present" for r in results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
