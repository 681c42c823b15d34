"""``fp4_quantize`` under ``torch.compile(fullgraph=True)``, on the real 0.6.0 and 0.7.4 wheels, on CPU.

Every check that imports FlashInfer runs in a fresh interpreter (``PYTHONPATH=<site>``), so Dynamo
state, monkeypatches and imported modules never leak from one FlashInfer copy to another:
``fp4patch verify --trace`` runs the trace probe in its own subprocess, and the other checks run a
small child script (``_child``) that prints one JSON result line.

States covered, for both ends of the supported range:

* unpatched: every probe case fails with ``Unsupported: Attempted to call function marked as
  skipped``, naming ``_thread.allocate_lock`` (the error users report);
* ``fp4-quantize-compiler-disable``: ``Skip calling `torch.compiler.disable()`d function``;
* default specs: every probe case passes (one graph, no break, ``fp4patch::fp4_quantize`` as the
  only custom-op node, layout as the formula, dynamic M included);
* ``cuda-version-from-torch``: tracing ``is_cuda_version_at_least`` no longer reaches ``subprocess``
  (and unpatched, in the same set-up, it does);
* the custom op's body forwards every argument under its own name (to the module-level wrapper and
  on to the kernel), eager calls never go through the op, and the redirect is the first statement
  after the docstring with the rest of ``fp4_quantize`` untouched.

Not covered: importing the patched module on a torch without ``torch.library.custom_op`` (FlashInfer
itself needs it at import, so that torch cannot import FlashInfer at all).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

from fp4patch.catalog.spec import load_specs
from fp4patch.checks.trace import entries_for_specs
from fp4patch.probes.trace_probe import build_cases

from . import conftest
from .conftest import SPECS_DIR, applied_site, release_site, run_cli
from .python_forkserver import child_json

pytestmark = [
    pytest.mark.torch,
    pytest.mark.torch_matrix,  # make test-torch runs them under each torch of the matrix
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

VERSIONS = ["0.6.0", "0.7.4"]
#: the failing states (unpatched, compiler-disable) through verify --trace: 0.6.0 in make test; 0.7.4's
#: walls are also named per function by tests/test_scan.py, its whole grid here is make test-all
FAILING_VERSIONS = ["0.6.0", pytest.param("0.7.4", marks=pytest.mark.exhaustive)]
#: this interpreter's torch release (the walls Dynamo meets differ between releases: make test-torch runs each)
TORCH = Version(Version(metadata.version("torch")).public) if importlib.util.find_spec("torch") else Version("0")
FP4_FILE = {"0.6.0": "flashinfer/fp4_quantization.py", "0.7.4": "flashinfer/quantization/fp4_quantization.py"}
FULLGRAPH = "fp4-quantize-fullgraph"
DISABLE = "fp4-quantize-compiler-disable"
KEYWORDS = "flashinfer-fp4-quantize-op-keywords"
CUDA = "cuda-version-from-torch"
OP = re.compile(r"fp4patch::fp4_quantize_[0-9a-f]{8}")  # fingerprinted name (fp4patch/ops/render.py)
SKIPPED = "Unsupported: Attempted to call function marked as skipped"
DISABLED = "Unsupported: Skip calling `torch.compiler.disable()`d function"
MARK = "FP4PATCH-CHILD-RESULT "

# One non-default value per parameter of the op (as it crosses the schema); "<gs>" is the
# global-scale tensor of the child. Booleans can only be told apart one at a time, so each
# parameter is also sent alone (the others at their defaults): a positional mix-up then shows.
NON_DEFAULT = {
    "global_scale": "<gs>",
    "sf_vec_size": 32,
    "sf_use_ue8m0": True,
    "is_sf_swizzled_layout": False,
    "is_sf_8x4_layout": True,
    "is_global_scale_inversed": True,
    "enable_pdl": False,
    "backend": "cuda",
    "nvfp4_4over6": 0,  # None (0) instead of "argument omitted" (-1)
    "batch_invariant": True,
}
# Parameters that leave the kernel path of fp4_quantize_sm100 (another kernel entirely).
OFF_KERNEL_PATH = {"batch_invariant"}


# The fixture lives in conftest.py (every test file gets it); kept here under its old name for the
# test files that import it from this module.
linked_site = conftest.linked_site


def module_name(version: str) -> str:
    return FP4_FILE[version][: -len(".py")].replace("/", ".")


def sp(site: Path) -> tuple[str, str]:
    return ("--site-packages", str(site))


def apply(site: Path, *specs: str) -> None:
    run_cli("apply", *sp(site), *(a for s in specs for a in ("--spec", s)), check=True)


def verify_trace(site: Path, *extra: str) -> tuple[int, dict]:
    done = run_cli("verify", "--trace", *sp(site), "--json", *extra)
    assert done.stdout.strip(), f"no JSON (exit {done.returncode})\n{done.stderr}"
    return done.returncode, json.loads(done.stdout)


def _child(site: Path, script: str, params: dict) -> dict:
    """Run ``script`` in a fresh interpreter that imports FlashInfer from ``site``; its JSON result
    (forked from an interpreter that imported torch: :mod:`tests.python_forkserver`)."""
    return child_json(site, script, params, mark=MARK, timeout=600)


def _fullgraph_target_ops(version: str):
    spec = next(s for s in load_specs(SPECS_DIR) if s.id == FULLGRAPH)
    targets = [t for t in spec.targets_for(version) if not t.status]
    assert len(targets) == 1, f"{FULLGRAPH}: {len(targets)} patching targets for {version}"
    return targets[0]


def _function(module: ast.Module, name: str) -> ast.FunctionDef:
    found = [n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, f"{len(found)} top-level definitions of {name}"
    return found[0]


def _kernel_params(source: str) -> list[str]:
    """Parameter names of ``fp4_quantize_sm100``, defined inside ``get_fp4_quantization_module``."""
    outer = _function(ast.parse(source), "get_fp4_quantization_module")
    inner = [n for n in ast.walk(outer) if isinstance(n, ast.FunctionDef) and n.name == "fp4_quantize_sm100"]
    assert len(inner) == 1
    return [a.arg for a in inner[0].args.args]


# --------------------------------------------------------------------------- #
# verify --trace: the three states of fp4_quantize under fullgraph
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("version", FAILING_VERSIONS)
def test_unpatched_fails_on_thread_lock(tmp_path_factory, version: str) -> None:
    site = release_site(version, tmp_path_factory, bytecode=True)
    # --applicable: the specs only have to be applicable, so the exit code is the trace's alone
    code, payload = verify_trace(site, "--applicable")
    states = {s["id"]: s["state"] for s in payload["specs"]}
    assert states[CUDA] == states[FULLGRAPH] == "applicable", states
    # the other functions' specs: applicable, or not-needed/obsolete where the release has no such code
    assert set(states.values()) <= {"applicable", "not-needed", "obsolete"}, states
    assert code == 1 and payload["ok"] is False
    cases = payload["trace"]
    assert [c["name"] for c in cases] == [c["name"] for c in build_cases()]
    for c in cases:
        assert not c["passed"], c["name"]
        assert c["graphs"] == 0, c
        if TORCH < Version("2.8"):  # torch 2.7's Dynamo stops earlier in FlashInfer's JIT set-up, on `add` of an unknown type and a list
            assert c["error"] == "Unsupported: Failed to trace builtin operator" and "builtin operator `add`" in (c["error_explanation"] or ""), c
            continue
        assert c["error"] == SKIPPED, c
        assert "_thread.allocate_lock" in (c["error_explanation"] or ""), c


@pytest.mark.parametrize("version", FAILING_VERSIONS)
def test_compiler_disable_fails_on_disabled_function(tmp_path_factory, version: str) -> None:
    site = applied_site(version, tmp_path_factory, DISABLE)
    code, payload = verify_trace(site, "--spec", DISABLE)
    assert [(s["id"], s["state"]) for s in payload["specs"]] == [(DISABLE, "applied")]
    assert code == 1 and payload["ok"] is False
    cases = payload["trace"]
    assert len(cases) == len(build_cases())
    for c in cases:
        assert not c["passed"], c["name"]
        assert c["error"] == DISABLED, c
        assert "torch.compiler.disable" in (c["error_explanation"] or ""), c
        assert "_thread.allocate_lock" not in (c["error_explanation"] or ""), c


@pytest.mark.parametrize("version", VERSIONS)
def test_default_specs_pass_every_trace_case(tmp_path_factory, version: str) -> None:
    site = applied_site(version, tmp_path_factory)
    code, payload = verify_trace(site)
    # flashinfer-fp4-quantize-op-keywords: 0.6.0 has no flashinfer::fp4_quantize, 0.7.4 forwards by keyword
    keywords = {"0.6.0": "not-needed", "0.7.4": "obsolete"}[version]
    states = {s["id"]: s["state"] for s in payload["specs"]}
    assert states[CUDA] == states[FULLGRAPH] == "applied" and states[KEYWORDS] == keywords, states
    others = {k: v for k, v in states.items() if k not in (CUDA, FULLGRAPH, KEYWORDS)}
    assert set(others.values()) <= {"applied", "not-needed"}, states  # the other functions' fullgraph specs
    cases = payload["trace"]
    assert [c["name"] for c in cases] == [c["name"] for c in build_cases()], "the probe must run every case"
    failed = [c for c in cases if not c["passed"]]
    assert not failed, json.dumps(failed, indent=1)[:4000]
    functions = [f for f in payload.get("trace_functions") or [] if not f["passed"]]
    assert code == 0 and payload["ok"] is True, "; ".join(
        f"{f['name']}: {f.get('root_cause') or f.get('error')}" for f in functions) or f"verify --trace exited {code}"
    for c in cases:
        assert c["flashinfer"] == version
        assert c["error"] is None, c
        assert c["graphs"] == 1 and c["graph_breaks"] == 0, c
        assert len(c["custom_ops"]) == 1 and OP.fullmatch(c["custom_ops"][0]), c
        # layout_ok: equal to the probe's formula, symbolic dims compared under Dynamo's guards
        assert c["op_node_ok"] and c["layout_ok"], c
    dynamic = [c for c in cases if c["dynamic"]]
    assert dynamic, "no dynamic-M case"
    for c in dynamic:  # M stayed symbolic: a dimension of each output is an expression, not an int
        (q_shape, _, _), (sf_shape, _, _) = c["traced"]
        assert any(isinstance(d, str) for d in q_shape) and any(isinstance(d, str) for d in sf_shape), c
    assert {c["layout"] for c in cases} == {"128x4", "8x4", "linear"}
    assert {c["sf_vec_size"] for c in cases} == {16, 32}
    assert {c["column_major"] for c in cases} == {True, False}
    assert {c["global_scale"] for c in cases} == {True, False}
    # ... and the scan's call of every function the applied specs cover (fp4_quantize and its callers)
    functions = payload["trace_functions"]
    applied = {s["id"] for s in payload["specs"] if s["state"] == "applied"}
    assert [f["name"] for f in functions] == entries_for_specs(applied)
    assert {"fp4_quantize", "nvfp4_quantize", "mxfp4_quantize"} <= {f["name"] for f in functions}
    for f in functions:
        assert f["passed"] and f["graphs"] == 1 and f["graph_breaks"] == 0 and len(f["ops"]) == 1, f
        # nvfp4_quantize and mxfp4_quantize reach the op through fp4_quantize; every other function has its own
        # (from 0.6.11 nvfp4_quantize has its own op: nvfp4-quantize-fullgraph)
        own_op = f["function"] == "nvfp4_quantize" and "nvfp4-quantize-fullgraph" in applied
        own = "fp4_quantize" if f["function"] in ("nvfp4_quantize", "mxfp4_quantize") and not own_op else f["function"]
        assert re.fullmatch(rf"fp4patch::{own}_[0-9a-f]{{8}}", f["ops"][0]), f


# --------------------------------------------------------------------------- #
# cuda-version-from-torch: no subprocess while tracing
# --------------------------------------------------------------------------- #
CUDA_CHILD = r"""
import json, subprocess, sys
import torch

