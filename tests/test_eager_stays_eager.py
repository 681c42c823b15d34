"""Eager stays eager (issue 17): the redirect fires only while a graph is traced, and the kernel runs once per call.

torch 2.13 holds ``torch.compiler._is_compiling_flag`` for a whole compile, process-wide (pytorch#184614).
The redirect used to read that flag alone, and the op's eager body calls the wrapper again, so a real call
made while any compile ran bounced between wrapper and op until ``RecursionError``: a thread calling
``fp4_quantize`` while another compiles, Inductor freezing constant-folding ``fp4_quantize(weight)``, an
engine's own custom op whose body calls FlashInfer. And a clone of the wrapper
(``types.FunctionType(inspect.unwrap(fn).__code__, namespace)``, the way engines swap FlashInfer's kernel
module) was redirected to the module's own code under compile.

Found while hunting for more of the kind (pytorch#184614 names code that runs inside a compile session
without being traced): a backend that runs the graph it compiles on its real example inputs, which
recursed too; FlashInfer's own op ``flashinfer::fp4_quantize`` (0.6.12+: a custom op whose body calls
the patched wrapper), which recursed with the flag set; a tensor subclass whose ``__torch_dispatch__`` calls FlashInfer, traced by AOTAutograd on
fake tensors, which goes through the op (unpatched, the kernel runs at trace time and the graph holds
its constant output).

``tests/eager_stays_eager_child.py`` runs each situation on the real 0.6.0 and 0.7.4 wheels after ``fp4patch
apply``, with FlashInfer's kernel entry replaced by a CPU stand-in that counts its calls and that Dynamo cannot
trace (as it cannot trace the real JIT loader). Each scenario states how many kernel calls its calls make
(``calls``): the count must be exactly that. With the previous redirect, ``flag_set``, ``thread``,
``freezing``, ``engine_op``, ``backend_runs_graph``, ``upstream_op`` and ``clone`` ended in ``RecursionError`` on both releases (the export and
AOTInductor scenarios passed on torch 2.13, where no real call runs under the flag there).
"""

from __future__ import annotations

import importlib.util
import json
import os
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

from .conftest import applied_site, release_site
from .python_forkserver import child_json, run_python

#: this interpreter's torch release (make test-torch runs the file under each torch of the matrix)
TORCH = Version(Version(metadata.version("torch")).public) if importlib.util.find_spec("torch") else Version("0")

