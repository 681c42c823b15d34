"""The GEMM op sources (``patches/flashinfer-python/ops/bmm_fp8.py``, ``mm_fp4.py``) on the real wheels, on CPU.

Every check that imports FlashInfer runs in a fresh interpreter (``_child`` of test_trace_fullgraph,
``PYTHONPATH=<pristine site>``). The child stubs the device queries (``cuda:0`` reports SM100,
``cuda:1`` SM90), executes the op source with ``WRAPPER`` bound to the installed, decorated wrapper
(a keyword filter drops the parameters this release lacks, which must then hold the op source's
defaults: what the custom-op renderer does to the source) and ``OP`` bound to a custom op registered
from the source's ``op`` / ``fake`` / ``MUTATES_ARGS`` (namespace ``fp4patch_test``). Then, on fake CUDA
tensors (``FakeTensorMode``):

* the real wrapper runs eagerly with only the kernel side replaced: the JIT module loaders / runner
  factories (``get_*_module``, ``_*_runner``), the autotuner's choice and the launch (``fp8_gemm_sm100``
  for ``bmm_fp8``), the workspace caches, the CUDA-version and cuDNN probes; its own checks, backend
  heuristic and output allocation run as shipped. ``entry`` (→ the registered op → ``fake``) runs on the
  same arguments. Per case: the same output (shape, stride, dtype; ``out`` itself when given) or the
  same exception class and message;
* symbolic M, backed and unbacked (``ShapeEnv``), through ``entry`` and the fake: no guard on data;
* ``torch.compile(fullgraph=True)`` of ``entry`` with ``mark_dynamic`` / ``mark_unbacked`` M: one graph,
  one op node.

A small, generic harness written here (the shared oracle harness was not available on this branch).
"""

from __future__ import annotations

import importlib.util
import itertools

import pytest

from fp4patch.custom_op import CustomOpTarget, check_op_source, read_helpers, render

from .conftest import SPECS_DIR, applied_site, release_site
from .test_trace_fullgraph import MARK, _child

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

VERSIONS = ["0.6.0", "0.7.4"]
OPS = SPECS_DIR / "flashinfer-python" / "ops"
# Release data of the op sources per release (what the specs' [target.operation.release] will say).
RELEASE = {
    "bmm_fp8": {"0.5.0": {"inline_checks": True}, "0.5.3": {}, "0.6.0": {}, "0.7.4": {}},
    "mm_fp4": {
        "0.6.0": {},
        "0.7.4": {
            "per_token_alpha_backends": ["auto", "cute-dsl", "cake"],
            "per_token_alpha_only": "the 'cute-dsl' and 'cake' backends",
            "cutlass_contiguous_out": True,
        },
    },
}

# The wrappers' parameters (flashinfer/gemm/gemm_base.py of each release).
PARAMS = {
    "bmm_fp8": {
        "0.5.0": ["A", "B", "A_scale", "B_scale", "dtype", "out", "backend"],
        "0.5.3": ["A", "B", "A_scale", "B_scale", "dtype", "out", "backend"],
        "0.6.0": ["A", "B", "A_scale", "B_scale", "dtype", "out", "backend"],
        "0.7.4": ["A", "B", "A_scale", "B_scale", "dtype", "out", "backend", "batch_invariant"],
    },
    "mm_fp4": {
        "0.6.0": ["a", "b", "a_descale", "b_descale", "alpha", "out_dtype", "out", "block_size", "use_8x4_sf_layout", "backend", "use_nvfp4"],
        "0.7.4": ["a", "b", "a_descale", "b_descale", "alpha", "out_dtype", "out", "block_size", "use_8x4_sf_layout", "backend", "use_nvfp4",
                  "enable_pdl", "batch_invariant"],
    },
}

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
from fp4patch.custom_op import plain_source, read_helpers  # OP_PARAMS expanded, shared helpers inlined
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

KERNEL_STUBS = r"""
# ---- the kernel side of the real wrapper, replaced ---------------------------------------
launches = []


class _Anything:
    def __getattr__(self, name):
        return lambda *a, **k: _Anything()

    def __call__(self, *a, **k):
        launches.append(1)


class _Tuner:
    @classmethod
    def get(cls):
        return cls()

    def choose_one(self, name, runners, config, inputs, *a, **k):
        return _Anything(), -1


for _name in dir(gb):
    _obj = getattr(gb, _name)
    if callable(_obj) and not isinstance(_obj, type) and (
        (_name.startswith("get_") and _name.endswith("_module")) or (_name.startswith("_") and _name.endswith("_runner"))
    ):
        setattr(gb, _name, lambda *a, **k: _Anything())
gb.AutoTuner = _Tuner
gb.fp8_gemm_sm100 = lambda *a, **k: launches.append(1)
for _name in ("_get_cache_buf", "_get_stream_cache_buf"):
    if hasattr(gb, _name):
        setattr(gb, _name, lambda name, size, device, *a, **k: torch.empty(size, dtype=torch.uint8, device=device))
if hasattr(gb, "get_cuda_version"):
    from packaging.version import Version
    gb.get_cuda_version = lambda *a, **k: Version("12.9")


def _no_cudnn(*a, **k):
    raise ValueError("fp4patch test: no cuDNN here")


if hasattr(gb, "_check_cudnn_fp4_availability"):  # 0.6.0: a RuntimeError that backend="auto" does not catch
    gb._check_cudnn_fp4_availability = _no_cudnn
    gb._check_cudnn_availability = _no_cudnn


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


def outcome(fn, c):
    before = len(launches)
    with FakeTensorMode(allow_non_fake_inputs=True):
        kw = build(c, c["m"])
        try:
            r = fn(**kw)
        except Exception as e:
            return ["error", type(e).__name__, str(e)]
        return ["ok", meta(r), "out" in kw and r is kw["out"], len(launches) - before]


"""