torch.version.cuda = "12.8"  # a CUDA build of torch, as flashinfer will read it
phase = ["import"]
calls = []


def _recorder(name):
    def recorder(*args, **kwargs):
        calls.append([phase[0], name, repr(args)[:200]])
        raise FileNotFoundError("fp4patch test: subprocess.%s reached" % name)
    return recorder


for _name in ("run", "check_output", "call", "Popen"):
    setattr(subprocess, _name, _recorder(_name))

from flashinfer.jit import cpp_ext

graphs = []


def backend(gm, example_inputs):
    graphs.append(gm)
    return gm.forward


def f(x):
    if cpp_ext.is_cuda_version_at_least("12.8"):
        return x + 1
    return x - 1


phase[0] = "trace"
torch._dynamo.utils.counters.clear()
error = result = None
try:
    result = torch.compile(f, fullgraph=True, backend=backend)(torch.zeros(2)).tolist()
except Exception as e:
    error = "%s: %s" % (type(e).__name__, (str(e).strip().splitlines() or [""])[0])
breaks = sum(torch._dynamo.utils.counters["graph_break"].values())

# after the compile, eager calls: an nvcc 12.6 toolkit beside this "12.8" torch answers them, as without fp4patch
import os
phase[0] = "eager"
os.environ["CUDA_HOME"] = "/opt/cuda-12.6"


