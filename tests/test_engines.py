"""The serving engines' own FlashInfer-calling code under ``torch.compile(fullgraph=True)`` (issue 23, item 4).

Each engine is installed from the package registry without its dependencies (``tests/conftest.py: engine_site``,
cached beside the release cache) and run in a child interpreter against the FlashInfer release it pins, patched
with fp4patch's default specs (``applied_site``) and pristine (``release_site(..., bytecode=True)``), on fake CUDA
tensors with the scan probe's SM100 device stubs:

* SGLang 0.5.23 (pins flashinfer-python 0.7.2, torch 2.14.1; ``tests/engine_sglang_child.py``): the TRT-LLM FP4
  MoE runner with per-token NVFP4 activations (``nvfp4_quantize(..., backend="cute-dsl")``, then
  ``trtllm_fp4_block_scale_moe`` or ``..._routed_moe``) in its three routing forms, reached through
  ``ModelOptNvFp4FusedMoEMethod.apply`` on a layer shaped as after weight loading; the RMSNorm fused with a static
  FP8 input quantization (``rmsnorm_quant``, ``fused_add_rmsnorm_quant``); and SGLang's own ops around FlashInfer;
* vLLM 0.34.0 (pins flashinfer-python 0.7.3, which the registry does not serve, and torch 2.14.0; run on 0.7.4, the
  served release nearest above the pin; ``tests/engine_vllm_child.py``): ``quantize_nvfp4_per_token_input`` and
  vLLM's own ops around FlashInfer.

Each engine's pins are read from its wheel's metadata (``test_engine_pins``), against the catalog's list of every
FlashInfer release on the registry.

SGLang's MoE runner reads a ``contextvars.ContextVar`` (``_deferred_finalize_enabled.get()``,
``sglang/srt/layers/moe/moe_runner/flashinfer_trtllm.py``), which Dynamo traces from torch 2.14 (the engine's pin)
and not before: on an older torch the tests check that this, not FlashInfer, is where tracing stops.

The stand-ins a child serves for packages this interpreter lacks must never be called on a traced path (each case's
``stand_ins`` is empty), and a child's list of them carries no entry nothing asked for (``unneeded_stand_ins``).
"""

from __future__ import annotations

import email
import importlib.metadata
import importlib.util
import json
import re

import pytest
from packaging.version import Version

from .conftest import REPO, applied_site, engine_site, release_site
from .python_forkserver import child_json

