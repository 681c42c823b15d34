"""The GEMM op sources (``patches/flashinfer-python/ops/bmm_fp8.py``, ``mm_fp4.py``) on the real wheels, on CPU.

Every check that imports FlashInfer runs in a fresh interpreter (``_child`` of test_trace_fullgraph,
``PYTHONPATH=<pristine site>``). The child stubs the device queries (``cuda:0`` reports SM100,
``cuda:1`` SM90), executes the op source with ``WRAPPER`` bound to the installed, decorated wrapper
(a keyword filter drops the parameters this release lacks, which must then hold the op source's
defaults: what the custom-op renderer does to the source) and ``OP`` bound to a custom op registered
from the source's ``op`` / ``fake`` / ``MUTATES_ARGS`` (namespace ``fp4patch_test``), with the release
data of the spec target fp4patch applies to that release. Then, on fake CUDA tensors (``FakeTensorMode``):

* over the product's case grid (``patches/flashinfer-python/grids/<function>.py``, given the spec target's
  params and release data, run by ``fp4patch/probes/fake_check_probe.py``'s ``run_function``, the check fp4patch
  runs on a release it never saw): the real wrapper runs eagerly with only the kernel side replaced (the
  grid's ``stubs``, ``grids/_gemm.py``: the JIT loaders and runner factories, the autotuner's choice, the
  workspace caches, the CUDA-version and cuDNN probes); its own checks, backend heuristic and output
  allocation run as shipped. ``entry`` (→ the registered op → ``fake``) runs on the same arguments. Per
  case: the same output (shape, stride, dtype; ``out`` itself when given) or the same exception class and
  message, the kernel reached by the wrapper and never by ``entry``;
* symbolic M, backed and unbacked (``ShapeEnv``), through ``entry`` and the fake: no guard on data;
* ``torch.compile(fullgraph=True)`` of ``entry`` with ``mark_dynamic`` / ``mark_unbacked`` M: one graph,
  one op node.

After ``fp4patch apply``: the public function under fullgraph, eager calls (the grid's cases at M = 0 and
8, under the grid's stubs) unchanged and never through the op, the op body forwarding by name.
"""

from __future__ import annotations

import importlib.util

import pytest

from fp4patch.ops.render import check_op_source, release_data, render

from . import op_grids
from .conftest import SPECS_DIR, applied_site, release_site
from .test_trace_fullgraph import MARK, _child

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

VERSIONS = ["0.6.0", "0.7.4"]
OPS = SPECS_DIR / "flashinfer-python" / "ops"


def _op_target(function: str, version: str):
    """The ``CustomOpTarget`` of ``function``'s spec target for ``version`` (its params and release data)."""
    (op,) = [kw["target"] for kind, kw in op_grids.target(function, version).operation_specs if kind == "custom-op"]
    return op


PRELUDE = r"""
import collections, inspect, json, pathlib, sys, types
import torch

P = json.loads(sys.argv[1])
CAPS = {0: (10, 0), 1: (9, 0)}


def _index(device=None):
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    device = torch.device(device)
    return device.index or 0


Props = collections.namedtuple("Props", "major minor name multi_processor_count total_memory")
torch.cuda.get_device_capability = lambda device=None: CAPS[_index(device)]
torch.cuda.get_device_properties = lambda device=None: Props(*CAPS[_index(device)], "fp4patch-test", 148, 1 << 37)
torch.cuda.current_device = lambda: 0

import flashinfer
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

FN = P["function"]
real = getattr(flashinfer, FN)
gb = sys.modules[inspect.unwrap(real).__module__]  # flashinfer/gemm.py before 0.5.3, flashinfer/gemm/gemm_base.py from 0.5.3
real_params = inspect.signature(inspect.unwrap(real)).parameters

"""