def _nvcc(args, **kwargs):
    calls.append(["eager", "check_output", repr(args)[:200]])
    return "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.6, V12.6.85\n"


subprocess.check_output = _nvcc
eager = dict(version=str(cpp_ext.get_cuda_version()), at_least_12_8=cpp_ext.is_cuda_version_at_least("12.8"))
print("MARK" + json.dumps(dict(calls=calls, graphs=len(graphs), breaks=breaks, error=error, result=result, eager=eager)))
""".replace("MARK", MARK)


#: Where Dynamo stops before torch 2.9, patched or not (make test-torch, 2026-12-02): in FlashInfer's JIT set-up, and in
#: packaging 26's ``Version()`` that the patched helper returns (packaging 24 traces there; break-it run, 2026-12-02).
OLD_DYNAMO_STOPS_AT = {
    (2, 7): "Unsupported: Unsupported method call",
    (2, 8): "InternalTorchDynamoError: AttributeError: 'UserDefinedExceptionObjectVariable' object has no attribute 'call_setattr'",
}


def _import_calls(child: dict) -> list[list[str]]:
    """The subprocess calls ``child`` recorded while importing, their temporary file names made equal (ctypes'
    ``find_library`` links into a fresh ``tempfile.mkstemp`` name each time: ``gcc -Wl,-t -o /tmp/tmpXXXX``)."""
    return [[c[0], c[1], re.sub(r"[^' ]*/tmp\w+", "TMP", c[2])] for c in child["calls"] if c[0] == "import"]


@pytest.mark.parametrize("version", VERSIONS)
def test_cuda_version_from_torch_keeps_subprocess_out_of_the_trace(tmp_path_factory, version: str) -> None:
    unpatched = _child(release_site(version, tmp_path_factory, bytecode=True), CUDA_CHILD, {})
    # the same set-up fails without the spec, so this test can fail: from torch 2.9 Dynamo runs the subprocess
    # call while tracing; torch 2.7 stops earlier in FlashInfer's JIT set-up, on a method call it does not
    # know, and torch 2.8 on an exception object it cannot set an attribute of (InternalTorchDynamoError:
    # 'UserDefinedExceptionObjectVariable' object has no attribute 'call_setattr'; make test-torch, 2026-12-02)
    if TORCH < Version("2.9"):
        assert unpatched["error"] and unpatched["graphs"] == 0, unpatched
    else:
        assert [c for c in unpatched["calls"] if c[0] == "trace"], unpatched

    patched = _child(applied_site(version, tmp_path_factory, CUDA), CUDA_CHILD, {})
    assert [c for c in patched["calls"] if c[0] == "trace"] == [], patched
    # eager stays eager, also after a compile traced the function (functools.cache holds no traced value): the
    # nvcc beside torch answers, so FlashInfer's JIT flags follow the toolkit that compiles (break-it run: nvcc 12.8
    # beside a cu130 torch got sm_120f flags when the early return held in eager calls too)
    assert patched["eager"] == {"version": "12.6", "at_least_12_8": False}, patched
    assert [c[1] for c in patched["calls"] if c[0] == "eager"] == ["check_output"], patched
    if TORCH < Version("2.9"):
        # torch 2.7's and 2.8's Dynamo cannot trace the patched helper itself either: no subprocess in the trace, but
        # no graph; the patched FlashInfer functions are ops and never trace it (docs/eager-stays-eager.md)
        assert patched["error"] == OLD_DYNAMO_STOPS_AT[TORCH.release[:2]], patched
        return
    # importing may run subprocesses of its own, the same with the spec as without: on a CUDA build of torch without a
    # GPU (make test-torch), ctypes.util.find_library runs ldconfig, gcc and ld while FlashInfer is imported
    assert _import_calls(patched) == _import_calls(unpatched), patched
    assert patched["error"] is None, patched
    assert patched["graphs"] == 1 and patched["breaks"] == 0, patched
    assert patched["result"] == [1.0, 1.0], "is_cuda_version_at_least('12.8') must be True with torch.version.cuda = '12.8'"


# --------------------------------------------------------------------------- #
# The custom op's Python body, on real CPU tensors
# --------------------------------------------------------------------------- #
COMMON = r"""
import importlib, inspect, json, sys
import torch
import flashinfer

