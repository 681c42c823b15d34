"""A bad or unsupported ``nvfp4_4over6`` under ``torch.compile(fullgraph=True)``: the first line of the error is the
real one-line reason (issue 19), on the real 0.7.4 wheel with the default specs applied.

Each call is compiled in a child interpreter on fake CUDA tensors (the scan's device stubs and its argument pools,
``fp4patch/probes/scan_probe.py``, with the call's own values on top). What can go wrong with ``nvfp4_4over6`` and what
the first line then says:

* an ``NVFP44Over6Config`` cannot cross the custom-op schema: fp4patch's refusal (``_refusal._refuse``: ``fp4patch:
  <fn>(nvfp4_4over6=<NVFP44Over6Config>) is not supported under torch.compile on FlashInfer 0.7.4 (...)``), for each
  patched function that takes the parameter;
* where FlashInfer itself refuses the config for these arguments, FlashInfer's own message instead, still a
  ``ValueError``: ``fp4_quantize`` / ``nvfp4_batched_quantize`` with e4m3 input, ``fp4_quantize`` with MXFP4
  parameters (``_resolve_fp4_quantize_recipe``), the TRT-LLM-Gen MoE without ``per_token_scale``;
* a value that is neither a config nor ``None`` (a string, an int): ``resolve_nvfp4_4over6``'s ``TypeError``;
* the ``FLASHINFER_NVFP4_4OVER6=1`` recipe with e4m3 input on the CuTe-DSL backend: FlashInfer's ``ValueError``.

Without ``fullgraph`` each is a graph break (the call runs eagerly), and an eager call is FlashInfer's own code:
the same value raises FlashInfer's own error there.
"""

from __future__ import annotations

import importlib.util

import pytest

from .conftest import REPO, applied_site
from .python_forkserver import child_json

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

MARK = "FP4PATCH-4OVER6-RESULT "
VERSION = "0.7.4"

# P["calls"]: name -> [scan entry whose argument pool builds the call, {param: value}], a value being
# {"t": shape, "dtype": name} (a fake CUDA tensor), {"config": true} (an NVFP44Over6Config()) or plain JSON.
# P["eager"]: the same, called without torch.compile (FlashInfer's own code: its error or "ran").
CHILD = r"""
import importlib.util, json, sys, warnings
P = json.loads(sys.argv[1])
import torch
import torch._dynamo
from torch._subclasses.fake_tensor import FakeTensorMode
spec = importlib.util.spec_from_file_location("_4over6_scan_probe", P["scan_probe"])
scan = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = scan
spec.loader.exec_module(scan)
scan.install_device_stubs(torch)
import flashinfer
from flashinfer.quantization.nvfp4_quantization_utils import NVFP44Over6Config
warnings.simplefilter("ignore")
entries = {e["name"]: e for e in scan.FUNCTIONS}

def build(entry, values):
    fn = scan._find(flashinfer, entry["function"])
    params = __import__("inspect").signature(fn).parameters
    t = lambda shape, dtype: torch.empty(shape, dtype=dtype, device="cuda")
    pool = entry["args"](t, torch)
    kw = {n: pool[n]() for n in params if n in pool}
    for name, v in values.items():
        if isinstance(v, dict) and "t" in v:
            kw[name] = t(tuple(v["t"]), getattr(torch, v["dtype"]))
        elif isinstance(v, dict) and v.get("config"):
            kw[name] = NVFP44Over6Config()
        else:
            kw[name] = v
    return fn, kw

def outcome(e):
    lines = str(e).strip().splitlines()
    return {"type": type(e).__name__, "error": lines[0] if lines else "", "value_error": isinstance(e, ValueError),
            "type_error": isinstance(e, TypeError), "lines": len(lines)}

out = {"compiled": {}, "eager": {}}
for name, (entry, values) in P["calls"].items():
    torch._dynamo.reset()
    graphs = []
    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    with FakeTensorMode(allow_non_fake_inputs=True):
        fn, kw = build(entries[entry], values)
        tensors = {k: v for k, v in kw.items() if isinstance(v, torch.Tensor) or (isinstance(v, list) and v and isinstance(v[0], torch.Tensor))}
        static = {k: v for k, v in kw.items() if k not in tensors}
        try:
            torch.compile(lambda ts: fn(**ts, **static), fullgraph=True, backend=record)(tensors)
            r = {"type": None, "error": None}
        except Exception as e:
            r = outcome(e)
    r["graphs"] = len(graphs)
    out["compiled"][name] = r
for name, (entry, values) in P.get("eager", {}).items():
    with FakeTensorMode(allow_non_fake_inputs=True):
        fn, kw = build(entries[entry], values)
        try:
            fn(**kw)
            out["eager"][name] = {"type": None, "error": "ran"}
        except Exception as e:
            out["eager"][name] = outcome(e)
print(__MARK__ + json.dumps(out))
""".replace("__MARK__", repr(MARK))

