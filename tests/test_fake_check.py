"""``fp4patch.checks.fake_check``: the product's check of an op's fake against the installed wrapper, on CPU.

* With the default specs applied to the real 0.6.0 and 0.7.4 wheels, ``run_fake_check`` passes for each
  quantizer op there (``fp4_quantize`` with its CUDA and CuTe-DSL paths, the batched / grouped / experts
  NVFP4 and MXFP8 quantizers), every case of its grid compared or deliberately skipped; and for
  ``mm_fp4``, ``bmm_fp8`` and ``cutlass_fused_moe``. The two TRT-LLM-Gen MoE ops do not pass there, by
  design: every case is compared and agrees but the unfinalized calls, whose outputs the C++ launcher
  allocates; those come out not visible, with the grid's reason.
* On a synthetic release (a copy of the applied 0.7.4 with FlashInfer's own source edited) it fails for a
  changed output allocation the fake mirrors (the swizzled scale-factor padding of
  ``nvfp4_batched_quantize``'s kernel entry, ``mxfp8_quantize``'s linear scale-factor size, ``mm_fp4``'s
  ``out`` allocated column-major, the finalized TRT-LLM-Gen MoE output allocated in fp16), naming the output
  that differs, and still passes where the edit is one the fake does not depend on (a comment and a log
  line in ``fp4_quantize``, ``mxfp8_grouped_quantize``, ``bmm_fp8`` and ``cutlass_fused_moe``).
* The parts that need no FlashInfer: a request without a grid, the failure lines, the requests built from
  the specs, and the rule that the probe, the oracle and the grids import nothing of fp4patch.

One child interpreter per site-packages (each ``run_fake_check`` call runs one for all its functions).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

from fp4patch.target.environment import from_site_packages
from fp4patch.errors import EnvironmentProblem
from fp4patch.checks.fake_check import FAKE_CHECK_PROBE, ORACLE, FakeCheckRequest, describe_failure, requests_for, run_fake_check
from fp4patch.ops.render import CustomOpTarget

from . import op_grids
from .conftest import REPO, applied_site

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)")
GRIDS = REPO / "patches" / "flashinfer-python" / "grids"
#: the custom ops beyond the quantizers: the GEMMs and the MoE layers
GEMM_MOE = ["mm_fp4", "bmm_fp8", "trtllm_fp4_block_scale_moe", "trtllm_fp4_block_scale_routed_moe", "cutlass_fused_moe"]
#: the FP8-out RMSNorm ops (0.6.7+; checked in depth by tests/test_op_norm_quant.py) and the scale-factor swizzle
#: of weight preparation (tests/test_op_weight_prep.py)
NORM = ["rmsnorm_quant", "fused_add_rmsnorm_quant", "block_scale_interleave"]
#: the TRT-LLM-Gen FP8 MoE ops (checked in depth, the product check included, by tests/test_op_fp8_moe.py)
FP8_MOE = ["trtllm_fp8_block_scale_moe", "trtllm_fp8_per_tensor_scale_moe"]
#: nvfp4_quantize's own op (0.6.11+, per_token_activation; checked in depth by tests/test_op_nvfp4_quantize.py)
NVFP4 = ["nvfp4_quantize"]
#: those whose unfinalized outputs come from the C++ launcher (not visible on CPU)
TRTLLM = GEMM_MOE[2:4]
QUANTIZERS = [
    "fp4_quantize",
    "nvfp4_batched_quantize",
    "scaled_fp4_grouped_quantize",
    "silu_and_mul_scaled_nvfp4_experts_quantize",
    "mxfp8_quantize",
    "mxfp8_grouped_quantize",
    "silu_and_mul_mxfp8_experts_quantize",
]


def _requests(version: str, functions: list[str] = QUANTIZERS) -> list[FakeCheckRequest]:
    """The fake check's requests for the functions whose fullgraph spec patches ``version``."""
    found = []
    for function in functions:
        spec = op_grids.specs()[op_grids.spec_id(function)]
        for target in spec.targets_for(version):
            if not target.status:
                found += requests_for(spec, target)
    return found


