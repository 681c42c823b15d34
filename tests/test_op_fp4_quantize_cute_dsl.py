"""``fp4_quantize(backend="cute-dsl")`` under torch.compile: the fake against FlashInfer's own CuTe-DSL path.

SGLang passes ``backend="cute-dsl"`` on SM100 (FlashInfer 0.7.x); every release from 0.6.8 has the
backend. Its Python drivers (``nvfp4_quantize_cute_dsl`` / ``mxfp4_quantize_cute_dsl``) lay the outputs
out differently from the CUDA kernel path (2-D row-major x_q for any input, no transposed views, a TMA
kernel whose 8x4 scales pad to 16 rows until 0.7.0.post1), so the op's fake mirrors them from release
data. Checked here:

* the fake against the real path's own allocations, with only the kernel launch replaced, over the
  product's grid (``patches/flashinfer-python/grids/fp4_quantize.py``, whose ``stubs`` make the CuTe-DSL
  drivers run on CPU; run by ``fp4patch/probes/fake_check_probe.py``'s ``run_function`` into the op block fp4patch
  renders for the release), on the first release of every CuTe-DSL era from 0.6.8 to 0.7.4 (and, for the
  CUDA path alone, 0.5.0 and 0.6.7): NVFP4 / MXFP4 and the rejected recipes, three scale-factor layouts,
  2-D, column-major and 3-D input, M = 0 / 1 / 8 / 127 / 129 and the TMA sizes, four dtypes, the
  ``FLASHINFER_NVFP4_*`` environment and an SM100 / SM107 device: same (shape, stride, dtype), or the
  same exception class and message;
* unbacked M (and K): the TMA choice stays integer arithmetic, the scale rows a function of M;
* a compiled call with symbolic M (``dynamic=True``, ``mark_dynamic``, ``mark_unbacked``) is one graph;
* after ``fp4patch apply``, ``fp4_quantize(x, gs, backend="cute-dsl")`` compiles with ``fullgraph=True``
  as one graph holding one fp4patch op node, on 0.6.8 and 0.7.4.
"""

from __future__ import annotations

import collections
import importlib.util
import json

import pytest

from fp4patch.ops.render import release_data

from . import op_grids
from .conftest import REPO, applied_site, release_params, release_site
from .test_op_fp4_quantize import TARGETS, _entry_and_op
from .test_trace_fullgraph import MARK, OP, _child

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]


def _release(target) -> dict:
    """The op source's RELEASE dict as rendered for ``target`` (defaults merged with the target's data)."""
    (kwargs,) = [kwargs for kind, kwargs in target.operation_specs if kind == "custom-op"]
    return release_data(kwargs["target"])


CUTE_TARGETS = [t for t in TARGETS if "cute-dsl" in _release(t)["backends"]]
# The first release of every era of the CuTe-DSL path (flashinfer/quantization/kernels/, fp4_quantization.py)
ERAS = ["0.6.8", "0.6.11", "0.6.12", "0.6.13", "0.6.16", "0.7.0", "0.7.1", "0.7.4"]


def test_every_release_with_the_backend_has_a_cute_dsl_target() -> None:
    assert [str(t.versions) for t in TARGETS if "backend" not in _params(t)] == [str(t.versions) for t in TARGETS if t not in CUTE_TARGETS]
    assert all(any(t.contains(v) for t in CUTE_TARGETS) for v in ERAS)


def _params(target) -> tuple:
    (kwargs,) = [kwargs for kind, kwargs in target.operation_specs if kind == "custom-op"]
    return kwargs["target"].params


# --------------------------------------------------------------------------- #
# The fake against the real path, over the product's grid (patches/flashinfer-python/grids/fp4_quantize.py)
# --------------------------------------------------------------------------- #
_REAL_PATH_CHILD = f"""
import collections, importlib, importlib.util, json, sys, warnings
params = json.loads(sys.argv[1])
sys.path.insert(0, params["repo"])
import torch
from fp4patch.probes import oracle
from tests.oracle_helpers import rendered_entry

spec = importlib.util.spec_from_file_location("_fp4patch_fake_check_probe", params["probe"])
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
warnings.simplefilter("ignore")  # FlashInfer's FutureWarning for the FLASHINFER_NVFP4_4OVER6 shim
recorder = oracle.KernelRecorder()
with oracle.device_stubs():
    import flashinfer

    # the op block fp4patch renders for this release, run in the real module (its wrapper left as it is)
    module = importlib.import_module(params["module"])
    entry = rendered_entry(params["block"], params["op_name"], module, "fp4_quantize")
    with oracle.jit_modules_replaced(recorder):
        summary, records = probe.run_function(oracle, flashinfer, torch, recorder, params["request"], fake=entry)
print({MARK!r} + json.dumps(dict(version=flashinfer.__version__, error=summary["error"], records=records)))
"""
# The first release of each era of fp4_quantize's fake: the CUDA path's sf reshape (0.5.0, 0.6.7), then every
# era of the CuTe-DSL path (flashinfer/quantization/kernels/, fp4_quantization.py); 0.6.0 is test_fake_check's
REAL_PATH_VERSIONS = ["0.5.0", "0.6.7", *ERAS]


