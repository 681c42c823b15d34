#!/usr/bin/env python3
"""CPU fake check: does each patched op's fake return what the wrapper's own Python allocates?

Standalone on purpose, like ``trace_probe.py`` next to it: run by path in the target interpreter
(``python fake_check_probe.py --request FILE.json [--json] [--path DIR]``), where fp4patch itself may
not be installed. It needs the standard library, torch (a CPU build is enough) and the FlashInfer that
interpreter imports, on which ``fp4patch apply`` already ran: the wrapper's module holds
``_fp4patch_<function>_entry`` and the registered op ``fp4patch::<function>_<8 hex>``.

The request (JSON, written by ``fp4patch/checks/fake_check.py``)::

    {"oracle": "<path of fp4patch/probes/oracle.py>",
     "functions": [{"function": "mxfp8_quantize", "grid": "<path of grids/mxfp8_quantize.py>",
                    "params": ["input", ...], "release": {...}}]}

``params`` are the wrapper's parameter names in this release (the spec target's), ``release`` the
target's release data (the op source's ``RELEASE`` updated by the target's): the grid module's
``cases(frozenset(params), release)`` gives the cases (the format is in ``docs/spec-format.md``, "Case
grids"). For each function, with the device queries stubbed (an SM100 device, :mod:`oracle`), every
JIT module replaced by one :class:`oracle.KernelRecorder`, the grid's own ``stubs`` (the launchers that
are not a JIT module's attribute) and fake CUDA tensors (``FakeTensorMode``), each case runs:

* the public wrapper ``flashinfer.<function>(*args, **kwargs)``, eagerly: the original code (the
  redirect fp4patch inserted fires only while compiling), with only the kernel launches replaced;
* ``_fp4patch_<function>_entry(**bound arguments)`` of the wrapper's module (the wrapper's signature
  bound to the case's arguments, defaults applied): it calls the registered custom op, whose fake runs
  under ``FakeTensorMode``, as it does while Dynamo traces.

Both outcomes (:func:`oracle.call_outcome`: each output's shape, stride and dtype, the nesting, and
which outputs are one of the arguments; or the exception's class and first message line) must be
equal. A case with ``"kernel"`` (a refusal of the C++ kernel, which the CPU cannot see) is run but not
compared, and counted in ``skipped_kernel``; one with ``"unchecked"`` is not run and listed with its
reason; one with ``"refused"`` runs the fake alone, which must raise fp4patch's own refusal (a message
starting ``fp4patch:``: the call is rejected at trace time, by design). A mismatch where the wrapper's
result holds the return value of a kernel launch (the recorder returns None: the wrapper returned a
``None`` where the fake has a tensor, or failed with a ``TypeError``/``AttributeError`` on a
``NoneType``, after a launch) is reported as ``not_visible``: those outputs are allocated in C++, which
the CPU cannot see. So is any mismatch, after a launch, of a case with ``"kernel_outputs"`` (the grid's
reason why some of the call's outputs come from the C++ kernel); its record carries the reason. A grid
whose fakes give data-dependent sizes (``get_ctx().new_dynamic_size()``) sets ``DYNAMIC_OUTPUT_SIZES =
True``: its cases run under a ``ShapeEnv``, and such a size reads ``"u0"``.

Output (``--json``): ``{"flashinfer": version, "torch": version, "functions": {function: {"cases": n,
"compared": n, "skipped_kernel": n, "unchecked": [{"case", "reason"}], "not_visible": [case names],
"failures": [{"case", "real", "fake"}], "outputs": [output names], "error": ""}}}`` (and
``"not_visible_fake_raised"``: the not-visible cases where the wrapper returned and the fake raised an error other
than fp4patch's refusal); ``real`` / ``fake``
are outcomes, ``{"ok": metadata}`` or ``{"error": [class, first line]}``. ``error`` is why a function
could not be checked at all (no such function, not patched, a grid that fails). Exit status: 0 when
every function passes (no error, failure, not-visible or unchecked case), 1 otherwise, 2 when torch or
FlashInfer cannot be imported (or FlashInfer not from ``--path``) or the request cannot be read.
``--path DIR`` puts DIR first on ``sys.path`` and refuses a FlashInfer imported from elsewhere.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import json
import os
import sys
import traceback

#: Keys a grid case may hold (see docs/spec-format.md, "Case grids").
CASE_KEYS = {"name", "args", "kwargs", "kernel", "unchecked", "refused", "env", "device", "kernel_outputs"}


def load_by_path(path, name):
    """The module at ``path``, imported under ``name`` (registered in ``sys.modules``)."""
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == path:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _trace_probe():
    """``trace_probe.py`` of the same directory, loaded by path (for ``imported_elsewhere``)."""
    return load_by_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "trace_probe.py"), "_fp4patch_trace_probe")


class CaseError(Exception):
    """A case the grid wrote wrongly (an unknown key, an argument the wrapper does not take)."""


def build(value, module, oracle, torch):
    """A case value as the call takes it: ``{"t": dims, "dtype": name}`` (+ ``"T": True``: the last two
    dims transposed, a column-major view; + ``"stride"``) a fake CUDA tensor (+ ``"device": "cpu"``: a fake CPU
    tensor, for a wrapper's host path), ``{"enum": "Cls.member"}``
    the member of ``Cls`` in the wrapper's ``module`` (else in the ``flashinfer`` package), ``{"dtype": name}`` alone the ``torch.dtype`` (an
    ``out_dtype=torch.bfloat16`` argument), ``{"tuple": [...]}`` a tuple of those, a list element-wise, anything else as it is."""
    if isinstance(value, dict) and "t" in value:
        shape, dtype, stride = tuple(value["t"]), getattr(torch, value["dtype"]), tuple(value["stride"]) if "stride" in value else None
        if value.get("device", "cuda") == "cuda":
            t = oracle.cuda_tensor(shape, dtype, stride)
        elif value["device"] == "cpu":
            t = torch.empty(shape, dtype=dtype) if stride is None else torch.empty_strided(shape, stride, dtype=dtype)
        else:
            raise CaseError(f"a tensor on device {value['device']!r}: a grid names 'cuda' (the default) or 'cpu'")
        return t.transpose(-2, -1) if value.get("T") else t
    if isinstance(value, dict) and set(value) == {"dtype"}:
        return getattr(torch, value["dtype"])
    if isinstance(value, dict) and "enum" in value:
        cls, member = value["enum"].split(".")
        owner = getattr(module, cls, None)
        if owner is None:  # the public package: enums moved (flashinfer/tllm_enums.py, 0.6.8+) and not all are imported back
            owner = getattr(sys.modules.get("flashinfer"), cls)
        return getattr(owner, member)
    if isinstance(value, dict) and set(value) == {"tuple"}:
        return tuple(build(v, module, oracle, torch) for v in value["tuple"])
    if isinstance(value, list):
        return [build(v, module, oracle, torch) for v in value]
    return value


def _is_tensor_meta(meta):
    return isinstance(meta, list) and len(meta) in (3, 4) and isinstance(meta[0], list) and isinstance(meta[1], list) and isinstance(meta[2], str)


def leaves(meta, path=()):
    """``(path, leaf)`` of each output in nested metadata: a tensor's ``[shape, stride, dtype(, arg)]`` or a repr."""
    if _is_tensor_meta(meta) or not isinstance(meta, list):
        return [(path, meta)]
    found = []
    for i, item in enumerate(meta):
        found.extend(leaves(item, path + (i,)))
    return found