CHILD = PRELUDE + OP_SOURCE + KERNEL_STUBS + HELPERS + r"""
results = []
for c in P["cases"]:
    results.append([c, outcome(real, c), outcome(ns["entry"], c)])


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
print("MARK" + json.dumps(dict(results=results, symbolic=sym, compiled=comp, absent=sorted(absent),
                               params=list(real_params), defaults=defaults, source_defaults=source_defaults,
                               schema=str(OP._schema))))
""".replace("MARK", MARK)


def _bmm_cases(version: str) -> list[dict]:
    base = {"batch": 2, "k": 64, "n": 80, "a_dtype": "float8_e4m3fn", "b_dtype": "float8_e4m3fn", "dtype": "bfloat16", "out": False, "out_dtype": "bfloat16"}
    cases = []
    for m, backend, dtype, out in itertools.product((1, 8, 127, 129), ("cublas", "cutlass", "auto", None), ("bfloat16", "float16"), (False, True)):
        cases.append({**base, "m": m, "backend": backend, "dtype": dtype, "out_dtype": dtype, "out": out})
    cases += [
        {**base, "m": 8, "a_dtype": "float8_e5m2", "backend": "cublas"},
        {**base, "m": 8, "b_dtype": "float8_e5m2", "backend": "auto"},
        {**base, "m": 0, "backend": "cublas"},
        {**base, "m": 8, "batch": 1, "backend": "auto", "out": True},
        # out given in another dtype: the wrapper ignores dtype then
        {**base, "m": 8, "backend": "cublas", "out": True, "out_dtype": "float16"},
        # refused: the wrapper's message, from the fake at trace time
        {**base, "m": 8, "dtype": "float32", "backend": "cublas"},
        {**base, "m": 8, "dtype": "float32", "backend": "auto"},
        {**base, "m": 8, "a_dtype": "float8_e5m2", "backend": "cutlass"},
        {**base, "m": 8, "backend": "no-such-backend"},
        {**base, "m": 8, "backend": "cutlass", "device": 1},  # SM90: cutlass refused by capability
        {**base, "m": 8, "backend": "cublas", "device": 1},  # SM90: cublas accepted
    ]
    return cases