P = json.loads(sys.argv[1])
mod = importlib.import_module(P["module"])
UNSET = getattr(mod, "_UNSET", object())
M, K = 256, 128
x = torch.randn(M, K, dtype=torch.bfloat16)
gs = torch.full((1,), 7.25, dtype=torch.float32)


def show(v):
    if isinstance(v, torch.Tensor):
        if v is x or (v.shape == x.shape and v.data_ptr() == x.data_ptr()):
            return "<x>"
        if v is gs or (v.numel() == 1 and float(v) == 7.25):
            return "<gs>"
        return "<tensor %s %s>" % (tuple(v.shape), v.dtype)
    if v is UNSET:
        return "<UNSET>"
    if v is inspect.Parameter.empty:
        return "<required>"
    return v


def value(v):
    return gs if v == "<gs>" else v


def meta(t):
    return [list(t.shape), list(t.stride()), str(t.dtype)]


kernel_calls = []


def _round_up(a, b):
    return (a + b - 1) // b * b


class Kernel:
    # stands for the JIT module: records what fp4_quantize passes, returns real-shaped outputs
    def fp4_quantize_sm100(self, *args, **kwargs):
        rec = dict(zip(P["kernel_params"], args))
        rec.update(kwargs)
        kernel_calls.append({k: show(v) for k, v in rec.items()})
        m, k = rec["input"].shape
        cols = k // rec["sf_vec_size"]
        if rec["is_sf_swizzled_layout"]:
            row = 8 if rec["is_sf_8x4_layout"] else 128
            n = _round_up(m, row) * _round_up(cols, 4)
        else:
            n = m * cols
        return torch.zeros(m, k // 2, dtype=torch.uint8), torch.zeros(n, dtype=torch.uint8)


mod.get_fp4_quantization_module = lambda backend="100": Kernel()
mod.get_compute_capability = lambda device: (10, 0)
mod.device_support_pdl = lambda device: "<auto-pdl>"
"""

OP_BODY_CHILD = COMMON + r"""
mod._fp4patch_fp4_quantize_ready()  # the block registers its op on first need
(op_name,) = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("fp4patch::fp4_quantize_")]
op = getattr(torch.ops.fp4patch, op_name.split("::")[1]).default
python_params = {n: show(p.default) for n, p in inspect.signature(inspect.unwrap(mod.fp4_quantize)).parameters.items()}
schema = [[a.name, show(a.default_value) if a.has_default_value() else "<required>"] for a in op._schema.arguments]
calls = P["calls"]