def not_visible(real, fake, kernels):
    """Whether a mismatch comes from a kernel launch's return value, which the recorder gives as None."""
    if not kernels:
        return False
    if "error" in real:
        cls, message = real["error"]
        return cls in ("TypeError", "AttributeError") and "NoneType" in message
    if "ok" in real and "ok" in fake:
        fake_leaves = dict(leaves(fake["ok"]))
        return any(leaf == "None" and _is_tensor_meta(fake_leaves.get(path)) for path, leaf in leaves(real["ok"]))
    return "ok" in real and any(leaf == "None" for _, leaf in leaves(real["ok"]))


def run_case(case, fn, module, fake, oracle, torch, recorder):
    """One grid case: ``{"name", "status", "real", "fake", "kernels", "fake_kernels"}`` (the kernels the wrapper
    and the fake launched; ``reason`` for an unchecked one and a not-visible one with ``kernel_outputs``).

    ``status``: ``passed``, ``failed``, ``not-visible``, ``kernel`` (run, not compared), ``unchecked``
    (not run). Raises :class:`CaseError` for a case the grid wrote wrongly.
    """
    unknown = sorted(set(case) - CASE_KEYS)
    if unknown or "name" not in case:
        raise CaseError(f"case {case.get('name')!r}: unknown key(s) {', '.join(unknown) or '(no name)'}")
    record = {"name": case["name"], "status": "unchecked", "real": None, "fake": None, "kernels": [], "fake_kernels": []}
    if case.get("unchecked"):
        record["reason"] = str(case["unchecked"])
        return record
    device = oracle.device_stubs(tuple(case["device"])) if case.get("device") else contextlib.nullcontext()
    with device, oracle.environment(case.get("env") or {}):
        args = [build(a, module, oracle, torch) for a in case.get("args", [])]
        kwargs = {k: build(v, module, oracle, torch) for k, v in (case.get("kwargs") or {}).items()}
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as exc:
            raise CaseError(f"case {case['name']!r}: {fn.__name__} does not take these arguments ({exc})") from None
        bound.apply_defaults()
        inputs = {name: value for name, value in bound.arguments.items() if isinstance(value, torch.Tensor)}
        if case.get("refused"):
            record["fake"] = oracle.call_outcome(fake, (), dict(bound.arguments), inputs)
            refused = "error" in record["fake"] and record["fake"]["error"][1].startswith("fp4patch:")
            record["status"] = "passed" if refused else "failed"
            return record
        launched = len(recorder.calls)
        record["real"] = oracle.call_outcome(fn, args, kwargs, inputs)
        record["kernels"] = recorder.names()[launched:]
        launched = len(recorder.calls)
        record["fake"] = oracle.call_outcome(fake, (), dict(bound.arguments), inputs)
        record["fake_kernels"] = recorder.names()[launched:]
    if case.get("kernel") is not None:
        record["status"] = "kernel"
    elif record["real"] == record["fake"]:
        record["status"] = "passed"
    elif not_visible(record["real"], record["fake"], record["kernels"]) or (case.get("kernel_outputs") and record["kernels"]):
        record["status"] = "not-visible"
        if case.get("kernel_outputs"):
            record["reason"] = str(case["kernel_outputs"])
    else:
        record["status"] = "failed"
    return record