CONFIG = {"config": True}
FP8 = {"t": [8, 7168], "dtype": "float8_e4m3fn"}
FP8_ERROR = "NVFP4 4over6 (from the nvfp4_4over6= argument or the FLASHINFER_NVFP4_4OVER6* environment) requires fp16 or bf16 input, got torch.float8_e4m3fn."
TYPE_ERROR = "nvfp4_4over6 must be an NVFP44Over6Config or None (or omitted); got a value of another type."


def _refusal(function: str) -> str:
    return (
        f"fp4patch: {function}(nvfp4_4over6=<NVFP44Over6Config>) is not supported under torch.compile on FlashInfer {VERSION} "
        "(a NVFP44Over6Config cannot cross the custom-op schema; omit nvfp4_4over6 or pass None); call it outside the compiled region"
    )


def _run(tmp_path_factory, calls: dict, eager: dict | None = None, env: dict | None = None) -> dict:
    site = applied_site(VERSION, tmp_path_factory)
    params = {"scan_probe": str(REPO / "fp4patch" / "probes" / "scan_probe.py"), "calls": calls, "eager": eager or {}}
    return child_json(site, CHILD, params, mark=MARK, timeout=900, env=env)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    calls = {
        "fp4_quantize config": ["fp4_quantize", {"nvfp4_4over6": CONFIG}],
        "fp4_quantize[cute-dsl] config": ["fp4_quantize[cute-dsl]", {"nvfp4_4over6": CONFIG}],
        "fp4_quantize config, e4m3 input": ["fp4_quantize", {"input": FP8, "nvfp4_4over6": CONFIG}],
        "fp4_quantize config, MXFP4": ["fp4_quantize", {"sf_vec_size": 32, "sf_use_ue8m0": True, "nvfp4_4over6": CONFIG}],
        "fp4_quantize str": ["fp4_quantize", {"nvfp4_4over6": "MAE"}],
        "fp4_quantize int": ["fp4_quantize", {"nvfp4_4over6": 1}],
        "fp4_quantize None": ["fp4_quantize", {"nvfp4_4over6": None}],
        "nvfp4_quantize config": ["nvfp4_quantize", {"nvfp4_4over6": CONFIG}],
        "nvfp4_quantize str": ["nvfp4_quantize", {"nvfp4_4over6": "MAE"}],
        "nvfp4_quantize int": ["nvfp4_quantize", {"nvfp4_4over6": 1}],
        "nvfp4_batched_quantize config": ["nvfp4_batched_quantize", {"nvfp4_4over6": CONFIG}],
        "nvfp4_batched_quantize config, e4m3 input": ["nvfp4_batched_quantize", {"a": {"t": [4, 8, 256], "dtype": "float8_e4m3fn"}, "nvfp4_4over6": CONFIG}],
        "scaled_fp4_grouped_quantize config": ["scaled_fp4_grouped_quantize", {"nvfp4_4over6": CONFIG}],
        "silu_and_mul_scaled_nvfp4_experts_quantize config": ["silu_and_mul_scaled_nvfp4_experts_quantize", {"nvfp4_4over6": CONFIG}],
        "silu_and_mul_scaled_nvfp4_experts_quantize str": ["silu_and_mul_scaled_nvfp4_experts_quantize", {"nvfp4_4over6": "MAE"}],
        "cutlass_fused_moe config": ["cutlass_fused_moe[nvfp4]", {"nvfp4_4over6": CONFIG}],
        "trtllm_fp4_block_scale_moe config": ["trtllm_fp4_block_scale_moe", {"nvfp4_4over6": CONFIG}],
        "trtllm_fp4_block_scale_moe config, per-token": [
            "trtllm_fp4_block_scale_moe", {"nvfp4_4over6": CONFIG, "per_token_scale": {"t": [8], "dtype": "float32"}},
        ],
        "trtllm_fp4_block_scale_routed_moe config": ["trtllm_fp4_block_scale_routed_moe", {"nvfp4_4over6": CONFIG}],
    }
    eager = {
        "fp4_quantize str": ["fp4_quantize", {"nvfp4_4over6": "MAE"}],
        "fp4_quantize config, e4m3 input": ["fp4_quantize", {"input": FP8, "nvfp4_4over6": CONFIG}],
    }
    return _run(tmp_path_factory, calls, eager)