# heavy (make test-heavy) as a module: each test reads the result of a child that imports an engine (15-45 s), run
# once per test process; tests/heavy.txt lists those measured, the others must not fall into make test with it.
# make test runs tests/test_child_support.py, the stand-in machinery these children rest on.
pytestmark = [
    pytest.mark.torch,
    pytest.mark.heavy,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

SGLANG, SGLANG_FLASHINFER = "0.5.23", "0.7.2"
#: vLLM 0.34.0 pins flashinfer-python==0.7.3, which the registry does not serve (0.7.2.post1, then 0.7.4):
#: `pip install vllm==0.34.0` ends "No matching distribution found for flashinfer-python==0.7.3", and an unpinned
#: `pip install vllm` backtracks to vLLM 0.33.0 (pins 0.7.2.post1). Its tests run on 0.7.4.
VLLM, VLLM_FLASHINFER = "0.34.0", "0.7.4"
#: What each engine release requires of FlashInfer and torch, as its wheel's metadata says (``Requires-Dist``)
PINS = {
    ("sglang", SGLANG): {"flashinfer-python": "0.7.2", "torch": "2.14.1"},
    ("vllm", VLLM): {"flashinfer-python": "0.7.3", "torch": "2.14.0"},
}
#: installed (not stood in for): both engines build their runtime state from msgspec.Struct classes
MSGSPEC = "0.23.0"
M, K = 8, 7168  # tokens, hidden size: the children's (DeepSeek-V3-like)
CHILDREN = {"sglang": (REPO / "tests" / "engine_sglang_child.py", "FP4PATCH-SGLANG-RESULT "),
            "vllm": (REPO / "tests" / "engine_vllm_child.py", "FP4PATCH-VLLM-RESULT ")}
MOE_FORMS = {"logits": "trtllm_fp4_block_scale_moe", "topk": "trtllm_fp4_block_scale_routed_moe",
             "packed": "trtllm_fp4_block_scale_routed_moe"}

_results: dict[tuple, dict] = {}


def _torch_traces_contextvar() -> bool:
    """Whether this interpreter's torch traces ``ContextVar.get`` (2.14 and later)."""
    return Version(importlib.metadata.version("torch")).release >= (2, 14)


def result(engine: str, flashinfer: str, tmp_path_factory, only: list[str], *specs: str) -> dict:
    """The child's result (the JSON dict its docstring describes) for ``engine`` (``"sglang"`` or ``"vllm"``) on
    FlashInfer ``flashinfer`` patched with ``specs`` (``"default"``: the default specs; none: pristine), running the
    cases ``only``; one child per arguments and test process (tests sharing a child carry one ``xdist_group``).

    Fails the test when the child exits non-zero or prints no result (``child_json``); raises
    ``fp4patch.errors.EnvironmentProblem`` when a wheel cannot be had from the registry."""
    key = (engine, flashinfer, specs, tuple(only))
    if key not in _results:
        if not specs:
            site = release_site(flashinfer, tmp_path_factory, bytecode=True)
        else:
            site = applied_site(flashinfer, tmp_path_factory, *(s for s in specs if s != "default"))
        version = SGLANG if engine == "sglang" else VLLM
        params = {
            "scan_probe": str(REPO / "fp4patch" / "probes" / "scan_probe.py"),
            "child_support": str(REPO / "tests" / "child_support.py"),
            "engine": str(engine_site(engine, version, sources_only=engine == "vllm")),
            "extra": [str(engine_site("msgspec", MSGSPEC))],
            "only": only,
        }
        script, mark = CHILDREN[engine]
        _results[key] = child_json(site, script, params, mark=mark, timeout=900)
    return _results[key]


def _op(name: str) -> str:
    return rf"fp4patch::{name}_[0-9a-f]{{8}}"


def _stops_in_flashinfer(r: dict, entered: str, where) -> None:
    """The call failed under Dynamo inside FlashInfer's code, after entering the file ``entered`` (the wrapper the
    engine called), and no stand-in was called.

    Where the loader is reached it is the wall; on an older torch Dynamo may stop earlier in the same wrapper (torch
    2.11: ``importlib.util.find_spec`` in the CuTe-DSL check is skipped, and the scan probe's device-properties
    stand-in is not traced), which the tests accept: tracing still stops inside FlashInfer.
    """
    assert r["graphs"] == 0 and r["error"].startswith(("Unsupported:", "InternalTorchDynamoError:")), (where, r)
    assert r["flashinfer_at"] and r["flashinfer_at"].startswith("flashinfer/"), (where, r)
    assert any(f.startswith(entered + ":") for f in r["flashinfer_frames"]), (where, r["flashinfer_frames"])
    assert r["stand_ins"] == [], (where, r["stand_ins"])


def _compiled(r: dict, where) -> None:
    """One graph, no graph break, no error, no stand-in called."""
    assert "error" not in r, (where, r.get("error"), r.get("tb"))
    assert r["graphs"] == 1 and r["breaks"] == 0, (where, r)
    assert r["stand_ins"] == [], (where, r["stand_ins"])


# --------------------------------------------------------------------------- #
# SGLang 0.5.23 on FlashInfer 0.7.2
# --------------------------------------------------------------------------- #
SGLANG_PATCHED = ["moe[logits]", "moe[topk]", "moe[packed]", "norm[rmsnorm_quant]", "norm[fused_add_rmsnorm_quant]"]
SGLANG_PRISTINE = [*SGLANG_PATCHED, "own[fp4_linear]", "own[moe_piecewise]", "own[moe_bypassed_piecewise]"]


@pytest.mark.xdist_group("engine-sglang")
@pytest.mark.parametrize("form", list(MOE_FORMS))
def test_sglang_fp4_moe_runner_patched(form: str, tmp_path_factory) -> None:
    """Patched, the runner is one graph: the per-token quantizer's op, then the MoE op of the routing form; the
    output is the MoE layer's [tokens, hidden] bf16. Below torch 2.14, Dynamo stops at SGLang's ContextVar read."""
    r = result("sglang", SGLANG_FLASHINFER, tmp_path_factory, SGLANG_PATCHED, "default")["cases"][f"moe[{form}]"]
    if not _torch_traces_contextvar():
        assert r["graphs"] == 0 and r["error"].startswith("Unsupported:") and "ContextVar" in r["explanation"], r
        assert r["engine_at"].startswith("sglang/srt/layers/moe/moe_runner/flashinfer_trtllm.py:"), r
        assert "_deferred_finalize_enabled.get()" in r["engine_at_source"] and r["flashinfer_at"] is None, r
        assert r["stand_ins"] == []
        return
    _compiled(r, form)
    assert len(r["ops"]) == 2 and re.fullmatch(_op("nvfp4_quantize"), r["ops"][0]), r["ops"]
    assert re.fullmatch(_op(MOE_FORMS[form]), r["ops"][1]), r["ops"]
    assert r["outputs"] == [[M, K], "torch.bfloat16"], r["outputs"]


@pytest.mark.xdist_group("engine-sglang")
@pytest.mark.parametrize("form", list(MOE_FORMS))
def test_sglang_fp4_moe_runner_pristine_stops_in_flashinfer(form: str, tmp_path_factory) -> None:
    """Unpatched, Dynamo traces into FlashInfer's ``nvfp4_quantize``, the runner's first FlashInfer call, and stops
    there: on a machine without CuTe-DSL at the wrapper's own availability check (torch 2.13 and later: its
    ``RuntimeError``), else further in its code."""
    res = result("sglang", SGLANG_FLASHINFER, tmp_path_factory, SGLANG_PRISTINE)
    r = res["cases"][f"moe[{form}]"]
    _stops_in_flashinfer(r, "flashinfer/quantization/fp4_quantization.py", form)
    assert "nvfp4_quantize(" in r["engine_at_source"], r
    if not res["cute_dsl"] and r["flashinfer_at"].startswith("flashinfer/quantization/fp4_quantization.py:"):
        assert r["flashinfer_at_source"].startswith("raise RuntimeError("), r  # "CuTe-DSL ... is not available"


@pytest.mark.xdist_group("engine-sglang")
def test_sglang_fp4_moe_needs_the_moe_specs_too(tmp_path_factory) -> None:
    """With only ``nvfp4-quantize-fullgraph`` applied the quantizer passes and each MoE entry point meets
    FlashInfer's kernel loader (the cubin loader logs): the MoE functions need their own specs."""
    if not _torch_traces_contextvar():
        pytest.skip(f"SGLang's MoE runner needs torch >= 2.14 under fullgraph (ContextVar.get); torch {importlib.metadata.version('torch')}")
    res = result("sglang", SGLANG_FLASHINFER, tmp_path_factory, [f"moe[{f}]" for f in MOE_FORMS], "nvfp4-quantize-fullgraph")
    for form, function in MOE_FORMS.items():
        r = res["cases"][f"moe[{form}]"]
        assert r["graphs"] == 0 and r["error"].startswith("Unsupported:"), (form, r)
        assert f"{function}(" in r["engine_at_source"], (form, r)
        assert any(f.startswith("flashinfer/fused_moe/core.py:") for f in r["flashinfer_frames"]), (form, r)
        assert r["flashinfer_at"].startswith("flashinfer/jit/"), (form, r)


NORM_OUTPUTS = {
    "rmsnorm_quant": [[[M, K], "torch.float8_e4m3fn"], [[1], "torch.float32"], "torch.bfloat16"],
    "fused_add_rmsnorm_quant": [[[[M, K], "torch.float8_e4m3fn"], [[1], "torch.float32"], "torch.bfloat16"], [[M, K], "torch.bfloat16"]],
}


@pytest.mark.xdist_group("engine-sglang")
@pytest.mark.parametrize("function", list(NORM_OUTPUTS))
def test_sglang_rmsnorm_fp8_fusion_patched(function: str, tmp_path_factory) -> None:
    """Patched, ``RMSNorm.forward_cuda`` fused with the FP8 linear's static input scale is one graph with the norm's
    op; it returns SGLang's ``(fp8 activation, scale, original dtype)`` (and the updated residual)."""
    r = result("sglang", SGLANG_FLASHINFER, tmp_path_factory, SGLANG_PATCHED, "default")["cases"][f"norm[{function}]"]
    _compiled(r, function)
    assert len(r["ops"]) == 1 and re.fullmatch(_op(function), r["ops"][0]), r["ops"]
    assert r["outputs"] == NORM_OUTPUTS[function], r["outputs"]


@pytest.mark.xdist_group("engine-sglang")
@pytest.mark.parametrize("function", list(NORM_OUTPUTS))
def test_sglang_rmsnorm_fp8_fusion_pristine_meets_the_jit_loader(function: str, tmp_path_factory) -> None:
    """Unpatched, the fused norm's FlashInfer call loads its JIT module under Dynamo and stops in the loader."""
    r = result("sglang", SGLANG_FLASHINFER, tmp_path_factory, SGLANG_PRISTINE)["cases"][f"norm[{function}]"]
    _stops_in_flashinfer(r, "flashinfer/norm/__init__.py", function)
    assert r["engine_at"].startswith("sglang/srt/layers/layernorm.py:") and f"_flashinfer_{function}(" in r["engine_at_source"], r
    if r["error"].startswith("Unsupported:"):
        assert r["flashinfer_at"].startswith("flashinfer/jit/"), r  # the JIT loader (datetime.now on 0.7.2)


SGLANG_OWN = {
    "own[fp4_linear]": (["sglang::flashinfer_fp4_quantize", "sglang::fp4_gemm"], [[M, 2048], "torch.bfloat16"]),
    "own[moe_piecewise]": (["sglang::moe_forward_piecewise_cuda_graph_impl"], [[M, K], "torch.bfloat16"]),
    "own[moe_bypassed_piecewise]": (["sglang::fused_moe_bypassed_piecewise_cuda_graph_impl"], [[M, K], "torch.bfloat16"]),
}


@pytest.mark.xdist_group("engine-sglang")
@pytest.mark.parametrize("case", list(SGLANG_OWN))
def test_sglang_own_ops_stay_opaque_without_fp4patch(case: str, tmp_path_factory) -> None:
    """On pristine FlashInfer, the paths SGLang wraps in its own custom ops compile: the NVFP4 linear
    (``sglang::flashinfer_fp4_quantize``, ``sglang::fp4_gemm``, ``quantization/fp4_utils.py`` and
    ``modelopt_quant.py``) and the MoE layer as the piecewise CUDA graph runs it (``fused_moe_triton/layer.py``),
    each one opaque node."""
    ops, outputs = SGLANG_OWN[case]
    r = result("sglang", SGLANG_FLASHINFER, tmp_path_factory, SGLANG_PRISTINE)["cases"][case]
    _compiled(r, case)
    assert r["ops"] == ops and r["outputs"] == outputs, r


@pytest.mark.xdist_group("engine-sglang")
def test_sglang_stand_ins_are_needed(tmp_path_factory) -> None:
    """Every package the SGLang child stands in for was imported by SGLang (or is installed here)."""
    res = result("sglang", SGLANG_FLASHINFER, tmp_path_factory, SGLANG_PRISTINE)
    assert res["unneeded_stand_ins"] == [], res["unneeded_stand_ins"]


# --------------------------------------------------------------------------- #
# vLLM 0.34.0 on FlashInfer 0.7.4
# --------------------------------------------------------------------------- #
VLLM_PRISTINE = ["per_token", "own[nvfp4_quantize]", "own[mm_fp4]", "own[bmm_fp8]", "own[mxfp8_quantize_8x4]", "own[mxfp8_quantize]",
                 "own[moe_forward]"]


@pytest.mark.xdist_group("engine-vllm")
def test_vllm_per_token_quantize_patched(tmp_path_factory) -> None:
    """Patched, ``quantize_nvfp4_per_token_input`` is one graph with ``nvfp4_quantize``'s op; it returns the packed
    FP4 activation [M, K/2] uint8, the linear-layout block scales [M, K/16] (uint8 bytes of E4M3) and one float32
    scale per token."""
    r = result("vllm", VLLM_FLASHINFER, tmp_path_factory, ["per_token"], "default")["cases"]["per_token"]
    _compiled(r, "per_token")
    assert len(r["ops"]) == 1 and re.fullmatch(_op("nvfp4_quantize"), r["ops"][0]), r["ops"]
    assert r["outputs"] == [[[M, K // 2], "torch.uint8"], [[M, K // 16], "torch.uint8"], [[M], "torch.float32"]], r["outputs"]


@pytest.mark.xdist_group("engine-vllm")
def test_vllm_per_token_quantize_pristine_meets_the_jit_loader(tmp_path_factory) -> None:
    """Unpatched, FlashInfer's ``nvfp4_quantize`` loads its JIT module under Dynamo and stops in the loader."""
    r = result("vllm", VLLM_FLASHINFER, tmp_path_factory, VLLM_PRISTINE)["cases"]["per_token"]
    _stops_in_flashinfer(r, "flashinfer/quantization/fp4_quantization.py", "per_token")
    assert r["engine_at"].startswith("vllm/model_executor/layers/quantization/utils/flashinfer_utils.py:"), r
    if r["error"].startswith("Unsupported:"):
        assert r["flashinfer_at"].startswith("flashinfer/jit/"), r  # the JIT loader (nvcc in a subprocess)


VLLM_OWN = {
    "own[nvfp4_quantize]": (["vllm::flashinfer_nvfp4_quantize"], [[[M, K // 2], "torch.uint8"], [[M, K // 16], "torch.uint8"]]),
    "own[mm_fp4]": (["vllm::flashinfer_mm_fp4"], [[M, 2048], "torch.bfloat16"]),
    "own[bmm_fp8]": (["vllm::bmm_fp8"], [[M, 2048], "torch.bfloat16"]),
    # the 8x4 layout's scales, flat: ceil(M/8)*8 rows of ceil(K/32/4)*4 (vllm/utils/flashinfer.py's fake)
    "own[mxfp8_quantize_8x4]": (["vllm::flashinfer_mxfp8_quantize_8x4"], [[[M, K], "torch.float8_e4m3fn"], [[8 * (K // 32)], "torch.uint8"]]),
    "own[mxfp8_quantize]": (["vllm::mxfp8_quantize"], [[[M, K], "torch.float8_e4m3fn"], [[M, K // 32], "torch.uint8"]]),
    "own[moe_forward]": (["vllm::moe_forward"], [[M, K], "torch.bfloat16"]),
}


@pytest.mark.xdist_group("engine-vllm")
@pytest.mark.parametrize("case", list(VLLM_OWN))
def test_vllm_own_ops_stay_opaque_without_fp4patch(case: str, tmp_path_factory) -> None:
    """On pristine FlashInfer, vLLM's own ops around FlashInfer's quantizers and GEMMs (``vllm/utils/flashinfer.py``,
    ``quantization/utils/mxfp8_utils.py``) and the MoE layer op ``MoERunner._select_forward`` picks on CUDA
    (``fused_moe/runner/moe_runner.py``) compile as one opaque node each."""
    ops, outputs = VLLM_OWN[case]
    res = result("vllm", VLLM_FLASHINFER, tmp_path_factory, VLLM_PRISTINE)
    r = res["cases"][case]
    _compiled(r, case)
    assert r["ops"] == ops and r["outputs"] == outputs, r
    if case == "own[moe_forward]":
        assert res["platform"].endswith("CudaPlatform") and res["moe_forward_selected"] == "vllm.moe_forward", res


@pytest.mark.xdist_group("engine-vllm")
def test_vllm_stand_ins_are_needed(tmp_path_factory) -> None:
    """Every package the vLLM child stands in for was imported by vLLM (or is installed here)."""
    res = result("vllm", VLLM_FLASHINFER, tmp_path_factory, VLLM_PRISTINE)
    assert res["unneeded_stand_ins"] == [], res["unneeded_stand_ins"]


# --------------------------------------------------------------------------- #
# The pins the README's engine table names
# --------------------------------------------------------------------------- #
def _requirement_pins(metadata: str) -> dict[str, str]:
    """``name -> version`` of the ``Requires-Dist: name==version`` lines (extras and markers dropped) of a wheel's
    METADATA text, names normalized (``flashinfer_python[cu13]`` is ``flashinfer-python``)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in email.message_from_string(metadata).get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        specifiers = list(requirement.specifier)
        if len(specifiers) == 1 and specifiers[0].operator == "==" and not requirement.marker:
            pins[canonicalize_name(requirement.name)] = specifiers[0].version
    return pins


@pytest.mark.parametrize("engine", list(PINS), ids=[f"{name}-{version}" for name, version in PINS])
def test_engine_pins(engine: tuple[str, str]) -> None:
    """The engine release pins the FlashInfer and torch the README's table names; a FlashInfer pin the registry does
    not serve (the catalog lists every registry release) is vLLM 0.34.0's 0.7.3, and its tests run on the served
    release just above it."""
    name, version = engine
    site = engine_site(name, version, sources_only=name == "vllm")
    (metadata,) = site.glob(f"{name}-{version}.dist-info/METADATA")
    pins = _requirement_pins(metadata.read_text())
    assert {k: pins.get(k) for k in PINS[engine]} == PINS[engine], pins
    catalog = json.loads((REPO / "patches" / "flashinfer-python" / "catalog.json").read_text())
    served = [Version(r["version"]) for r in catalog["releases"]]
    pinned = Version(PINS[engine]["flashinfer-python"])
    tested = Version(SGLANG_FLASHINFER if name == "sglang" else VLLM_FLASHINFER)
    if pinned in served:
        assert tested == pinned
    else:  # vLLM 0.34.0: the nearest release the registry serves after the pin
        assert (name, str(pinned)) == ("vllm", "0.7.3")
        assert tested == min(v for v in served if v > pinned) and max(v for v in served if v < pinned) == Version("0.7.2.post1")