OP_SOURCE = r"""
# ---- the op source, bound as the renderer binds it --------------------------------------
module = types.ModuleType("fp4patch_op_source_" + FN)  # a real module: Dynamo looks up its globals by name
sys.modules[module.__name__] = module
ns = module.__dict__
from fp4patch.ops.render import plain_source, read_helpers  # OP_PARAMS expanded, shared helpers inlined
text = open(P["op_source"]).read()
exec(compile(plain_source(text, read_helpers(text, pathlib.Path(P["op_source"]).parent)), P["op_source"], "exec"), ns)
ns["RELEASE"].update(P["release"])
source_params = inspect.signature(ns["op"]).parameters
absent = {n: p.default for n, p in source_params.items() if n not in real_params}


def wrapper_shim(**kwargs):
    for name, default in absent.items():
        if name in kwargs and kwargs.pop(name) != default:
            raise AssertionError("%s: %s is not a parameter of this release" % (FN, name))
    return real(**kwargs)


ns["WRAPPER"] = wrapper_shim
if hasattr(real, "is_backend_supported"):  # @backend_requirement (0.5.3+)
    wrapper_shim.is_backend_supported = real.is_backend_supported
lib_op = torch.library.custom_op("fp4patch_test::" + FN, mutates_args=ns["MUTATES_ARGS"])(ns["op"])
lib_op.register_fake(ns["fake"])
OP = getattr(torch.ops.fp4patch_test, FN).default
ns["OP"] = OP

"""

HELPERS = r"""
# ---- cases ----------------------------------------------------------------------------------
def dt(name):
    return getattr(torch, name)


def pad(x, y):
    return (x + y - 1) // y * y


def build(c, m):
    dev = "cpu" if c.get("cpu") else "cuda:%d" % c.get("device", 0)
    if FN == "bmm_fp8":
        A = torch.empty(c["batch"], m, c["k"], dtype=dt(c["a_dtype"]), device=dev)
        B = torch.empty(c["batch"], c["n"], c["k"], dtype=dt(c["b_dtype"]), device=dev).transpose(-2, -1)
        kw = dict(A=A, B=B, A_scale=torch.ones((), dtype=torch.float32, device=dev),
                  B_scale=torch.ones((), dtype=torch.float32, device=dev), dtype=dt(c["dtype"]))
        if c["out"]:
            kw["out"] = torch.empty(c["batch"], m, c["n"], dtype=dt(c["out_dtype"]), device=dev)
    else:
        k, n, bs = c["k"], c["n"], c["block_size"]
        a = torch.empty(m, k // 2, dtype=dt(c["a_dtype"]), device=dev)
        b = torch.empty(n, k // 2, dtype=dt(c["a_dtype"]), device=dev).t()
        rows = 8 if c["use_8x4"] else 128
        a_sf = torch.empty(pad(m, rows), pad(k // bs, 4), dtype=dt(c["sf_dtypes"][0]), device=dev)
        b_sf = torch.empty(pad(n, 128), pad(k // bs, 4), dtype=dt(c["sf_dtypes"][1]), device=dev).t()
        alpha = {"none": None, "0d": torch.ones((), dtype=dt(c["alpha_dtype"]), device=dev),
                 "1": torch.ones(1, dtype=dt(c["alpha_dtype"]), device=dev),
                 "m": torch.ones(m, dtype=dt(c["alpha_dtype"]), device=dev),
                 "3": torch.ones(3, dtype=dt(c["alpha_dtype"]), device=dev)}[c["alpha"]]
        kw = dict(a=a, b=b, a_descale=a_sf, b_descale=b_sf, alpha=alpha, out_dtype=dt(c["out_dtype"]),
                  block_size=bs, use_8x4_sf_layout=c["use_8x4"], use_nvfp4=c["use_nvfp4"])
        if c["out"]:
            shape = (m, n) if c["out"] == "contiguous" else (n, m)
            out = torch.empty(shape, dtype=dt(c["out_dtype"]), device=dev)
            kw["out"] = out if c["out"] == "contiguous" else out.t()
    if c.get("backend") is not None:
        kw["backend"] = c["backend"]
    return kw


def meta(t):
    return [[str(d) for d in t.shape], [str(d) for d in t.stride()], str(t.dtype)]


"""