@pytest.mark.torch
@needs_torch
@pytest.mark.parametrize("version", ["0.6.0", "0.7.4"])
def test_default_specs_pass_the_fake_check(version: str, tmp_path_factory) -> None:
    requests = _requests(version)
    present = [r.function for r in requests]
    # 0.6.0 predates the grouped MXFP8 quantizers (0.6.14, 0.7.4): their specs declare it not-needed
    assert present == (QUANTIZERS if version == "0.7.4" else [f for f in QUANTIZERS if "mxfp8_" not in f or f == "mxfp8_quantize"])
    site = applied_site(version, tmp_path_factory)
    results = run_fake_check(from_site_packages(site), site, requests + _requests(version, GEMM_MOE))  # one probe child
    assert list(results) == present + GEMM_MOE
    for request in requests:
        r = results[request.function]
        assert r.ok, f"{version} {request.function}: {r}"
        grid = op_grids.grid_module(request.grid).cases(frozenset(request.params), request.release)
        assert r.cases == len(grid) and r.compared + r.skipped_kernel == r.cases and r.compared > 0, r
        assert r.skipped_kernel == sum(1 for c in grid if c.get("kernel") is not None)
    if version == "0.7.4":  # the CuTe-DSL grid ran too (the TMA sizes, the environment, SM107)
        assert results["fp4_quantize"].compared > 1000
    _check_gemm_and_moe(version, results)


def _check_gemm_and_moe(version: str, results: dict) -> None:
    """The GEMM ops and cutlass_fused_moe pass; the TRT-LLM-Gen MoE ops pass every case the CPU can see and
    report the rest (the unfinalized calls the wrapper accepts) as not visible, with the grid's reason."""
    requests = _requests(version, GEMM_MOE)
    assert [r.function for r in requests] == GEMM_MOE
    for request in requests:
        r = results[request.function]
        grid = op_grids.grid_module(request.grid).cases(frozenset(request.params), request.release)
        assert not r.error and not r.failures and not r.unchecked, f"{version} {request.function}: {r}"
        assert r.cases == len(grid) and r.compared == r.cases and r.skipped_kernel == 0, r
        if request.function not in TRTLLM:
            assert r.ok and not r.not_visible, f"{version} {request.function}: {r}"
            continue
        declared = {c["name"] for c in grid if c.get("kernel_outputs")}
        unfinalized = {c["name"] for c in grid if not c["kwargs"].get("do_finalize", True)}
        assert declared == unfinalized, "every do_finalize=False call says its outputs come from the kernel"
        assert not r.ok and r.not_visible and set(r.not_visible) <= declared, r.not_visible
        # what the wrapper refuses in Python before the kernel is compared, unfinalized too (an output= or
        # valid_hidden_size it checks, no tokens where the release refuses them, a tuple it does not take)
        refused_first = declared - set(r.not_visible)
        assert all(any(w in n for w in ("valid_hidden_size", "output=", "M=0", "(ids, weights)")) for n in refused_first), refused_first
        assert r.compared - len(r.not_visible) >= len(grid) - len(declared) >= 30
        assert "come from the kernel" in r.summary() and "C++ launcher" in r.summary(), r.summary()
        assert set(r.reasons) == set(r.not_visible)  # each with the grid's reason
        # on its own target the fake never refuses a call the wrapper returns past the kernel (issue 24: such a case
        # stops launcher evidence from standing for the unseen outputs on a release fp4patch does not list)
        assert r.fake_raised == [], f"{version} {request.function}: {r.fake_raised[:3]}"


