"""The custom op's identity follows its schema and fake: an upgrade never meets a stale compiled graph.

PyTorch's FX-graph (inductor) cache keys on the graph's code, which names the op, and on neither the
op's schema nor its fake. When every FlashInfer release registered the same ``fp4patch::fp4_quantize``,
a warm cache compiled on 0.6.0 was served after an upgrade to 0.7.4, whose swizzled scale factors are
reshaped to padded columns (0.6.8+), and the compiled code's own size check failed:
``AssertionError: expected size 128==256, stride 4==2``. The op is now ``fp4patch::fp4_quantize_<8 hex>``,
a fingerprint of the rendered schema, fake and release data (``fp4patch/ops/render.py``).

The scenario runs as a user meets it — one site-packages, one inductor cache directory, cache on:
apply on 0.6.0 and compile; replace FlashInfer by 0.7.4 as ``pip install --no-deps`` does; apply again
and compile again. The kernel is stubbed (CPU), the wrapper's own Python shapes the outputs.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from fp4patch.catalog.spec import load_specs

from .conftest import SPECS_DIR, release_site, run_cli
from .python_forkserver import run_python

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

MARK = "FP4PATCH-IDENTITY "

# Compile fp4_quantize(x[7, 64] bf16, sf_vec_size=32, sf_use_ue8m0=True) with inductor, run it on CPU
# with the JIT kernel replaced by a stand-in that returns the kernel's real output sizes.
CHILD = r"""
import importlib, json, sys
import torch
import flashinfer

module = sys.argv[1]
mod = importlib.import_module(module)
kernel_params = json.loads(sys.argv[2])


def _round_up(a, b):
    return (a + b - 1) // b * b


class Kernel:
    def fp4_quantize_sm100(self, *args, **kwargs):
        rec = dict(zip(kernel_params, args))
        rec.update(kwargs)
        m, k = rec["input"].shape
        cols = k // rec["sf_vec_size"]
        if rec["is_sf_swizzled_layout"]:
            n = _round_up(m, 8 if rec["is_sf_8x4_layout"] else 128) * _round_up(cols, 4)
        else:
            n = m * cols
        return torch.zeros(m, k // 2, dtype=torch.uint8), torch.zeros(n, dtype=torch.uint8)


mod.get_fp4_quantization_module = lambda backend="100": Kernel()
mod.get_compute_capability = lambda device: (10, 0)
mod.device_support_pdl = lambda device: False
if hasattr(mod, "_check_block_scale_quantization_support"):
    mod._check_block_scale_quantization_support = lambda *a, **k: None


def f(x):
    return flashinfer.fp4_quantize(x, sf_vec_size=32, sf_use_ue8m0=True)


x = torch.randn(7, 64, dtype=torch.bfloat16)
q, sf = torch.compile(f, backend="inductor", fullgraph=True)(x)
ops = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("fp4patch::fp4_quantize_"))
print("MARK" + json.dumps({"sf": [list(sf.shape), list(sf.stride())], "q": list(q.shape), "ops": ops}))
""".replace("MARK", MARK)

FP4_FILE = {"0.6.0": "flashinfer/fp4_quantization.py", "0.7.4": "flashinfer/quantization/fp4_quantization.py"}


def _kernel_params(site: Path, version: str) -> list[str]:
    import ast

    tree = ast.parse((site / FP4_FILE[version]).read_text(encoding="utf-8"))
    outer = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_fp4_quantization_module")
    inner = next(n for n in ast.walk(outer) if isinstance(n, ast.FunctionDef) and n.name == "fp4_quantize_sm100")
    return [a.arg for a in inner.args.args]


def _compile(site: Path, version: str, cache: Path) -> dict:
    import json

    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_", "TORCHINDUCTOR_", "TORCH_COMPILE"))}
    env.update(PYTHONPATH=str(site), TORCHINDUCTOR_CACHE_DIR=str(cache))
    module = FP4_FILE[version][: -len(".py")].replace("/", ".")
    # TORCHINDUCTOR_CACHE_DIR differs from this process's: run_python starts a new interpreter
    done = run_python(["-c", CHILD, module, json.dumps(_kernel_params(site, version))], env=env, cwd=site, timeout=900)
    lines = [line[len(MARK):] for line in done.stdout.splitlines() if line.startswith(MARK)]
    assert done.returncode == 0 and lines, f"compile on {version} failed (exit {done.returncode})\n{done.stderr[-4000:]}"
    return json.loads(lines[-1])


def _install(site: Path, version: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Replace FlashInfer in ``site`` by ``version``'s files, as ``pip install --no-deps`` does: every
    top-level entry of the wheel (``flashinfer/``, its ``.dist-info``, and the ``build_backend.py``,
    ``build_utils.py``, ``b12x/`` its RECORD lists too), hard links to the shared pristine unpack;
    fp4patch's ``.fp4patch`` state is left where it is."""
    for child in site.iterdir():
        if child.name != ".fp4patch":
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    pristine = release_site(version, tmp_path_factory, sources_only=True)
    for child in pristine.iterdir():
        if child.is_dir():
            shutil.copytree(child, site / child.name, copy_function=os.link)
        else:
            os.link(child, site / child.name)