ORACLE = r"""
# ---- the product's case grid: the wrapper (kernel side replaced) against entry -> op -> fake ------
import importlib.util
from fp4patch.probes import oracle as ko

_spec = importlib.util.spec_from_file_location("_fp4patch_fake_check_probe", P["probe"])
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)
rec = ko.KernelRecorder()
with ko.device_stubs(), ko.jit_modules_replaced(rec):
    summary, records = probe.run_function(ko, flashinfer, torch, rec, P["request"], fake=ns["entry"])
grid = {"error": summary["error"], "records": records}

"""

CHILD = PRELUDE + OP_SOURCE + HELPERS + ORACLE + r"""


# ---- symbolic M: the fake under a ShapeEnv ----------------------------------------------------
def symbolic(c, kind):
    env = ShapeEnv()
    with FakeTensorMode(shape_env=env, allow_non_fake_inputs=True):
        if kind == "unbacked":
            m = env.create_unbacked_symint()
            torch._check(m >= 1)
            torch._check(m <= 1 << 20)
        else:
            from torch._dynamo.source import ConstantSource
            m = env.create_symintnode(env.create_symbol(c["m"], source=ConstantSource("m")), hint=c["m"])
        kw = build(c, m)
        try:
            r = ns["entry"](**kw)
        except Exception as e:
            return ["error", type(e).__name__, str(e).splitlines()[0]]
        return ["ok", meta(r), str(m), len(env.guards)]


sym = [[c, kind, symbolic(c, kind)] for c in P["symbolic_cases"] for kind in ("backed", "unbacked")]


# ---- torch.compile(fullgraph=True) of entry ---------------------------------------------------
def compiled(c, kind):
    import torch._dynamo
    torch._dynamo.reset()
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    with FakeTensorMode(allow_non_fake_inputs=True):
        kw = build(c, c["m"])
        tensors = {k: v for k, v in kw.items() if isinstance(v, torch.Tensor)}
        rest = {k: v for k, v in kw.items() if k not in tensors}
        first = "A" if FN == "bmm_fp8" else "a"
        dim = 1 if FN == "bmm_fp8" else 0
        if kind == "unbacked":
            # M read from data inside the graph (.item()): an unbacked symbol, as vLLM's unbacked mode
            # gives (mark_unbacked on an input that is already fake is specialised by Dynamo)
            tensors["m"] = torch.tensor(c["m"])
        else:
            torch._dynamo.mark_dynamic(tensors[first], dim)

        def f(**t):
            if "m" in t:
                m = t.pop("m").item()
                torch._check(m >= 2)
                torch._check(m <= t[first].shape[dim])
                t[first] = t[first].narrow(dim, 0, m)
            return ns["entry"](**t, **rest)

        try:
            with torch._dynamo.config.patch(capture_scalar_outputs=True):
                r = torch.compile(f, fullgraph=True, backend=record)(**tensors)
        except Exception as e:
            return ["error", type(e).__name__, str(e).splitlines()[0]]
    ops = [str(n.target) for gm in graphs for n in gm.graph.nodes
           if n.op == "call_function" and "fp4patch_test" in str(n.target)]
    # the traced output (symbolic where Dynamo kept M symbolic), not the value of this run
    (output,) = [n for n in graphs[0].graph.nodes if n.op == "output"]
    traced = [meta(a.meta["example_value"]) for a in torch.utils._pytree.tree_leaves(output.args) if hasattr(a, "meta")]
    return ["ok", len(graphs), ops, traced]


comp = [[c, kind, compiled(c, kind)] for c in P["symbolic_cases"][:1] for kind in ("backed", "unbacked")]
defaults = {n: repr(p.default) for n, p in real_params.items() if p.default is not inspect.Parameter.empty}
source_defaults = {n: repr(p.default) for n, p in source_params.items() if p.default is not inspect.Parameter.empty}
print("MARK" + json.dumps(dict(grid=grid, symbolic=sym, compiled=comp, absent=sorted(absent),
                               params=list(real_params), defaults=defaults, source_defaults=source_defaults,
                               schema=str(OP._schema))))
""".replace("MARK", MARK)