def run_function(oracle, flashinfer, torch, recorder, request, fake=None):
    """Every case of one function: ``(summary, records)``.

    ``request``: ``{"function", "grid", "params", "release"}`` (see the module docstring). ``fake``: what
    the wrapper is compared with, called with the bound arguments by keyword; default the module's
    ``_fp4patch_<function>_entry`` (tests pass another, e.g. an op source's ``entry`` into its ``fake``).
    ``summary`` is the function's entry of the JSON output; ``records`` one :func:`run_case` result per
    case. Errors that stop the function (no such function, not patched, a grid that fails to load or
    writes a wrong case) are the summary's ``error``, with the records run so far.
    """
    function = request["function"]
    summary = {"cases": 0, "compared": 0, "skipped_kernel": 0, "unchecked": [], "not_visible": [], "failures": [], "outputs": [], "error": ""}
    records = []
    try:
        grid = oracle.load_grid(request["grid"], f"_fp4patch_grid_{function}")
        if getattr(grid, "FUNCTION", None) != function:
            raise CaseError(f"{request['grid']}: FUNCTION is {getattr(grid, 'FUNCTION', None)!r}, not {function!r}")
        summary["outputs"] = list(getattr(grid, "OUTPUTS", ()))
        cases = list(grid.cases(frozenset(request["params"]), dict(request["release"])))
        names = [c.get("name") for c in cases]
        if len(set(names)) != len(names):
            raise CaseError(f"{request['grid']}: case names repeat: {sorted({n for n in names if names.count(n) > 1})[:5]}")
        fn = getattr(flashinfer, function, None)
        if fn is None:
            raise CaseError(f"flashinfer has no {function} (flashinfer {getattr(flashinfer, '__version__', '?')})")
        module = sys.modules[inspect.unwrap(fn).__module__]
        if fake is None:
            ready = getattr(module, f"_fp4patch_{function}_ready", None)
            if ready is not None:  # the op is registered on first need, not at import (the entry is None until then)
                ready()
            fake = getattr(module, f"_fp4patch_{function}_entry", None)
            if not fake:  # None: not patched; False: this torch cannot register the op
                raise CaseError(f"{module.__name__} holds no _fp4patch_{function}_entry: run fp4patch apply first (or its op could not be registered)")
        fake = carried_at_defaults(fake, fn, request["params"])
        stubs = grid.stubs(oracle, recorder, flashinfer) if hasattr(grid, "stubs") else contextlib.nullcontext()
        shape_env = None
        if getattr(grid, "DYNAMIC_OUTPUT_SIZES", False):  # a fake gives a data-dependent size (get_ctx().new_dynamic_size())
            from torch.fx.experimental.symbolic_shapes import ShapeEnv

            shape_env = ShapeEnv()
        with stubs, oracle.fake_mode(shape_env), oracle.fake_cuda_indexing(), oracle.fake_cuda_contiguous():
            for case in cases:
                records.append(run_case(case, fn, module, fake, oracle, torch, recorder))
    except Exception as exc:  # noqa: BLE001 - reported as the function's error, with where it happened
        where = traceback.extract_tb(exc.__traceback__)[-1]
        detail = "" if isinstance(exc, CaseError) else f" (at {os.path.basename(where.filename)}:{where.lineno})"
        summary["error"] = "{}: {}{}".format(type(exc).__name__, (str(exc).strip().splitlines() or [""])[0], detail)
    for r in records:
        summary["cases"] += 1
        if r["status"] == "unchecked":
            summary["unchecked"].append({"case": r["name"], "reason": r["reason"]})
        elif r["status"] == "kernel":
            summary["skipped_kernel"] += 1
        else:
            summary["compared"] += 1
            if r["status"] == "not-visible":
                summary["not_visible"].append(r["name"])
                fake, real = r.get("fake") or {}, r.get("real") or {}
                if "error" in fake and "error" not in real and not str(fake["error"][1]).startswith("fp4patch:"):
                    # the wrapper returned (the kernel's outputs unseen) where the fake raised FlashInfer's kind of error:
                    # a refusal the release no longer makes, whatever those outputs are (fp4patch.checks.cpu_check: no launcher
                    # evidence for it). Where both raise (the wrapper on the kernel's missing outputs) nothing is said.
                    summary.setdefault("not_visible_fake_raised", []).append(r["name"])
            elif r["status"] == "failed":
                summary["failures"].append({"case": r["name"], "real": r["real"], "fake": r["fake"]})
    return summary, records