def test_upgrade_with_a_warm_inductor_cache_compiles_cleanly(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    cache = tmp_path / "inductor-cache"
    _install(site, "0.6.0", tmp_path_factory)
    run_cli("apply", "--site-packages", str(site), check=True)
    old = _compile(site, "0.6.0", cache)
    assert any(p.is_file() for p in cache.rglob("*")), "the inductor cache stayed empty: the test would prove nothing"

    _install(site, "0.7.4", tmp_path_factory)
    run_cli("apply", "--site-packages", str(site), check=True)
    new = _compile(site, "0.7.4", cache)

    # the layouts differ between the releases (what made a stale cached graph fail) ...
    assert old["sf"] == [[256, 2], [2, 1]] and new["sf"] == [[128, 4], [4, 1]], (old, new)
    # ... and each release's op carries its own name
    (old_op,) = old["ops"]
    (new_op,) = new["ops"]
    assert old_op != new_op and old_op.startswith("fp4patch::fp4_quantize_") and new_op.startswith("fp4patch::fp4_quantize_")


def test_op_name_changes_exactly_when_schema_fake_or_release_data_change() -> None:
    """Targets with the same parameters and release data share a name; any difference changes it."""
    (spec,) = [s for s in load_specs(SPECS_DIR) if s.id == "fp4-quantize-fullgraph"]
    names = {}
    for target in spec.targets:
        if target.status:
            continue
        (rendered,) = target.custom_ops
        kwargs = dict(next(k for kind, k in target.operation_specs if kind == "custom-op"))
        data = kwargs["target"]
        names[str(target.versions)] = (rendered.op_name, (data.params, tuple(sorted(data.defaults.items())), repr(sorted(data.release.items()))))
    by_data: dict = {}
    for name, data in names.values():
        by_data.setdefault(data, set()).add(name)
    assert all(len(v) == 1 for v in by_data.values()), "same schema, fake and data must give the same name"
    assert len({n for n, _ in names.values()}) == len(by_data), "different schema or data must give different names"


def test_op_name_changes_when_a_shared_helper_it_inlines_changes() -> None:
    """A shared helper module (``ops/_nvfp4_4over6.py``) is part of the op: editing a function the op source
    imports from it changes the name; editing one it does not import leaves the name as it was."""
    import dataclasses

    from fp4patch.ops.render import render

    (spec,) = [s for s in load_specs(SPECS_DIR) if s.id == "fp4-quantize-fullgraph"]
    target = next(t for t in spec.targets if not t.status and t.contains("0.7.4"))
    data = next(k for kind, k in target.operation_specs if kind == "custom-op")["target"]
    helper = data.helpers["_nvfp4_4over6"]
    assert "def _nvfp4_4over6_code(" in helper and "return 0\n" in helper
    name = render(data).op_name
    edited = dataclasses.replace(data, helpers={**data.helpers, "_nvfp4_4over6": helper.replace("return 0\n", "return 1\n", 1)})
    assert render(edited).op_name != name
    unused = dataclasses.replace(data, helpers={**data.helpers, "_nvfp4_4over6": helper + "\n\ndef _not_imported():\n    return 2\n"})
    assert render(unused).op_name == name