@pytest.mark.parametrize("version", release_params(REAL_PATH_VERSIONS, core=("0.6.8", "0.7.4")))
def test_fake_equals_the_real_path(version: str, tmp_path_factory) -> None:
    site = release_site(version, tmp_path_factory, sources_only=True)
    target = op_grids.target("fp4_quantize", version)
    (rendered,) = target.custom_ops
    (block,) = [op.code for op in target.operations if op.kind == "append-to-module"]
    params = {"repo": str(REPO), "probe": str(op_grids.PROBE), "module": target.file[: -len(".py")].replace("/", "."), "block": block,
              "op_name": rendered.op_name, "request": op_grids.as_json(op_grids.request("fp4_quantize", version))}
    result = _child(site, _REAL_PATH_CHILD, params)
    assert result["version"] == version and not result["error"], result["error"]
    records = result["records"]
    assert [r["name"] for r in records] == [c["name"] for c in op_grids.cases("fp4_quantize", version)]
    mismatches = [r for r in records if r["status"] != "passed"]
    assert not mismatches, f"{len(mismatches)} of {len(records)}:\n" + json.dumps(mismatches[:20], indent=1)[:6000]
    counts, kernels = collections.Counter(), collections.Counter()
    for r in records:
        path = "cute-dsl" if r["name"].startswith("cute-dsl") else "cuda"
        counts[path, "ok" if "ok" in (r["real"] or {}) else "error " + (r["real"] or {"error": ["-"]})["error"][0]] += 1
        kernels.update(r["kernels"])
    # the CUDA path reaches its kernel entry for the layouts, and the wrapper's refusals
    assert counts["cuda", "ok"] > 20 and kernels["fp4_quantize"] > 20, (counts, kernels)
    if "cute-dsl" not in _release(target)["backends"]:
        assert not counts.keys() & {("cute-dsl", "ok")}, counts
        return
    # the grid reaches outputs and each kind of refusal: dtype / K assertions, the recipe ValueErrors
    assert counts["cute-dsl", "ok"] > 1000 and counts["cute-dsl", "error AssertionError"] > 0 and counts["cute-dsl", "error ValueError"] > 0, counts
    assert kernels["_get_compiled_kernel_nvfp4"] > 0 and kernels["_get_compiled_kernel_mxfp4"] > 0, kernels
    # the TMA kernel ran for some sizes (by M, K, dtype until 0.6.15.post1; by the environment or SM107 after)
    assert kernels["_get_compiled_kernel_nvfp4_tma"] > 0, kernels