# Edits of FlashInfer 0.7.4's own source (flashinfer/), each (file, text, replacement).
CHANGED_ALLOCATION = [
    # nvfp4_batched_quantize's kernel entry fp4_batched_quantize_sm100: the scale factors' rows padded to 8, not 128
    ("quantization/fp4_quantization.py", "(b, _compute_swizzled_layout_sf_size(m, k // sf_vec_size, 128)),",
     "(b, _compute_swizzled_layout_sf_size(m, k // sf_vec_size, 8)),"),
    # mxfp8_quantize's kernel entry mxfp8_quantize_sm100: a linear layout of twice the scale factors
    ("quantization/fp8_quantization.py", "                out_sf_size = m * padded_k // 32\n", "                out_sf_size = m * padded_k // 16\n"),
    # mm_fp4's own out= allocation: column-major (N, M) transposed, where the fake allocates (M, N) row-major
    ("gemm/gemm_base.py",
     ("            (a.shape[0], b.shape[1]),\n            device=a.device,\n            dtype=out_dtype,\n        )\n\n"
      "    workspace_buffer = _get_stream_cache_buf(\n        \"mm_fp4_workspace\","),
     ("            (b.shape[1], a.shape[0]),\n            device=a.device,\n            dtype=out_dtype,\n        ).t()\n\n"
      "    workspace_buffer = _get_stream_cache_buf(\n        \"mm_fp4_workspace\",")),
    # the TRT-LLM-Gen MoE wrappers' finalized output (fused_moe/shared/inputs.py alloc_trtllm_moe_output): fp16, not bf16
    ("fused_moe/shared/inputs.py", "    dtype: torch.dtype = torch.bfloat16,\n) -> torch.Tensor:\n    \"\"\"Allocate the finalized-output buffer",
     "    dtype: torch.dtype = torch.float16,\n) -> torch.Tensor:\n    \"\"\"Allocate the finalized-output buffer"),
]
HARMLESS = [
    # a comment and a log line in fp4_quantize, before it resolves its recipe
    ("quantization/fp4_quantization.py", "    nvfp4_4over6_config = _resolve_fp4_quantize_recipe(\n",
     ("    # fp4patch test: a comment and a log line the fake does not depend on\n"
      "    __import__(\"logging\").getLogger(__name__).debug(\"fp4_quantize: %s\", tuple(input.shape))\n"
      "    nvfp4_4over6_config = _resolve_fp4_quantize_recipe(\n")),
    # a log line in mxfp8_grouped_quantize, first after fp4patch's redirect
    ("quantization/fp8_quantization.py", "            backend=backend,\n        )\n\n    if backend not in (",
     ("            backend=backend,\n        )\n"
      "    __import__(\"logging\").getLogger(__name__).info(\"mxfp8_grouped_quantize backend %s\", backend)  # fp4patch test\n"
      "\n    if backend not in (")),
    # a log line in bmm_fp8, before its workspace, and one in cutlass_fused_moe, before its output allocation
    ("gemm/gemm_base.py", "    workspace_buffer = _get_stream_cache_buf(\n        \"bmm_fp8_workspace\", DEFAULT_WORKSPACE_SIZE, A.device\n    )\n",
     ("    __import__(\"logging\").getLogger(__name__).debug(\"bmm_fp8 %s\", tuple(A.shape))  # fp4patch test\n"
      "    workspace_buffer = _get_stream_cache_buf(\n        \"bmm_fp8_workspace\", DEFAULT_WORKSPACE_SIZE, A.device\n    )\n")),
    ("fused_moe/core.py", "    if output is None:\n        output = torch.empty(output_shape, dtype=output_dtype, device=input.device)",
     ("    __import__(\"logging\").getLogger(__name__).info(\"cutlass_fused_moe %s\", output_shape)  # fp4patch test\n"
      "    if output is None:\n        output = torch.empty(output_shape, dtype=output_dtype, device=input.device)")),
]


def _edited_copy(source: Path, target: Path, edits: list[tuple[str, str, str]]) -> Path:
    """A hard-linked copy of the site-packages ``source`` with ``edits`` made to new copies of the files."""
    shutil.copytree(source, target, symlinks=True, copy_function=os.link)
    for name, old, new in edits:
        path = target / "flashinfer" / name
        text = path.read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{name}: the edit's anchor is not there once: {old!r}"
        path.unlink()  # a new file: the shared pristine and applied copies keep theirs
        path.write_text(text.replace(old, new), encoding="utf-8")
    return target