pytestmark = [
    pytest.mark.torch,
    pytest.mark.torch_matrix,  # make test-torch runs them under each torch of the matrix
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

CHILD = Path(__file__).with_name("eager_stays_eager_child.py")
MARK = "FP4PATCH-EAGER "
MODULE = {"0.6.0": "flashinfer.fp4_quantization", "0.7.4": "flashinfer.quantization.fp4_quantization"}
# "thread" last: after a torch.compile in another thread, the next FakeTensorMode (any compile) segfaults in
# c10::impl::ensureCUDADeviceGuardSet on torch 2.11.0's CUDA build without a GPU (as make test-torch runs it), with
# neither FlashInfer nor fp4patch imported: a thread compiling `lambda x: x * 2`, then `with FakeTensorMode():
# torch.empty(2, device="cuda")` in the main thread (2.10.0, 2.14.1, 2.15.0 and 2.13.0+cpu do not)
SCENARIOS = ["eager", "flag_set", "compiled", "freezing", "export_strict", "export_nonstrict", "aoti", "engine_op",
             "backend_runs_graph", "subclass", "upstream_op", "clone", "thread"]
OP_PREFIX = "fp4patch.fp4_quantize_"


def run(site: Path, version: str, scenarios: list[str], remove: tuple[str, ...] = (), env: dict | None = None) -> dict:
    """The child's result for ``scenarios`` on ``site`` (see ``tests/eager_stays_eager_child.py``)."""
    params = {"module": MODULE[version], "scenarios": scenarios, "remove": list(remove)}
    return child_json(site, CHILD, params, mark=MARK, timeout=900, env=env)


def assert_kernel_once_per_call(result: dict, scenarios: list[str]) -> None:
    for name in scenarios:
        r = result[name]
        assert r["ok"], f"{name}: {r.get('error')}\n{r.get('tb', '')}"
        assert r["kernels"] == r["calls"], f"{name}: {r['kernels']} kernel calls for {r['calls']}: {r}"


@pytest.mark.parametrize("version", ["0.6.0", "0.7.4"])
def test_every_situation_runs_the_kernel_once_per_call(tmp_path_factory, version: str) -> None:
    result = run(applied_site(version, tmp_path_factory), version, SCENARIOS)
    assert result["dynamo_imported_by_flashinfer"] is False, "importing the patched FlashInfer must not import torch._dynamo"
    assert_kernel_once_per_call(result, SCENARIOS if TORCH >= Version("2.13") else [s for s in SCENARIOS if s != "subclass"])
    # the situations are real: the flag was set while those calls ran
    if TORCH >= Version("2.13"):  # the process-wide flag of a whole compile: torch 2.13 on
        assert result["flag_set"]["flag"] is True and result["thread"]["flag"] is True and result["thread"]["other_thread"] == []
    # traced: the op, one node per call, and no kernel while tracing
    assert [len(g) for g in result["compiled"]["graphs"]] == [1, 1]
    assert all(op.startswith(OP_PREFIX) for g in result["compiled"]["graphs"] for op in g)
    for name in ("export_strict", "export_nonstrict"):
        assert result[name]["while_exporting"] == 0 and len(result[name]["ops"]) == 2, result[name]
        assert all(op.startswith(OP_PREFIX) for op in result[name]["ops"]), result[name]
    assert result["aoti"]["while_compiling"] == 0
    assert sum(op.startswith(OP_PREFIX) for op in result["aoti"]["ops"]) == 2, result["aoti"]
    # an engine op stays opaque: its body runs FlashInfer eagerly at run time
    assert result["engine_op"]["graphs"] == [["fp4patch_test_engine.quant"]]
    # a backend running its graph while it compiles (eagerly, then through make_fx): the op's body, once each
    assert [len(g) for g in result["backend_runs_graph"]["graphs"]] == [1, 1]
    # a tensor subclass calling fp4_quantize in __torch_dispatch__: AOTAutograd traces it into the op (torch >= 2.13,
    # which holds _is_compiling_flag while AOTAutograd traces; before, the call runs as unpatched: docs/eager-stays-eager.md)
    if TORCH >= Version("2.13"):
        assert [len(g) for g in result["subclass"]["graphs"]] == [1]
    # FlashInfer's own flashinfer::fp4_quantize (0.6.12+) calls the patched wrapper in its body
    assert result["upstream_op"].get("absent", False) is (version == "0.6.0")


@pytest.mark.parametrize("version", ["0.6.0", "0.7.4"])
def test_a_clone_runs_its_own_code_as_unpatched(tmp_path_factory, version: str) -> None:
    """A clone with its own globals runs its own body: its swapped kernel module eagerly (also with the
    flag set), the same Dynamo error under fullgraph as the unpatched clone, and no fp4patch op when
    exported: the unpatched release's clone, in the same child, gives the same answers."""
    patched = run(applied_site(version, tmp_path_factory), version, ["clone"])["clone"]
    pristine = run(release_site(version, tmp_path_factory, bytecode=True), version, ["clone"])["clone"]
    assert patched["ok"] and pristine["ok"], (patched, pristine)
    assert patched["eager_swapped"] == 2 and patched["eager_kernels"] == 0, patched
    assert patched["compiled_error"] and patched["compiled_error"] == pristine["compiled_error"], (patched, pristine)
    assert patched["exported_ops"] == [] and patched["exported_swapped"] == 1, patched
    assert {k: v for k, v in patched.items() if k != "tb"} == {k: v for k, v in pristine.items() if k != "tb"}


def test_with_flashinfer_api_logging_on(tmp_path_factory) -> None:
    """``FLASHINFER_LOGLEVEL=1``: ``fp4_quantize`` is decorated by ``@flashinfer_api``'s logging wrapper,
    which Dynamo cannot trace; Dynamo traces the block's copy in place of every layer, eager calls log."""
    env = {"FLASHINFER_LOGLEVEL": "1", "FLASHINFER_LOGDEST": "stderr"}
    scenarios = ["flag_set", "compiled", "export_nonstrict", "engine_op", "clone"]
    result = run(applied_site("0.7.4", tmp_path_factory), "0.7.4", scenarios, env=env)
    assert_kernel_once_per_call(result, scenarios)
    assert [len(g) for g in result["compiled"]["graphs"]] == [1, 1]
    assert result["clone"]["compiled_error"] and result["clone"]["exported_ops"] == []


@pytest.mark.parametrize("remove", [("torch.compiler.substitute_in_graph",), ("torch.__version__=2.6.0",)], ids=["no-substitute_in_graph", "torch-2.6"])
def test_a_torch_below_the_floor_leaves_the_wrapper_as_it_was(tmp_path_factory, remove: tuple[str, ...]) -> None:
    """A patched FlashInfer imported under a torch fp4patch does not support (older than 2.7, or without an API the
    block relies on: ``torch.compiler.substitute_in_graph``) behaves as unpatched, never as a half-working compile
    path: eager calls, calls while the flag is set, in a thread and in an engine's op run the kernel once; compiled,
    nested or handed directly, it fails where the unpatched wrapper fails (FlashInfer's JIT loader); no op is
    registered, nothing of it in an exported graph."""
    scenarios = ["eager", "flag_set", "engine_op", "thread"]  # "thread" last: see SCENARIOS
    result = run(applied_site("0.7.4", tmp_path_factory), "0.7.4", [*scenarios[:-1], "compiled", "export_nonstrict", "thread"], remove=remove)
    assert_kernel_once_per_call(result, scenarios)
    assert not result["compiled"]["ok"], result["compiled"]
    assert "Unsupported" in result["compiled"]["error"], result["compiled"]["error"]
    export = result["export_nonstrict"]
    assert not export["ok"] or not any(op.startswith(OP_PREFIX) for op in export.get("ops", [])), export



LOAD = r"""
import json, sys, torch
if sys.argv[2] == "import-flashinfer":
    import flashinfer  # noqa: F401
try:
    ep = torch.export.load(sys.argv[1])
    out = {"loaded": True, "ops": sorted({str(n.target) for n in ep.graph.nodes if "fp4patch" in str(n.target)})}
except Exception as exc:
    out = {"loaded": False, "error": f"{type(exc).__name__}: {exc}"}
print("FP4PATCH-LOAD " + json.dumps(out))
"""


def load_program(site: Path, program: Path, mode: str) -> dict:
    """``torch.export.load(program)`` in a fresh interpreter whose path has ``site``, after ``import flashinfer``
    (``mode`` ``import-flashinfer``) or not (``bare``): ``{loaded, ops}`` or ``{loaded, error, log}`` (``log``: its
    stderr, where torch's warnings go)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_", "CUDA_"))}
    done = run_python(["-c", LOAD, str(program), mode], env={**env, "PYTHONPATH": str(site)}, cwd=program.parent, timeout=600)
    lines = [line[len("FP4PATCH-LOAD ") :] for line in done.stdout.splitlines() if line.startswith("FP4PATCH-LOAD ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return {**json.loads(lines[-1]), "log": done.stderr}


def test_an_exported_program_names_the_import_its_loader_needs(tmp_path_factory, tmp_path: Path) -> None:
    """A torch.export program holding fp4patch ops loads only where the patched FlashInfer was imported (its module
    registers the op). Loaded elsewhere, torch fails with its generic "We ran into an error when deserializing the
    saved file. Please check the warnings above": the warning above prints the op's node, which now carries the fix in
    its metadata, for strict and non-strict export alike; with `import flashinfer` first the program loads."""
    from fp4patch.ops.render import LOAD_HINT

    version = "0.7.4"
    site = applied_site(version, tmp_path_factory)
    params = {"module": MODULE[version], "scenarios": ["saved"], "remove": [], "save": str(tmp_path)}
    saved = child_json(site, CHILD, params, mark=MARK, timeout=900)["saved"]
    assert saved["ok"], saved.get("tb")
    for how in ("strict", "nonstrict"):
        if TORCH >= Version("2.13"):  # the hint is recorded from 2.13 on (2.7 strict and 2.10 non-strict record none)
            assert saved[how] and all(meta and meta.get("fp4patch") == LOAD_HINT for meta in saved[how]), (how, saved[how])
        program = tmp_path / f"export_{how}.pt2"
        bare = load_program(site, program, "bare")
        assert not bare["loaded"], bare
        if TORCH.release[:2] != (2, 8):  # torch 2.8 retries a failed load as its legacy format, and says only that
            assert "deserializing" in bare["error"], bare  # the archive has no 'version' (make test-torch, 2026-12-02)
        if TORCH >= Version("2.13"):  # older torch prints no warning naming the node
            assert f"torch.ops.{OP_PREFIX}" in bare["log"], (how, bare["log"][-3000:])
            assert "import flashinfer (patched by fp4patch" in bare["log"], (how, bare["log"][-3000:])
        imported = load_program(site, program, "import-flashinfer")
        assert imported["loaded"] and imported["ops"] and all(op.startswith(f"{OP_PREFIX}") for op in imported["ops"]), imported