def _mm_cases(version: str) -> list[dict]:
    base = {"k": 256, "n": 256, "a_dtype": "uint8", "sf_dtypes": ["float8_e4m3fn", "float8_e4m3fn"], "alpha": "0d", "alpha_dtype": "float32",
                "out_dtype": "bfloat16", "out": False, "block_size": 16, "use_8x4": False, "use_nvfp4": True, "backend": None}
    backends = ("cutlass", "trtllm", "auto", None)
    cases = []
    for m, backend, out in itertools.product((1, 8, 127, 129), backends, (False, "contiguous")):
        cases.append({**base, "m": m, "backend": backend, "out": out})
    cases += [
        {**base, "m": 8, "backend": "trtllm", "use_8x4": True},
        {**base, "m": 129, "backend": "trtllm", "use_8x4": True, "out": "contiguous"},
        {**base, "m": 8, "backend": "cutlass", "sf_dtypes": ["uint8", "float8_e4m3fn"]},  # mixed scale dtypes
        {**base, "m": 8, "backend": "cutlass", "sf_dtypes": ["uint8", "uint8"], "out_dtype": "float16"},
        {**base, "m": 8, "backend": "auto", "alpha": "1"},
        {**base, "m": 8, "backend": "cutlass", "alpha": "none"},
        {**base, "m": 8, "backend": "cutlass", "a_dtype": "float4_e2m1fn_x2"},
        {**base, "m": 0, "backend": "cutlass"},
        {**base, "m": 8, "backend": "trtllm", "out": "transposed"},
        # refused: the wrapper's message, from the fake at trace time
        {**base, "m": 8, "backend": "cutlass", "use_8x4": True},
        {**base, "m": 8, "backend": "trtllm", "out_dtype": "float16"},
        {**base, "m": 8, "backend": "trtllm", "use_nvfp4": False, "block_size": 32},
        {**base, "m": 8, "backend": "cutlass", "use_nvfp4": False, "block_size": 32},
        {**base, "m": 8, "backend": "cutlass", "block_size": 32},
        {**base, "m": 8, "backend": "auto", "out_dtype": "float32"},
        {**base, "m": 8, "backend": "cutlass", "alpha_dtype": "float16"},
        {**base, "m": 8, "backend": "cutlass", "alpha": "3"},
        {**base, "m": 8, "backend": "cutlass", "alpha": "m"},
        {**base, "m": 8, "backend": "cutlass", "sf_dtypes": ["float32", "uint8"]},
        {**base, "m": 8, "backend": "cutlass", "a_dtype": "int8"},
        {**base, "m": 8, "backend": "cutlass", "out": "transposed"},
        {**base, "m": 8, "backend": "no-such-backend"},
        {**base, "m": 8, "backend": "cutlass", "device": 1},  # SM90: refused by capability
    ]
    return cases


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
        cases = _bmm_cases(version) if function == "bmm_fp8" else _mm_cases(version)
        params = {
            "function": function,
            "op_source": str(OPS / f"{function}.py"),
            "release": RELEASE[function][version],
            "cases": cases,
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


@pytest.mark.parametrize(("function", "version"), PAIRS)
def test_fake_matches_the_wrappers_own_allocation_and_refusals(function: str, version: str, tmp_path_factory) -> None:
    result = _run(function, version, tmp_path_factory)
    accepted = refused = 0
    differ = [f"{case}\n  real: {real}\n  fake: {fake}" for case, real, fake in result["results"] if fake[:3] != real[:3]]
    assert not differ, "\n".join(differ)
    for case, real, fake in result["results"]:
        if real[0] == "ok":
            accepted += 1
            assert real[3] >= 1, f"the real call never reached the (stubbed) kernel: {case}"
            assert fake[3] == 0, f"entry reached a kernel: {case}"
            assert real[2] == bool(case["out"]), case  # out= given: the wrapper returns it, and so does entry
        else:
            refused += 1
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
    assert result["params"] == PARAMS[function][version]
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
    """The renderer's own check accepts each op source with this module's release data and parameters."""
    for function, per_version in RELEASE.items():
        source = (OPS / f"{function}.py").read_text(encoding="utf-8")
        for version, overrides in per_version.items():
            params = tuple(PARAMS[function][version])
            target = CustomOpTarget(
                function=function, source=source, source_label=function, params=params, release=overrides, helpers=read_helpers(source, OPS)
            )
            check_op_source(target)
            assert render(target).op_name.startswith(f"fp4patch::{function}_")


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

EAGER_CHILD = PRELUDE + KERNEL_STUBS + HELPERS + r"""
entry_calls = []
name = "_fp4patch_%s_entry" % FN
if hasattr(gb, name):  # patched: register the op (done on first need), then record any call that would go through it
    getattr(gb, "_fp4patch_%s_ready" % FN)()
    setattr(gb, name, lambda **kw: entry_calls.append(sorted(kw)))
fn = getattr(flashinfer, FN)
results = [[c, outcome(fn, c)] for c in P["cases"]]
print("MARK" + json.dumps(dict(patched=hasattr(gb, name), results=results, entry_calls=entry_calls)))
""".replace("MARK", MARK)

FORWARD_CHILD = PRELUDE + HELPERS + r"""
getattr(gb, "_fp4patch_%s_ready" % FN)()  # the op is registered on first need
op = inspect.getclosurevars(getattr(gb, "_fp4patch_%s_entry" % FN)).nonlocals["OP"]
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
    cases = [c for c in (_bmm_cases(version) if function == "bmm_fp8" else _mm_cases(version)) if c["m"] in (0, 8)]
    assert any(c["backend"] == "auto" for c in cases)
    before = _child(release_site(version, tmp_path_factory, bytecode=True), EAGER_CHILD, {"function": function, "cases": cases})
    site = applied_site(version, tmp_path_factory, SPEC[function])
    after = _child(site, EAGER_CHILD, {"function": function, "cases": cases})
    assert before["patched"] is False and after["patched"] is True
    assert after["entry_calls"] == []
    differ = [f"{c}\n  unpatched: {b}\n  patched:   {a}" for (c, b), (_, a) in zip(before["results"], after["results"]) if a != b]
    assert not differ, "\n".join(differ)


NON_DEFAULT = {
    "bmm_fp8": {"dtype": "torch.float16", "backend": "cutlass", "batch_invariant": True},
    "mm_fp4": {"alpha": None, "out_dtype": "torch.float16", "block_size": 32, "use_8x4_sf_layout": True, "backend": "trtllm", "use_nvfp4": False,
               "enable_pdl": False, "batch_invariant": True},
}


@pytest.mark.parametrize(("function", "version"), PAIRS)
def test_op_body_forwards_every_argument_by_name(function: str, version: str, tmp_path_factory) -> None:
    site = applied_site(version, tmp_path_factory, SPEC[function])
    params = PARAMS[function][version]
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