@pytest.mark.torch
@needs_torch
def test_a_changed_allocation_fails_and_a_harmless_change_passes(tmp_path: Path, tmp_path_factory) -> None:
    site = _edited_copy(applied_site("0.7.4", tmp_path_factory), tmp_path / "site", CHANGED_ALLOCATION + HARMLESS)
    functions = ["nvfp4_batched_quantize", "mxfp8_quantize", "fp4_quantize", "mxfp8_grouped_quantize", *GEMM_MOE]
    results = run_fake_check(from_site_packages(site), site, _requests("0.7.4", functions))
    batched, mxfp8 = results["nvfp4_batched_quantize"], results["mxfp8_quantize"]
    assert not batched.ok and not batched.error and batched.failures, batched
    # every case with an output fails on the scale factors alone (rows padded to 8: smaller, unless M = 0)
    assert all(": output 1 (sf): wrapper (" in f for f in batched.failures), batched.failures
    assert any(f.startswith("B=3 M=129 K=128 bf16: output 1 (sf): wrapper (3, 1088) stride (1088, 1) uint8, fake (3, 2048)") for f in batched.failures), batched.failures
    assert not any("M=0" in f for f in batched.failures)  # no rows: the same size either way
    assert not mxfp8.ok and mxfp8.failures, mxfp8
    linear = [f for f in mxfp8.failures if "linear" in f]
    assert linear and all(": output 1 (sf): wrapper (" in f for f in mxfp8.failures), mxfp8.failures
    assert not any("128x4" in f for f in mxfp8.failures)  # only the linear layout's size changed
    mm = results["mm_fp4"]  # out column-major: every accepted call without out= differs in its stride
    assert not mm.ok and mm.failures and all(": output 0 (out): wrapper (" in f for f in mm.failures), mm.failures
    assert any(f.startswith("M=129 backend=cutlass out=none: output 0 (out): wrapper (129, 256) stride (1, 129) bfloat16, fake (129, 256) stride (256, 1)")
               for f in mm.failures), mm.failures
    assert not any("out=contiguous" in f for f in mm.failures)  # the caller's out= is handed back as it was
    for function in TRTLLM:  # the finalized output is fp16 now: the cases the CPU can see fail, naming it
        moe = results[function]
        assert not moe.ok and moe.failures and all(": output 0 (output): wrapper (" in f and " float16, fake (" in f for f in moe.failures), moe.failures
        assert not any("do_finalize=False" in f or "output=given" in f for f in moe.failures), moe.failures  # only what Python allocates
        assert any(f.startswith("M=129 do_finalize=True nvfp4 ") for f in moe.failures), moe.failures
    for function in ("fp4_quantize", "mxfp8_grouped_quantize", "bmm_fp8", "cutlass_fused_moe"):
        assert results[function].ok, f"{function}: {results[function]}"


def test_a_missing_grid_is_not_ok_and_starts_no_probe(tmp_path: Path) -> None:
    env = from_site_packages(tmp_path)
    results = run_fake_check(env, tmp_path, [FakeCheckRequest("mm_fp4", tmp_path / "grids" / "mm_fp4.py", ("a", "b"), {})])
    assert not results["mm_fp4"].ok and "no case grid for mm_fp4" in results["mm_fp4"].error


@pytest.mark.torch
@needs_torch
def test_a_site_without_flashinfer_is_an_environment_problem(tmp_path: Path) -> None:
    if importlib.util.find_spec("flashinfer") is not None:
        pytest.skip("flashinfer is installed in this interpreter")
    with pytest.raises(EnvironmentProblem, match="fake check could not run"):
        run_fake_check(from_site_packages(tmp_path), tmp_path, _requests("0.7.4", ["mxfp8_quantize"]))


def test_failure_lines_name_the_first_differing_output() -> None:
    x_q = [[129, 32], [32, 1], "torch.uint8"]
    real = {"ok": [x_q, [[129, 4], [4, 1], "torch.uint8"]]}
    fake = {"ok": [x_q, [[256, 4], [4, 1], "torch.uint8"]]}
    assert describe_failure("M=129", real, fake, ("x_q", "sf")) == (
        "M=129: output 1 (sf): wrapper (129, 4) stride (4, 1) uint8, fake (256, 4) stride (4, 1) uint8"
    )
    raised = {"error": ["ValueError", "Unknown backend: x"]}
    assert describe_failure("backend=x", real, raised) == (
        "backend=x: wrapper returned (129, 32) stride (32, 1) uint8, (129, 4) stride (4, 1) uint8; fake raised ValueError: Unknown backend: x"
    )
    single = {"ok": [[129, 256], [1, 129], "torch.bfloat16"]}  # one tensor returned (mm_fp4): its one name
    assert describe_failure("M=129", single, {"ok": [[129, 256], [256, 1], "torch.bfloat16"]}, ("out",)) == (
        "M=129: output 0 (out): wrapper (129, 256) stride (1, 129) bfloat16, fake (129, 256) stride (256, 1) bfloat16"
    )
    handed_back = {"ok": [x_q[:3] + ["out"]]}
    assert describe_failure("out=", handed_back, {"ok": [x_q]}) == (
        "out=: output 0: wrapper (129, 32) stride (32, 1) uint8 (the argument out), fake (129, 32) stride (32, 1) uint8"
    )
    assert describe_failure("refusal", None, {"ok": [x_q]}).startswith("refusal: the fake should refuse this call")