# 1. the module-level wrapper the op body calls, replaced by a keyword-only recorder
wrapper = mod.fp4_quantize
wrapper_calls = []


def record_wrapper(**kwargs):
    wrapper_calls.append({k: show(v) for k, v in kwargs.items()})
    return torch.zeros(1, dtype=torch.uint8), torch.zeros(1, dtype=torch.uint8)


mod.fp4_quantize = record_wrapper
for c in calls:
    op(x, **{k: value(v) for k, v in c.items()})
mod.fp4_quantize = wrapper

# 2. the real wrapper, down to the kernel (calls that stay on the fp4_quantize_sm100 path)
outputs = []
for c in P["kernel_calls"]:
    x_q, sf = op(x, **{k: value(v) for k, v in c.items()})
    outputs.append([meta(x_q), meta(sf)])
code_none = mod.nvfp4_4over6_code(None) if hasattr(mod, "nvfp4_4over6_code") else None
print("MARK" + json.dumps(dict(python_params=python_params, schema=schema, wrapper_calls=wrapper_calls,
                               kernel_calls=kernel_calls, outputs=outputs, code_none=code_none)))
""".replace("MARK", MARK)


def _one_hot_calls(names: list[str]) -> list[dict]:
    chosen = {n: NON_DEFAULT[n] for n in names if n != "input"}
    return [{}] + [{n: v} for n, v in chosen.items()] + [chosen]


@pytest.mark.parametrize("version", VERSIONS)
def test_op_body_forwards_every_argument_by_name(tmp_path_factory, version: str) -> None:
    site = applied_site(version, tmp_path_factory)
    source = (site / FP4_FILE[version]).read_text(encoding="utf-8")
    signature = _function(ast.parse(source), "fp4_quantize").args
    params = [a.arg for a in signature.args + signature.kwonlyargs]
    assert set(params) - {"input"} <= set(NON_DEFAULT), f"a parameter without a non-default test value: {set(params) - set(NON_DEFAULT)}"
    kernel_params = _kernel_params(source)
    calls = _one_hot_calls(params)
    kernel_path_calls = [c for c in calls if not (set(c) & OFF_KERNEL_PATH)]
    child_params = {"module": module_name(version), "kernel_params": kernel_params, "calls": calls, "kernel_calls": kernel_path_calls}
    result = _child(site, OP_BODY_CHILD, child_params)

    # the op has every parameter of this version's fp4_quantize, with the same defaults
    defaults = result["python_params"]
    assert list(defaults) == params
    assert [n for n, _ in result["schema"]] == params
    for name, op_default in result["schema"]:
        if name == "nvfp4_4over6":  # "omitted" crosses the schema as -1
            assert (defaults[name], op_default) == ("<UNSET>", -1)
        else:
            assert op_default == defaults[name], name

    def python_value(name, v):
        return None if name == "nvfp4_4over6" and v == 0 else v

    # 1. the op body hands every argument to the wrapper under its own name
    assert len(result["wrapper_calls"]) == len(calls)
    for sent, got in zip(calls, result["wrapper_calls"]):
        expected = {**defaults, "input": "<x>", **{n: python_value(n, v) for n, v in sent.items()}}
        assert got == expected, f"op called with {sent}"

    # 2. ... and the wrapper hands them on to the kernel
    assert len(result["kernel_calls"]) == len(kernel_path_calls)
    for sent, got in zip(kernel_path_calls, result["kernel_calls"]):
        merged = {**defaults, **sent}
        expected = {}
        for name in kernel_params:
            if name == "input":
                expected[name] = "<x>"
            elif name == "enable_pdl":
                expected[name] = "<auto-pdl>" if merged[name] is None else merged[name]
            elif name == "nvfp4_4over6_code":
                expected[name] = result["code_none"]
            else:
                expected[name] = merged[name]
        assert got == expected, f"op called with {sent}"
    for sent, (q, sf) in zip(kernel_path_calls, result["outputs"]):
        assert q == [[256, 64], [64, 1], "torch.uint8"], sent


# --------------------------------------------------------------------------- #
# Eager calls: unchanged, never through the op
# --------------------------------------------------------------------------- #
EAGER_CHILD = COMMON + r"""
op_calls = []
patched = hasattr(mod, "_fp4patch_fp4_quantize_entry")
if patched:
    def record_op(*args, **kwargs):
        op_calls.append(sorted(kwargs))
        return torch.zeros(1, dtype=torch.uint8), torch.zeros(1, dtype=torch.uint8)
    mod._fp4patch_fp4_quantize_entry = record_op

