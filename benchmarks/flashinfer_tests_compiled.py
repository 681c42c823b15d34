"""pytest plugin: FlashInfer's own tests with fp4patch's patched functions compiled (issue 23, GPU).

Loaded with ``-p flashinfer_tests_compiled`` (this directory on ``PYTHONPATH``) in a run of FlashInfer's
``tests/`` (the source of the release installed; the wheel does not ship them). It changes no FlashInfer file
and nothing inside FlashInfer's modules: after collection it rebinds, in each collected test module only, the
names that reach a patched function (``from flashinfer import bmm_fp8``, or ``flashinfer`` itself, through a
proxy whose attributes and submodules hand out the compiled stand-ins). A function is *patched* when its module
holds ``_fp4patch_<function>_entry`` (what ``fp4patch apply`` renders), so on an unpatched copy nothing is
wrapped. Environment:

``FP4T_MODE``
    ``eager`` (default): nothing wrapped, outcomes logged. ``nested``: each patched function is replaced by
    ``torch.compile(fullgraph=True)`` of a one-line function calling it (called from a compiled function);
    ``direct``: by ``torch.compile(function, fullgraph=True)`` (handed to torch.compile directly).
``FP4T_BACKEND``
    ``aot_eager`` (default) or ``inductor``. Compiles are static (``dynamic=False``), ``torch._dynamo`` is reset
    before every test, and the recompile limits are lifted, so every call of a test with new shapes compiles
    (none falls back to eager).
``FP4T_SAMPLE``
    ``N`` > 1: only the test ids whose crc32 is 0 modulo N run (the Inductor sample; the others deselected).
``FP4T_RESUME``
    ``1``: deselect the test ids already logged under ``FP4T_LOG`` (a run cut short by its deadline goes on).
``FP4T_LOG``
    a path prefix: the process that runs the tests appends one JSON line per test to ``<prefix>.<worker>.jsonl``:
    ``id`` (without xdist's ``@group``), ``outcome`` (passed / failed / skipped / error), ``reason`` (a skip's
    reason, a failure's last ``E`` line), ``calls`` (per wrapped function), ``graphs`` (each graph's fp4patch op
    nodes), ``mismatch`` (graph outputs whose real shape, stride, dtype or device differs from what the fake
    gave Dynamo; strides compared where a dimension has more than one element).

Tests that share a kernel configuration (their parameters other than sizes and scales) are marked with one
``xdist_group``, so that with ``--dist loadgroup`` each worker JIT-compiles (CuTe-DSL) a configuration once.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import types
import zlib

import pytest

MODE = os.environ.get("FP4T_MODE", "eager")
BACKEND = os.environ.get("FP4T_BACKEND", "aot_eager")
SAMPLE = int(os.environ.get("FP4T_SAMPLE", "0") or 0)
LOG = os.environ.get("FP4T_LOG", "")
#: parameters that change only sizes or values: tests differing in these share a kernel configuration
INNER = {"batch_size", "quant_scale", "m", "k", "n", "b", "seed", "shape", "batch_shape", "num_elements"}

_STANDINS: dict[int, object] = {}  # id(patched function object) -> its compiled stand-in
_STATS: dict = {}
_REPORTS: dict[str, dict] = {}
_RUNS_TESTS = True


def _reset_stats() -> None:
    _STATS.clear()
    _STATS.update(calls={}, graphs=[], mismatch=[])


_reset_stats()


# --------------------------------------------------------------------------- #
# The backend: records each graph's fp4patch op nodes and checks, at every call, the real outputs against
# the fake outputs Dynamo traced with
# --------------------------------------------------------------------------- #
def _meta(t):
    return [list(t.shape), list(t.stride()), str(t.dtype), t.device.type]


def _differs(fake, real) -> bool:
    if fake[0] != real[0] or fake[2] != real[2] or fake[3] != real[3]:
        return True
    return any(size > 1 and fs != rs for size, fs, rs in zip(real[0], fake[1], real[1]))


def _backend(gm, example_inputs):
    import torch
    from torch._dynamo.backends.registry import lookup_backend

    ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function" and getattr(n.target, "namespace", None) == "fp4patch"]
    calls = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    out = next(n for n in reversed(list(gm.graph.nodes)) if n.op == "output")
    fakes = []
    for leaf in torch.utils._pytree.tree_leaves(out.args[0]):
        value = leaf.meta.get("example_value") if isinstance(leaf, torch.fx.Node) else None
        fakes.append(_meta(value) if isinstance(value, torch.Tensor) else None)
    _STATS["graphs"].append({"ops": ops, "call_nodes": calls})
    compiled = lookup_backend(BACKEND)(gm, example_inputs)

    def run(*args):
        outs = compiled(*args)
        leaves = torch.utils._pytree.tree_leaves(outs)
        for i, (fake, real) in enumerate(zip(fakes, leaves)):
            if fake is not None and isinstance(real, torch.Tensor):
                got = _meta(real)
                if _differs(fake, got):
                    _STATS["mismatch"].append({"output": i, "fake": fake, "real": got, "ops": ops})
        return outs

    if getattr(compiled, "_boxed_call", False):
        run._boxed_call = True
    return run


def _standin(name: str, fn):
    import torch

    if MODE == "direct":
        target = fn
    else:  # one code object per function, so each keeps its own Dynamo cache entries
        namespace = {"fn": fn}
        exec(f"def {name}_called_from_compiled(*args, **kwargs):\n    return fn(*args, **kwargs)\n", namespace)
        target = namespace[f"{name}_called_from_compiled"]
    compiled = torch.compile(target, fullgraph=True, backend=_backend, dynamic=False)

    @functools.wraps(fn)  # keeps the function's attributes (mm_fp4.is_backend_supported, ...)
    def standin(*args, **kwargs):
        _STATS["calls"][name] = _STATS["calls"].get(name, 0) + 1
        return compiled(*args, **kwargs)

    return standin


def _patched_functions() -> dict[int, tuple[str, object]]:
    """id -> (name, function) of every function object reachable from a loaded flashinfer module whose
    module holds ``_fp4patch_<name>_entry``."""
    import inspect

    found = {}
    for mod_name, module in list(sys.modules.items()):
        if not (mod_name == "flashinfer" or mod_name.startswith("flashinfer.")) or module is None:
            continue
        for value in list(vars(module).values()):
            if not callable(value) or isinstance(value, type) or id(value) in found:
                continue
            try:
                inner = inspect.unwrap(value)
            except ValueError:
                continue
            name = getattr(inner, "__name__", "")
            if f"_fp4patch_{name}_entry" in getattr(inner, "__globals__", {}):
                found[id(value)] = (name, value)
    return found


class _Proxy:
    """A flashinfer module as a test module sees it: patched functions replaced by their stand-ins."""

    def __init__(self, module):
        self.__dict__["_fp4t_module"] = module

    def __getattr__(self, attr):
        value = getattr(self._fp4t_module, attr)
        if id(value) in _STANDINS:
            return _STANDINS[id(value)]
        if isinstance(value, types.ModuleType) and value.__name__.startswith("flashinfer"):
            return _Proxy(value)
        return value

    def __setattr__(self, attr, value):
        setattr(self._fp4t_module, attr, value)

    def __repr__(self):
        return f"<fp4t proxy of {self._fp4t_module!r}>"


def _rebind(test_module) -> list[str]:
    rebound = []
    for attr, value in list(vars(test_module).items()):
        if id(value) in _STANDINS:
            setattr(test_module, attr, _STANDINS[id(value)])
            rebound.append(attr)
        elif isinstance(value, types.ModuleType) and (value.__name__ == "flashinfer" or value.__name__.startswith("flashinfer.")):
            setattr(test_module, attr, _Proxy(value))
            rebound.append(attr + " (proxy)")
    return rebound


# --------------------------------------------------------------------------- #
# pytest hooks
# --------------------------------------------------------------------------- #
def pytest_configure(config):
    global _RUNS_TESTS
    # the xdist controller runs no test but sees every worker's reports: it must log nothing (its records would
    # carry no calls or graphs). xdist registers its controller plugin after this hook, so ask the options:
    # a worker has PYTEST_XDIST_WORKER; a run with -n N (N > 0) and without it is the controller
    _RUNS_TESTS = "PYTEST_XDIST_WORKER" in os.environ or not getattr(config.option, "numprocesses", None)
    if MODE != "eager":
        import torch._dynamo.config as dc

        for limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(dc, limit):
                setattr(dc, limit, 1_000_000)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    if LOG and os.environ.get("FP4T_RESUME") == "1":
        import glob

        logged = set()
        for path in glob.glob(f"{LOG}.*.jsonl"):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    try:
                        logged.add(json.loads(line)["id"])
                    except (ValueError, KeyError):
                        pass  # a line cut short when the run was stopped
        dropped = [it for it in items if it.nodeid.split("@", 1)[0] in logged]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [it for it in items if it.nodeid.split("@", 1)[0] not in logged]
    if SAMPLE > 1:
        kept = [it for it in items if zlib.crc32(it.nodeid.encode()) % SAMPLE == 0]
        dropped = [it for it in items if zlib.crc32(it.nodeid.encode()) % SAMPLE != 0]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    for it in items:
        params = getattr(getattr(it, "callspec", None), "params", {})
        group = "|".join([getattr(it, "originalname", it.name)] + [f"{k}={v}" for k, v in sorted(params.items()) if k not in INNER])
        it.add_marker(pytest.mark.xdist_group(group.replace("@", "_")))
    if MODE == "eager" or not _RUNS_TESTS:
        return
    for key, (name, fn) in _patched_functions().items():
        _STANDINS.setdefault(key, _standin(name, fn))
    done = set()
    for it in items:
        module = getattr(it, "module", None)
        if module is not None and id(module) not in done:
            done.add(id(module))
            rebound = _rebind(module)
            print(f"fp4t: {module.__name__}: {MODE}/{BACKEND}: {', '.join(rebound) or 'nothing rebound'}", file=sys.stderr)


def pytest_runtest_setup(item):
    _reset_stats()
    if MODE != "eager":
        import torch._dynamo

        torch._dynamo.reset()


def _reason(report) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])[:300]
    text = getattr(report, "longreprtext", "") or ""
    lines = [ln for ln in text.splitlines() if ln.startswith("E ")]
    return (lines[-1] if lines else (text.strip().splitlines() or [""])[-1])[:300]


def pytest_runtest_logreport(report):
    if not _RUNS_TESTS or not LOG:
        return
    nodeid = report.nodeid.split("@", 1)[0]
    rec = _REPORTS.setdefault(nodeid, {"id": nodeid, "outcome": "passed", "reason": "", "duration": 0.0})
    rec["duration"] = round(rec["duration"] + getattr(report, "duration", 0.0), 4)
    if report.failed:
        rec["outcome"] = "failed" if report.when == "call" else "error"
        rec["reason"] = _reason(report)
    elif report.skipped and rec["outcome"] == "passed":
        rec["outcome"] = "skipped"
        rec["reason"] = _reason(report)
    if report.when == "teardown":
        rec.update(calls=dict(_STATS["calls"]), graphs=list(_STATS["graphs"]), mismatch=list(_STATS["mismatch"]))
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(f"{LOG}.{worker}.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        del _REPORTS[nodeid]