def _first(r: dict, line: str, kind: str) -> None:
    assert r["graphs"] == 0 and r["error"] == line, r
    assert r[kind], r  # still the class FlashInfer raises (value_error / type_error)


@pytest.mark.parametrize(
    "name",
    [
        "fp4_quantize config",
        "fp4_quantize[cute-dsl] config",
        "nvfp4_quantize config",
        "nvfp4_batched_quantize config",
        "scaled_fp4_grouped_quantize config",
        "silu_and_mul_scaled_nvfp4_experts_quantize config",
        "cutlass_fused_moe config",
        "trtllm_fp4_block_scale_moe config, per-token",
    ],
)
def test_a_config_is_refused_first_line(compiled, name: str) -> None:
    r = compiled["compiled"][name]
    function = name.split()[0].split("[")[0]
    assert r["type"] == "Unsupported" and r["graphs"] == 0 and r["error"] == _refusal(function), r


def test_flashinfers_own_refusal_of_the_config_comes_first(compiled) -> None:
    got = compiled["compiled"]
    _first(got["fp4_quantize config, e4m3 input"], FP8_ERROR, "value_error")
    _first(got["nvfp4_batched_quantize config, e4m3 input"], FP8_ERROR, "value_error")
    _first(
        got["fp4_quantize config, MXFP4"],
        "nvfp4_4over6 applies to NVFP4 only (sf_vec_size=16, sf_use_ue8m0=False); got sf_vec_size=32, sf_use_ue8m0=True.",
        "value_error",
    )
    trtllm = (
        "nvfp4_4over6 requires per_token_scale with NVFP4 (uint8) hidden_states; no other path has a 4over6 requantization. "
        "Pass None to turn 4over6 off, or omit it to read the environment."
    )
    _first(got["trtllm_fp4_block_scale_moe config"], trtllm, "value_error")
    _first(got["trtllm_fp4_block_scale_routed_moe config"], trtllm, "value_error")


def test_a_value_of_another_type_is_the_wrappers_type_error_first(compiled) -> None:
    got = compiled["compiled"]
    for name in ("fp4_quantize str", "fp4_quantize int", "nvfp4_quantize str", "nvfp4_quantize int", "silu_and_mul_scaled_nvfp4_experts_quantize str"):
        _first(got[name], TYPE_ERROR, "type_error")
    # None (4over6 off) still compiles
    assert got["fp4_quantize None"]["error"] is None and got["fp4_quantize None"]["graphs"] == 1, got["fp4_quantize None"]


def test_eager_calls_run_flashinfers_own_code(compiled) -> None:
    got = compiled["eager"]
    # FlashInfer's own messages (the type named: nothing of fp4patch runs outside a compile)
    assert got["fp4_quantize str"]["type_error"] and got["fp4_quantize str"]["error"] == TYPE_ERROR.replace("a value of another type", "str"), got
    assert got["fp4_quantize config, e4m3 input"]["value_error"] and got["fp4_quantize config, e4m3 input"]["error"] == FP8_ERROR, got


def test_the_environment_recipe_with_e4m3_input_on_cute_dsl_is_flashinfers_error_first(tmp_path_factory) -> None:
    calls = {"cute-dsl e4m3": ["fp4_quantize[cute-dsl]", {"input": FP8}], "cuda e4m3": ["fp4_quantize[cuda]", {"input": FP8}]}
    got = _run(tmp_path_factory, calls, env={"FLASHINFER_NVFP4_4OVER6": "1"})["compiled"]
    _first(got["cute-dsl e4m3"], FP8_ERROR, "value_error")
    # the CUDA backend ignores an environment recipe for e4m3 input (FlashInfer 0.7.4): it compiles
    assert got["cuda e4m3"]["error"] is None and got["cuda e4m3"]["graphs"] == 1, got["cuda e4m3"]