kwargs = dict(sf_vec_size=32, sf_use_ue8m0=True, is_sf_8x4_layout=True, enable_pdl=False)
x_q, sf = flashinfer.fp4_quantize(x, gs, **kwargs)
eager = dict(op_calls=list(op_calls), kernel_calls=list(kernel_calls), outputs=[meta(x_q), meta(sf)])
forced = None
if patched:  # control: what Dynamo traces in fp4_quantize's place (the block's copy of it) reaches the op
    import torch._dynamo  # noqa: F401 - the block's callback makes that copy when torch._dynamo is imported

    traced = mod._fp4patch_fp4_quantize_traceable["fp4_quantize"]
    flashinfer.fp4_quantize(x, gs, **kwargs)  # the public function itself, also now: the original code
    traced(x, gs, **kwargs)
    forced = dict(op_calls=op_calls[len(eager["op_calls"]):], kernel_calls=len(kernel_calls) - len(eager["kernel_calls"]))
exported = None
if patched:  # what non-strict torch.export enters while it runs the model in Python (fake tensors): the op;
    # a real call while that flag is set (another thread's, an op body's): the original code
    from torch._export.utils import _compiling_state_context
    from torch._subclasses.fake_tensor import FakeTensorMode

    seen, kernels = len(op_calls), len(kernel_calls)
    with _compiling_state_context():
        with FakeTensorMode() as fake_mode:
            flashinfer.fp4_quantize(fake_mode.from_tensor(x), fake_mode.from_tensor(gs), **kwargs)
        traced_ops, traced_kernels = len(op_calls) - seen, len(kernel_calls) - kernels
        flashinfer.fp4_quantize(x, gs, **kwargs)
        is_compiling = torch.compiler.is_compiling()
    exported = dict(op_calls=traced_ops, kernel_calls=traced_kernels, is_compiling=is_compiling,
                    real_op_calls=len(op_calls) - seen - traced_ops, real_kernel_calls=len(kernel_calls) - kernels - traced_kernels)