def carried_at_defaults(fake, fn, params):
    """``fake``, or, when the wrapper ``fn`` takes parameters beyond ``params`` (a target carried to a release
    that added them: ``fp4patch.catalog.evidence.carried_target``, whose op does not take them), ``fake`` called without
    those that hold the wrapper's default (a grid built from ``params`` never passes them); a call with
    another value reaches ``fake`` with it (and fails there: the carried op is checked at the default only)."""
    signature = inspect.signature(fn).parameters
    extra = {name: p.default for name, p in signature.items() if name not in params and p.default is not inspect.Parameter.empty}
    if not extra:
        return fake

    def call(**kwargs):
        return fake(**{k: v for k, v in kwargs.items() if not (k in extra and v is extra[k])})

    return call


def passed(summary):
    """A function passes when it ran, and no case failed, was not visible or unchecked."""
    return not (summary["error"] or summary["failures"] or summary["not_visible"] or summary["unchecked"])


def main(argv=None):
    ap = argparse.ArgumentParser(description="CPU fake check of fp4patch's ops")  # not __doc__: None under python -OO
    ap.add_argument("--request", required=True, help="JSON file: the oracle's path and the functions to check")
    ap.add_argument("--json", action="store_true", help="print the JSON result alone on stdout")
    ap.add_argument("--path", default="", help="import flashinfer from this site-packages directory")
    ns = ap.parse_args(argv)
    try:
        with open(ns.request, encoding="utf-8") as f:
            request = json.load(f)
        oracle = load_by_path(request["oracle"], "_fp4patch_oracle")
    except (OSError, ValueError, KeyError, ImportError, SyntaxError) as exc:
        print(f"cannot read the request {ns.request}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if ns.path:
        sys.path.insert(0, ns.path)
    # --json: the JSON alone goes to stdout (FlashInfer's API logging may print there: see trace_probe.py)
    out = sys.stdout
    if ns.json:
        sys.stdout = sys.stderr
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        print(f"cannot import torch: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    import warnings

    warnings.filterwarnings("ignore")
    recorder = oracle.KernelRecorder()
    with oracle.device_stubs():  # FlashInfer reads the architectures at import (jit/core.py check_cuda_arch)
        try:
            import flashinfer
        except Exception as exc:  # noqa: BLE001
            lines = str(exc).strip().splitlines()
            print("cannot import flashinfer: {}: {}".format(type(exc).__name__, lines[0] if lines else ""), file=sys.stderr)
            return 2
        elsewhere = _trace_probe().imported_elsewhere(flashinfer, ns.path)
        if elsewhere:
            print(elsewhere, file=sys.stderr)
            return 2
        results = {}
        with oracle.jit_modules_replaced(recorder):
            for item in request["functions"]:
                results[item["function"]] = run_function(oracle, flashinfer, torch, recorder, item)[0]
    answer = {"flashinfer": getattr(flashinfer, "__version__", "unknown"), "torch": torch.__version__, "functions": results}
    if ns.json:
        json.dump(answer, out, indent=1)
        out.write("\n")
    else:
        for function, s in results.items():
            state = "ok" if passed(s) else "FAILED"
            print(f"{function}: {state}: {s['compared']} compared, {s['skipped_kernel']} kernel checks skipped, {len(s['unchecked'])} unchecked"
                  + (f", error: {s['error']}" if s["error"] else ""))
            for failure in s["failures"]:
                print(f"  {failure['case']}: wrapper {failure['real']}, fake {failure['fake']}")
            for name in s["not_visible"]:
                print(f"  {name}: an output comes from the kernel launch (not visible on CPU)")
            for item in s["unchecked"]:
                print(f"  {item['case']}: unchecked: {item['reason']}")
    return 0 if all(passed(s) for s in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