def _symbolic_cases(function: str) -> list[dict]:
    if function == "bmm_fp8":
        base = {"batch": 2, "k": 64, "n": 80, "a_dtype": "float8_e4m3fn", "b_dtype": "float8_e4m3fn", "dtype": "bfloat16", "out_dtype": "bfloat16", "m": 129}
        return [{**base, "backend": "cublas", "out": False}, {**base, "backend": "auto", "out": True}]
    base = {"k": 256, "n": 256, "a_dtype": "uint8", "sf_dtypes": ["float8_e4m3fn", "uint8"], "alpha": "0d", "alpha_dtype": "float32",
                "out_dtype": "bfloat16", "block_size": 16, "use_8x4": False, "use_nvfp4": True, "m": 129}
    return [
        {**base, "backend": "cutlass", "out": False},
        {**base, "backend": "trtllm", "use_8x4": True, "out": "contiguous"},
        {**base, "backend": "auto", "alpha": "1", "out": False},
    ]


_results: dict[tuple[str, str], dict] = {}


def _run(function: str, version: str, tmp_path_factory) -> dict:
    """One child per (function, version), shared by the tests below."""
    key = (function, version)
    if key not in _results:
        request = op_grids.request(function, version)
        params = {
            "function": function,
            "op_source": str(OPS / f"{function}.py"),
            "release": request.release,
            "probe": str(op_grids.PROBE),
            "request": op_grids.as_json(request),
            "symbolic_cases": _symbolic_cases(function),
        }
        _results[key] = _child(release_site(version, tmp_path_factory, sources_only=True), CHILD, params)
    return _results[key]


FUNCTIONS = ["bmm_fp8", "mm_fp4"]
# bmm_fp8 is also patched on 0.5.x (mm_fp4 there: declared unsupported by its spec)
# make test: 0.5.3 stands for the 0.5.x releases, 0.5.0 runs in make test-eras
PAIRS = [
    pytest.param("bmm_fp8", "0.5.0", marks=pytest.mark.eras),
    *[("bmm_fp8", v) for v in ("0.5.3", *VERSIONS)],
    *[("mm_fp4", v) for v in VERSIONS],
]
# the compile and eager checks of 0.5.3 (two children each) run in make test-eras too; the fake,
# default and symbolic checks above keep 0.5.3 in make test
TRACE_PAIRS = [pytest.param(*p, marks=pytest.mark.eras) if p == ("bmm_fp8", "0.5.3") else p for p in PAIRS]


def _case_failure(case: dict, r: dict) -> str:
    """Why one grid case fails the oracle check ("" when it passes)."""
    if case.get("unchecked"):
        return f"unchecked on a release the suite knows: {case['unchecked']}"
    if r["real"] != r["fake"]:
        return f"real: {r['real']} kernels={r['kernels']}\n    fake: {r['fake']}"
    if r["fake_kernels"]:
        return f"entry reached a kernel: {r['fake_kernels']}"
    if "ok" in r["real"]:
        if not r["kernels"]:
            return "the real call never reached the (stubbed) kernel"
        given = "out" in case["kwargs"]  # out= given: the wrapper returns it, and so does entry
        if (len(r["real"]["ok"]) == 4 and r["real"]["ok"][3] == "out") != given:
            return f"out= {'given' if given else 'absent'}, the wrapper returned {r['real']['ok']}"
    return ""


#: grid cases a release's fake knowingly leaves to the op body (the grid marks them unchecked)
KNOWN_UNCHECKED = {("bmm_fp8", "0.5.0"): ["cutlass on SM90"]}