def test_requests_carry_each_target_s_params_and_release_data() -> None:
    for spec in op_grids.specs().values():
        for target in spec.targets:
            requests = requests_for(spec, target)
            ops = [kwargs["target"] for kind, kwargs in target.operation_specs if kind == "custom-op"]
            assert [r.function for r in requests] == [op.function for op in ops]
            for request, op in zip(requests, ops):
                assert isinstance(op, CustomOpTarget)
                assert request.params == op.params and request.grid == spec.path.parent / "grids" / f"{op.function}.py"
                # the op source's RELEASE defaults, with the target's own data on top
                # (RELEASE is optional: the norm-quant op sources have none)
                nodes = [n for n in ast.parse(op.source).body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "RELEASE"]
                assert len(nodes) <= 1
                assert request.release == {**(ast.literal_eval(nodes[0].value) if nodes else {}), **op.release}
    for function in QUANTIZERS + GEMM_MOE + NORM + FP8_MOE + NVFP4:  # each custom op has its grid
        assert (GRIDS / f"{function}.py").is_file()
    # and no grid is left without a custom op (files starting with "_" are the grids' shared helpers)
    functions = {kw["target"].function for spec in op_grids.specs().values() for t in spec.targets for kind, kw in t.operation_specs if kind == "custom-op"}
    assert {p.stem for p in GRIDS.glob("*.py") if not p.name.startswith("_")} == functions == set(QUANTIZERS + GEMM_MOE + NORM + FP8_MOE + NVFP4)


def _module_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add("." if node.level else (node.module or "").split(".")[0])
    return names


def test_probe_oracle_and_grids_import_only_the_standard_library() -> None:
    """They run by path where fp4patch is not installed: no fp4patch, no relative import, nothing but the
    standard library at module level (torch and FlashInfer are imported inside their functions)."""
    for path in [FAKE_CHECK_PROBE, ORACLE, *sorted(GRIDS.glob("*.py"))]:
        imported = _module_level_imports(path) - {"__future__"}
        assert imported <= set(sys.stdlib_module_names), f"{path.name}: {sorted(imported - set(sys.stdlib_module_names))}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0 and not (node.module or "").startswith("fp4patch"), f"{path.name}:{node.lineno}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("fp4patch") for a in node.names), f"{path.name}:{node.lineno}"


def _wheel_releases() -> list[str]:
    from fp4patch.catalog.catalog_file import load_catalog

    return [str(r.version) for r in load_catalog().releases if r.archive == "wheel"]


@pytest.mark.torch
@needs_torch
@pytest.mark.eras
@pytest.mark.parametrize("version", _wheel_releases())
def test_every_wheel_release_passes_the_fake_check_on_its_own_targets(version: str, tmp_path_factory) -> None:
    """On every wheel release (``make test-eras``), each op with a case grid passes the product's check
    on the release's own target: a grid or stub gap there would refuse a release fp4patch does not know
    for nothing (0.7.2's Cake launcher, imported by the kernel entry, was one; 0.6.15.post1's CuTe DSL
    availability check under ``backend="auto"`` another). The cases a grid declares out of the CPU's
    reach (``unchecked`` with its reason, ``kernel_outputs`` of TRT-LLM-Gen's unfinalized MoE outputs)
    may stay unchecked; every other case must be compared and agree."""
    from fp4patch.states import APPLIED

    site = applied_site(version, tmp_path_factory)
    import json

    from .conftest import run_cli

    status = {r["id"]: r["state"] for r in json.loads(run_cli("status", "--site-packages", str(site), "--json", check=True).stdout)["specs"]}
    requests = []
    for spec_id, spec in op_grids.specs().items():
        if status.get(spec_id) != APPLIED:
            continue
        for target in spec.targets_for(version):
            if not target.status:
                requests += [r for r in requests_for(spec, target) if r.grid.is_file()]
    if not requests:
        pytest.skip(f"no op with a case grid is applied on {version}")
    results = run_fake_check(from_site_packages(site), site, requests)
    bad = {
        f: r.error or r.failures[:2] or [n for n in r.not_visible if n not in r.reasons][:2] or [u for u in r.unchecked if ": " not in u][:2]
        or [f"fake refuses what the wrapper returns past the kernel: {n}" for n in r.fake_raised[:2]]
        for f, r in results.items()
    }
    bad = {f: why for f, why in bad.items() if why}
    assert not bad, f"{version}: " + "; ".join(f"{f}: {why}" for f, why in bad.items())
    assert all(r.compared for r in results.values()), {f: r.cases for f, r in results.items() if not r.compared}