# --------------------------------------------------------------------------- #
# Symbolic sizes
# --------------------------------------------------------------------------- #
def _expected_rows(release: dict, nvfp4: bool, layout: str, m: int, k: int, env: dict) -> int:
    """Scale-factor rows of the CuTe-DSL drivers, from FlashInfer's code (not the fake's)."""
    if layout == "linear":
        return m
    if layout == "128x4":
        return -(-m // 128) * 128
    tma = (
        nvfp4
        and release["cute_dsl_tma_8x4_rows"] == 16
        and (release["cute_dsl_tma"] == "sizes" or env.get("FLASHINFER_NVFP4_QUANTIZE_USE_TMA") == "1")
        and k % 512 == 0
        and m >= 1024
        and m.bit_length() - 1 + k.bit_length() - 1 >= 25
    )
    rows = 16 if tma else 8
    return -(-m // rows) * rows


LAYOUTS = {"128x4": {}, "8x4": {"is_sf_8x4_layout": True}, "linear": {"is_sf_swizzled_layout": False}}


def _at(value, symbol, n: int) -> int:
    """A symbolic size evaluated at ``symbol = n``."""
    import sympy

    expr = value.node.expr if hasattr(value, "node") else sympy.Integer(value)
    return int(expr.subs(symbol.node.expr, n))


@pytest.mark.parametrize("target", CUTE_TARGETS, ids=[str(t.versions) for t in CUTE_TARGETS])
@pytest.mark.parametrize("env", [{}, {"FLASHINFER_NVFP4_QUANTIZE_USE_TMA": "1"}], ids=["default", "tma-env"])
def test_fake_takes_an_unbacked_m(target, env: dict, monkeypatch) -> None:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    release = _release(target)
    _, op = _entry_and_op(target)
    shape_env = ShapeEnv()
    with FakeTensorMode(shape_env=shape_env):
        u = shape_env.create_unbacked_symint()
        gs = torch.ones(1, dtype=torch.float32, device="cuda")
        for k in (7168, 8192):
            x = torch.empty(u, k, dtype=torch.bfloat16, device="cuda")
            for sf_vec_size, nvfp4 in ((16, True), (32, False)):
                for layout, kwargs in LAYOUTS.items():
                    if not nvfp4 and layout == "8x4" and not release["cute_dsl_mxfp4_8x4"]:
                        continue
                    x_q, sf = op(x, gs, backend="cute-dsl", sf_vec_size=sf_vec_size, sf_use_ue8m0=not nvfp4, **kwargs)
                    assert x_q.shape[0] is u or str(x_q.shape[0]) == str(u)
                    assert x_q.shape[1] == k // 2 and x_q.stride(1) == 1 and x_q.dtype == sf.dtype == torch.uint8
                    for m in (0, 1, 8, 127, 129, 4095, 4097, 8193):
                        rows = _expected_rows(release, nvfp4, layout, m, k, env)
                        cols = k // sf_vec_size if layout == "linear" else -(-(k // sf_vec_size) // 4) * 4
                        if not nvfp4 and not release["cute_dsl_mxfp4_padded_columns"]:
                            rows, cols = rows * cols // (k // 32), k // 32
                        got = (_at(sf.shape[0], u, m), _at(sf.shape[1], u, m), _at(sf.stride(0), u, m))
                        assert got == (rows, cols, cols), (layout, sf_vec_size, k, m, str(sf.shape[0]))


@pytest.mark.parametrize("target", [t for t in CUTE_TARGETS if _release(t)["cute_dsl_tma"] == "sizes"][:1], ids=lambda t: str(t.versions))
def test_fake_takes_an_unbacked_k_at_the_tma_crossover(target) -> None:
    """A symbolic K: floor(log2 M) + floor(log2 K) >= 25 as integer arithmetic, not a guard."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    release = _release(target)
    _, op = _entry_and_op(target)
    shape_env = ShapeEnv()
    with FakeTensorMode(shape_env=shape_env):
        u = shape_env.create_unbacked_symint()
        torch._check(u >= 512)
        x = torch.empty(4097, u, dtype=torch.bfloat16, device="cuda")
        x_q, sf = op(x, torch.ones(1, dtype=torch.float32, device="cuda"), backend="cute-dsl", is_sf_8x4_layout=True)
        assert x_q.shape[0] == 4097 and str(x_q.shape[1]) == str(u // 2)
        for k in (4096, 8192, 8200, 8704, 1 << 14):
            assert _at(sf.shape[0], u, k) == _expected_rows(release, True, "8x4", 4097, k, {}), k


@pytest.mark.parametrize("mode", ["dynamic", "mark_dynamic", "mark_unbacked"])
@pytest.mark.parametrize("target", [CUTE_TARGETS[0], CUTE_TARGETS[-1]], ids=lambda t: str(t.versions))
def test_compiled_cute_dsl_call_with_symbolic_m_is_one_graph(target, mode: str) -> None:
    import torch

    entry, op = _entry_and_op(target)
    params = _params(target)
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return lambda *args: (torch.zeros(()),)

    defaults = {"sf_vec_size": 16, "sf_use_ue8m0": False, "is_sf_swizzled_layout": True, "is_sf_8x4_layout": True,
                "is_global_scale_inversed": False, "enable_pdl": None, "backend": "cute-dsl", "nvfp4_4over6": None, "batch_invariant": False}

    def f(x, gs):
        # the CuTe-DSL drivers assert input.is_cuda: CUDA copies, traced on fake tensors (the backend runs nothing)
        x = torch.ops.aten._to_copy.default(x, device=torch.device("cuda"))
        gs = torch.ops.aten._to_copy.default(gs, device=torch.device("cuda"))
        q, sf = entry(input=x, global_scale=gs, **{name: value for name, value in defaults.items() if name in params})
        return q.float().sum() + sf.float().sum()

    torch._dynamo.reset()
    x = torch.empty(4097, 8192, dtype=torch.bfloat16)  # a real CPU input, so that mark_unbacked takes effect
    if mode == "mark_dynamic":
        torch._dynamo.mark_dynamic(x, 0)
    elif mode == "mark_unbacked":
        torch._dynamo.decorators.mark_unbacked(x, 0)
    torch.compile(f, fullgraph=True, backend=record, dynamic=True if mode == "dynamic" else None)(x, torch.ones(1))
    assert len(graphs) == 1
    calls = [n for n in graphs[0].graph.nodes if n.op == "call_function" and str(n.target).startswith("fp4patch.")]
    assert [str(n.target) for n in calls] == [str(op)]
    (q_meta, _sf_meta) = calls[0].meta["example_value"]
    placeholder = next(
        n for n in graphs[0].graph.nodes if n.op == "placeholder" and isinstance(n.meta["example_value"], torch.Tensor)
        and n.meta["example_value"].dim() == 2
    )
    m = placeholder.meta["example_value"].shape[0]
    assert not isinstance(m, int), "M must stay symbolic"
    assert str(q_meta.shape[0]) == str(m) and q_meta.shape[1] == 4096


# --------------------------------------------------------------------------- #
# After fp4patch apply: the real wrapper compiles with fullgraph=True
# --------------------------------------------------------------------------- #
_TRACE_CHILD = f"""
import json, sys
params = json.loads(sys.argv[1])
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from fp4patch.probes.trace_probe import _custom_op_nodes, _install_device_stubs
_install_device_stubs(torch)
import flashinfer
results = []
for case in params["cases"]:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs = []
    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    kwargs = case["kwargs"]
    def f(x, gs):
        return flashinfer.fp4_quantize(x, gs, backend="cute-dsl", **kwargs)
    with FakeTensorMode(allow_non_fake_inputs=True):
        if case["column_major"]:
            x = torch.empty(case["k"], case["m"], dtype=torch.bfloat16, device="cuda").t()
        else:
            x = torch.empty(case["m"], case["k"], dtype=torch.bfloat16, device="cuda")
        if case["dynamic"]:
            torch._dynamo.mark_dynamic(x, 0)
        gs = torch.ones(1, dtype=torch.float32, device="cuda")
        torch.compile(f, fullgraph=True, backend=record, dynamic=None if case["dynamic"] else False)(x, gs)
    (out,) = [n for n in graphs[0].graph.nodes if n.op == "output"]
    values = out.args[0]
    if len(values) == 1 and isinstance(values[0], (tuple, list)):
        values = values[0]
    metas = [[[str(d) for d in v.meta["example_value"].shape], [str(d) for d in v.meta["example_value"].stride()],
              str(v.meta["example_value"].dtype)] for v in values]
    results.append(dict(case=case, graphs=len(graphs), breaks=sum(torch._dynamo.utils.counters["graph_break"].values()),
                        ops=[op for gm in graphs for op in _custom_op_nodes(gm)], outputs=metas))
print({MARK!r} + json.dumps(dict(version=flashinfer.__version__, results=results)))
"""


@pytest.mark.parametrize("version", ["0.6.8", "0.7.4"])
def test_applied_cute_dsl_call_compiles_as_one_graph(tmp_path_factory, version: str) -> None:
    site = applied_site(version, tmp_path_factory)
    cases = [
        {"m": 129, "k": 7168, "column_major": False, "dynamic": False, "kwargs": {}},
        {"m": 129, "k": 7168, "column_major": False, "dynamic": True, "kwargs": {"is_sf_8x4_layout": True}},
        {"m": 256, "k": 64, "column_major": True, "dynamic": False, "kwargs": {"sf_vec_size": 32, "sf_use_ue8m0": True}},
        {"m": 4097, "k": 8192, "column_major": False, "dynamic": False, "kwargs": {"is_sf_8x4_layout": True}},
        {"m": 127, "k": 7168, "column_major": False, "dynamic": False, "kwargs": {"is_sf_swizzled_layout": False}},
    ]
    result = _child(site, _TRACE_CHILD, {"cases": cases})
    assert result["version"] == version
    tma_rows = 16 if version == "0.6.8" else 8  # 0.6.8: the TMA kernel by M, K; 0.7.4: it pads 8x4 rows to 8
    for r in result["results"]:
        case, kwargs = r["case"], r["case"]["kwargs"]
        assert r["graphs"] == 1 and r["breaks"] == 0, r
        assert len(r["ops"]) == 1 and OP.fullmatch(r["ops"][0]), r
        (q_shape, q_stride, q_dtype), (sf_shape, sf_stride, sf_dtype) = r["outputs"]
        # the CuTe-DSL drivers: x_q is [M, K/2] row-major whatever the input's strides
        assert q_shape[1:] == [str(case["k"] // 2)] and q_stride == [str(case["k"] // 2), "1"] and q_dtype == "torch.uint8", r
        if not case["dynamic"]:
            assert q_shape[0] == str(case["m"]), r
            if kwargs.get("is_sf_8x4_layout") and case["m"] == 4097:  # the TMA kernel (M, K) on 0.6.8
                assert sf_shape[0] == str(-(-4097 // tma_rows) * tma_rows), r
        assert sf_stride[1] == "1" and sf_dtype == "torch.uint8", r