@pytest.mark.parametrize(("function", "version"), PAIRS)
def test_fake_matches_the_wrappers_own_allocation_and_refusals(function: str, version: str, tmp_path_factory) -> None:
    result = _run(function, version, tmp_path_factory)
    grid = result["grid"]
    cases = op_grids.cases(function, version)
    assert not grid["error"], grid["error"]
    assert [r["name"] for r in grid["records"]] == [c["name"] for c in cases]
    unchecked = [c["name"] for c in cases if c.get("unchecked")]
    assert unchecked == KNOWN_UNCHECKED.get((function, version), []), unchecked
    failures = [f"{c['name']}\n    {why}" for c, r in zip(cases, grid["records"]) if not c.get("unchecked") and (why := _case_failure(c, r))]
    assert not failures, f"{len(failures)} of {len(cases)} cases differ:\n" + "\n".join(failures)
    accepted = sum(1 for r in grid["records"] if r["real"] and "ok" in r["real"])
    refused = sum(1 for r in grid["records"] if r["real"] and "error" in r["real"])
    # the grid holds both kinds, so neither check is vacuous
    assert accepted >= 32 and refused >= 4, (accepted, refused)


@pytest.mark.parametrize(("function", "version"), PAIRS)
def test_op_source_defaults_are_the_wrappers(function: str, version: str, tmp_path_factory) -> None:
    result = _run(function, version, tmp_path_factory)
    for name, default in result["defaults"].items():
        assert result["source_defaults"].get(name) == default, name
    # what this release lacks is exactly what the op source adds for newer releases
    expected_absent = {"bmm_fp8": {"0.5.0": ["batch_invariant"], "0.5.3": ["batch_invariant"], "0.6.0": ["batch_invariant"], "0.7.4": []}, "mm_fp4": {"0.6.0": ["batch_invariant", "enable_pdl"], "0.7.4": []}}
    assert result["absent"] == expected_absent[function][version]
    assert tuple(result["params"]) == _op_target(function, version).params
    assert "Tensor(a" in result["schema"] and "!)? out" in result["schema"] and result["schema"].endswith("-> ()"), result["schema"]


@pytest.mark.parametrize(("function", "version"), PAIRS)
def test_fake_with_symbolic_m_never_guards(function: str, version: str, tmp_path_factory) -> None:
    result = _run(function, version, tmp_path_factory)
    assert len(result["symbolic"]) == 2 * len(_symbolic_cases(function))
    for case, kind, got in result["symbolic"]:
        assert got[0] == "ok", f"{kind} {case}: {got}"
        shape, _stride, _ = got[1]
        m = got[2]
        # out keeps M symbolic where the wrapper puts it: (batch, M, N) / (M, N), or transposed when given so
        assert m in shape, (kind, case, got)
        if kind == "unbacked":
            assert m.startswith("u"), got


@pytest.mark.parametrize(("function", "version"), PAIRS)
def test_entry_compiles_fullgraph_with_dynamic_and_unbacked_m(function: str, version: str, tmp_path_factory) -> None:
    result = _run(function, version, tmp_path_factory)
    assert [kind for _, kind, _ in result["compiled"]] == ["backed", "unbacked"]
    for case, kind, got in result["compiled"]:
        assert got[0] == "ok", f"{kind} {case}: {got}"
        _, graphs, ops, traced = got
        assert graphs == 1 and ops == [f"fp4patch_test.{function}.default"], got
        shape, _, dtype = traced[0]  # the returned out (the unbacked case also hands back its narrowed input)
        assert any(d.startswith("u" if kind == "unbacked" else "s") for d in shape), f"M was specialised: {got}"
        assert dtype == "torch.bfloat16"