print("MARK" + json.dumps(dict(patched=patched, eager=eager, forced=forced, exported=exported)))
""".replace("MARK", MARK)


@pytest.mark.parametrize("version", VERSIONS)
def test_eager_call_does_not_go_through_the_op(tmp_path_factory, version: str) -> None:
    pristine = release_site(version, tmp_path_factory, bytecode=True)
    site = applied_site(version, tmp_path_factory)
    params = {"module": module_name(version), "kernel_params": _kernel_params((pristine / FP4_FILE[version]).read_text(encoding="utf-8"))}
    before = _child(pristine, EAGER_CHILD, params)
    after = _child(site, EAGER_CHILD, params)
    assert before["patched"] is False and after["patched"] is True
    assert after["eager"]["op_calls"] == []
    assert len(after["eager"]["kernel_calls"]) == 1
    assert after["eager"] == before["eager"], "the eager call must reach the kernel exactly as unpatched"
    assert after["forced"]["kernel_calls"] == 1, "the public function, called again, runs the original code"
    assert len(after["forced"]["op_calls"]) == 1 and "input" in after["forced"]["op_calls"][0]
    # non-strict torch.export runs the model in Python on fake tensors with torch.compiler._is_compiling_flag
    # set: the op; a real call while the flag is set: the kernel, once
    assert after["exported"] == {"op_calls": 1, "kernel_calls": 0, "is_compiling": True, "real_op_calls": 0, "real_kernel_calls": 1}


@pytest.mark.parametrize("version", VERSIONS)
def test_redirect_is_first_after_docstring_and_the_rest_unchanged(tmp_path_factory, version: str) -> None:
    pristine = release_site(version, tmp_path_factory, bytecode=True)
    original = _function(ast.parse((pristine / FP4_FILE[version]).read_text(encoding="utf-8")), "fp4_quantize")
    site = applied_site(version, tmp_path_factory)
    patched = _function(ast.parse((site / FP4_FILE[version]).read_text(encoding="utf-8")), "fp4_quantize")

    (redirect_op,) = [op for op in _fullgraph_target_ops(version).operations if op.kind == "insert-at-function-start"]
    redirect = ast.parse(redirect_op.code).body
    assert len(redirect) == 1 and isinstance(redirect[0], ast.If)
    assert isinstance(patched.body[0], ast.Expr) and isinstance(patched.body[0].value, ast.Constant), "docstring first"
    assert ast.dump(patched.body[0]) == ast.dump(original.body[0])
    assert ast.dump(patched.body[1]) == ast.dump(redirect[0]), "the redirect must be the first statement after the docstring"
    assert [ast.dump(s) for s in patched.body[2:]] == [ast.dump(s) for s in original.body[1:]], "the eager body must be unchanged"
    assert ast.dump(patched.args) == ast.dump(original.args)
    assert [ast.dump(d) for d in patched.decorator_list] == [ast.dump(d) for d in original.decorator_list]

    # the redirect is guarded by the compile flag (then by what this thread traces) and forwards every
    # parameter by keyword, nothing positional
    assert ast.unparse(patched.body[1].test) == "_fp4patch_fp4_quantize_compiler._is_compiling_flag and _fp4patch_fp4_quantize_tracing()"
    (ret,) = [n for n in ast.walk(patched.body[1]) if isinstance(n, ast.Return)]
    assert isinstance(ret.value, ast.Call) and ast.unparse(ret.value.func) == "_fp4patch_fp4_quantize_entry"
    assert ret.value.args == []
    names = [a.arg for a in original.args.args + original.args.kwonlyargs]
    assert [k.arg for k in ret.value.keywords] == names