def test_op_sources_render_for_every_release_data_used_here() -> None:
    """The renderer's own check accepts each op source with the spec target's release data and parameters."""
    for function, version in [("bmm_fp8", "0.5.0"), ("bmm_fp8", "0.5.3"), *[(f, v) for f in FUNCTIONS for v in VERSIONS]]:
        target = _op_target(function, version)
        check_op_source(target)
        assert render(target).op_name.startswith(f"fp4patch::{function}_")
        assert op_grids.request(function, version).release == release_data(target)


# --------------------------------------------------------------------------- #
# After `fp4patch apply`: the public function under fullgraph, eager calls, forwarding by name
# --------------------------------------------------------------------------- #
SPEC = {"bmm_fp8": "bmm-fp8-fullgraph", "mm_fp4": "mm-fp4-fullgraph"}

TRACE_CHILD = PRELUDE + HELPERS + r"""
import torch._dynamo

POSITIONAL = {"bmm_fp8": 5, "mm_fp4": 6}[FN]  # as vLLM / SGLang call them: tensors, scales, (alpha,) dtype
results = []
for c in P["cases"]:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    error = where = None
    with FakeTensorMode(allow_non_fake_inputs=True):
        kw = build(c, c["m"])
        names = list(kw)
        tensors = {k: v for k, v in kw.items() if isinstance(v, torch.Tensor)}
        rest = {k: v for k, v in kw.items() if k not in tensors}
        if c.get("dynamic"):
            torch._dynamo.mark_dynamic(tensors["A" if FN == "bmm_fp8" else "a"], 1 if FN == "bmm_fp8" else 0)
        fn = getattr(flashinfer, FN)

        def f(**t):
            merged = {**t, **rest}
            if c.get("positional"):
                args = [merged.pop(n) for n in names[:POSITIONAL]]
                return fn(*args, **merged)
            return fn(**merged)

        try:
            r = torch.compile(f, fullgraph=True, backend=record)(**tensors)
        except Exception as e:
            text = str(e)
            error = "%s: %s" % (type(e).__name__, (text.strip().splitlines() or [""])[0])
            frames = [ln.strip() for ln in text.splitlines() if "/flashinfer/" in ln and ", line " in ln]
            where = frames[-1].split("/flashinfer/", 1)[1] if frames else None
    ops = [str(n.target) for gm in graphs for n in gm.graph.nodes
           if n.op == "call_function" and "fp4patch" in str(n.target)]
    traced = None
    if error is None and len(graphs) == 1:
        (output,) = [n for n in graphs[0].graph.nodes if n.op == "output"]
        traced = [meta(a.meta["example_value"]) for a in torch.utils._pytree.tree_leaves(output.args) if hasattr(a, "meta")]
    results.append(dict(case=c, error=error, where=where, graphs=len(graphs),
                        breaks=sum(torch._dynamo.utils.counters["graph_break"].values()), ops=ops, traced=traced))
print("MARK" + json.dumps(results))
""".replace("MARK", MARK)

EAGER_CHILD = PRELUDE + r"""
# the grid's cases P["cases"] eagerly, under the grid's stubs; patched: any call through the op recorded
import contextlib, importlib.util
from fp4patch.probes import oracle as ko

_spec = importlib.util.spec_from_file_location("_fp4patch_fake_check_probe", P["probe"])
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)
grid = ko.load_grid(P["grid"], "_fp4patch_grid_" + FN)
entry_calls = []
name = "_fp4patch_%s_entry" % FN
if hasattr(gb, name):  # patched: register the op (done on first need), then record any call that would go through it
    getattr(gb, "_fp4patch_%s_ready" % FN)()
    setattr(gb, name, lambda **kw: entry_calls.append(sorted(kw)))
fn = getattr(flashinfer, FN)
rec = ko.KernelRecorder()
results = []
with ko.device_stubs(), ko.jit_modules_replaced(rec), grid.stubs(ko, rec, flashinfer), ko.fake_mode(), ko.fake_cuda_indexing():
    for c in P["cases"]:
        with ko.device_stubs(tuple(c["device"])) if c.get("device") else contextlib.nullcontext():
            args = [probe.build(a, gb, ko, torch) for a in c["args"]]
            kwargs = {k: probe.build(v, gb, ko, torch) for k, v in c["kwargs"].items()}
            launched = len(rec.calls)
            results.append([c["name"], ko.call_outcome(fn, args, kwargs), rec.names()[launched:]])
print("MARK" + json.dumps(dict(patched=hasattr(gb, name), results=results, entry_calls=entry_calls)))
""".replace("MARK", MARK)

FORWARD_CHILD = PRELUDE + HELPERS + r"""
getattr(gb, "_fp4patch_%s_ready" % FN)()  # the op is registered on first need
op = inspect.getclosurevars(inspect.unwrap(getattr(gb, "_fp4patch_%s_entry" % FN))).nonlocals["OP"]
schema = [a.name for a in op._schema.arguments]
calls = []
built = {}


def show(v):
    for k, t in built.items():
        if isinstance(v, torch.Tensor) and v is t:
            return "<%s>" % k
    return repr(v)


def recorder(**kwargs):  # stands for WRAPPER: the module-level wrapper the op body calls
    calls.append({k: show(v) for k, v in kwargs.items()})
    return kwargs["out"]


setattr(gb, FN, recorder)
base = P["base"]
for change in P["calls"]:
    built = build({**base, "cpu": True, "out": "contiguous" if FN == "mm_fp4" else True}, base["m"])
    values = {k: (getattr(torch, v[len("torch."):]) if isinstance(v, str) and v.startswith("torch.") else v) for k, v in change.items()}
    op(**{**built, **values})
print("MARK" + json.dumps(dict(schema=schema, calls=calls)))
""".replace("MARK", MARK)


def _trace_cases(function: str) -> list[dict]:
    if function == "bmm_fp8":
        base = {"batch": 2, "k": 64, "n": 80, "a_dtype": "float8_e4m3fn", "b_dtype": "float8_e4m3fn", "dtype": "bfloat16", "out_dtype": "bfloat16",
                "out": False, "backend": None}
        return [
            {**base, "m": 8},
            {**base, "m": 129, "dynamic": True, "backend": "auto"},
            {**base, "m": 1, "backend": "cutlass", "out": True},
            {**base, "m": 127, "positional": True, "backend": "auto", "dtype": "float16"},
        ]
    base = {"k": 256, "n": 256, "a_dtype": "uint8", "sf_dtypes": ["float8_e4m3fn", "uint8"], "alpha": "0d", "alpha_dtype": "float32",
            "out_dtype": "bfloat16", "block_size": 16, "use_8x4": False, "use_nvfp4": True, "out": False, "backend": None}
    return [
        {**base, "m": 8},
        {**base, "m": 129, "dynamic": True, "backend": "cutlass"},
        {**base, "m": 1, "backend": "trtllm", "use_8x4": True, "out": "contiguous"},
        {**base, "m": 127, "positional": True, "backend": "auto"},
        {**base, "m": 8, "positional": True, "backend": "cudnn", "sf_dtypes": ["float8_e4m3fn", "float8_e4m3fn"]},
    ]


def _expected_out(function: str, case: dict) -> list:
    if function == "bmm_fp8":
        b, m, n = case["batch"], case["m"], case["n"]
        return [[str(b), str(m), str(n)], [str(m * n), str(n), "1"], f"torch.{case['dtype'] if not case['out'] else case['out_dtype']}"]
    m, n = case["m"], case["n"]
    return [[str(m), str(n)], [str(n), "1"], f"torch.{case['out_dtype']}"]



@pytest.mark.parametrize(("function", "version"), TRACE_PAIRS)
def test_public_function_is_one_graph_with_one_op_node_after_apply(function: str, version: str, tmp_path_factory) -> None:
    cases = _trace_cases(function)
    # unpatched: Dynamo stops inside FlashInfer (the wall is named in the report); every case hits
    # the same JIT loader, so the first case shows it
    (before,) = _child(release_site(version, tmp_path_factory, bytecode=True), TRACE_CHILD, {"function": function, "cases": cases[:1]})
    assert before["error"] and before["error"].startswith(("Unsupported", "InternalTorchDynamoError", "TorchRuntimeError")), before
    assert before["where"], before
    site = applied_site(version, tmp_path_factory, SPEC[function])
    patched = _child(site, TRACE_CHILD, {"function": function, "cases": cases})
    assert len(patched) == len(cases)
    for after in patched:
        case = after["case"]
        assert after["error"] is None, after
        assert after["graphs"] == 1 and after["breaks"] == 0, after
        assert len(after["ops"]) == 1 and after["ops"][0].startswith(f"fp4patch.{function}_"), after
        (shape, stride, dtype) = after["traced"][0]
        expected = _expected_out(function, case)
        if case.get("dynamic"):
            assert shape[1 if function == "bmm_fp8" else 0].startswith("s"), after  # M stayed symbolic
        else:
            assert [shape, stride, dtype] == expected, after


@pytest.mark.parametrize(("function", "version"), TRACE_PAIRS)
def test_eager_calls_never_go_through_the_op(function: str, version: str, tmp_path_factory) -> None:
    # the grid's cases at M = 0 and 8 (A [batch, M, K] / a [M, K/2]), every backend "auto" included
    token_dim = 1 if function == "bmm_fp8" else 0
    cases = [c for c in op_grids.cases(function, version) if c["args"][0]["t"][token_dim] in (0, 8) and not c.get("unchecked")]
    assert any(c["kwargs"].get("backend") == "auto" for c in cases) and len(cases) >= 20
    params = {"function": function, "cases": cases, "probe": str(op_grids.PROBE), "grid": str(op_grids.request(function, version).grid)}
    before = _child(release_site(version, tmp_path_factory, bytecode=True), EAGER_CHILD, params)
    site = applied_site(version, tmp_path_factory, SPEC[function])
    after = _child(site, EAGER_CHILD, params)
    assert before["patched"] is False and after["patched"] is True
    assert after["entry_calls"] == []
    assert any(kernels for _, _, kernels in after["results"]), "no case reached the (stubbed) kernel"
    differ = [f"{b[0]}\n  unpatched: {b[1:]}\n  patched:   {a[1:]}" for b, a in zip(before["results"], after["results"]) if a != b]
    assert not differ, "\n".join(differ)


NON_DEFAULT = {
    "bmm_fp8": {"dtype": "torch.float16", "backend": "cutlass", "batch_invariant": True},
    "mm_fp4": {"alpha": None, "out_dtype": "torch.float16", "block_size": 32, "use_8x4_sf_layout": True, "backend": "trtllm", "use_nvfp4": False,
               "enable_pdl": False, "batch_invariant": True},
}


@pytest.mark.parametrize(("function", "version"), PAIRS)
def test_op_body_forwards_every_argument_by_name(function: str, version: str, tmp_path_factory) -> None:
    site = applied_site(version, tmp_path_factory, SPEC[function])
    params = list(_op_target(function, version).params)
    changes = [{}] + [{k: v} for k, v in NON_DEFAULT[function].items() if k in params]
    base = _symbolic_cases(function)[0]
    result = _child(site, FORWARD_CHILD, {"function": function, "base": base, "calls": changes})
    assert result["schema"] == params
    assert len(result["calls"]) == len(changes)
    for change, got in zip(changes, result["calls"]):
        assert list(got) == params, got  # every parameter of the release, by name, nothing else
        assert got["out"] == "<out>"
        for name in params:
            if name in change:
                assert got[name] == (change[name] if str(change[name]).startswith("torch.") else repr(change[name])), (name, got)
            elif name in ("A", "B", "A_scale", "B_scale", "a", "b", "a_descale", "b_descale", "alpha"):
                assert got[name] == f"<{name}>", (name, got)
