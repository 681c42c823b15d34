"""``flashinfer-fp4-quantize-op-keywords``: upstream's ``flashinfer::fp4_quantize`` forwards by keyword.

FlashInfer 0.6.12 - 0.7.0.post1 register ``flashinfer::fp4_quantize`` whose body calls
``fp4_quantize`` with seven positional arguments; ``fp4_quantize``'s seventh parameter is
``is_global_scale_inversed`` there, so the op's ``enable_pdl`` lands in it. These tests make the
call ``torch.ops.flashinfer.fp4_quantize(x, gs, 16, False, True, False, True)`` on CPU in a fresh
interpreter on the real wheels and record the arguments at the kernel entry (the JIT module's
``fp4_quantize_sm100``, stubbed by ``COMMON`` of ``test_trace_fullgraph``): on the pristine release
the kernel sees ``is_global_scale_inversed=True, enable_pdl=False`` (the bug, so the check can fail);
after the default specs (this one together with ``fp4-quantize-fullgraph``, same file) it sees
exactly what ``fp4_quantize(..., enable_pdl=True)`` passes.

Real CPU tensors, not fake ones: under ``FakeTensorMode`` a custom op runs its fake, never its
body, so the forwarding can only be seen with tensors that dispatch to the body.
"""

from __future__ import annotations

import importlib.util

import pytest

from fp4patch.engine.coordinator import Engine
from fp4patch.target.environment import find_distribution, from_site_packages
from fp4patch.catalog.spec import load_specs

from .conftest import SPECS_DIR, applied_site, release_site
from .test_trace_fullgraph import COMMON, FULLGRAPH, KEYWORDS, MARK, _child, _kernel_params

SPEC = "flashinfer-fp4-quantize-op-keywords"
FILE = "flashinfer/quantization/fp4_quantization.py"
MODULE = "flashinfer.quantization.fp4_quantization"

CHILD = COMMON + r"""
# the call from the issue: seven positional arguments, the last one enable_pdl=True
torch.ops.flashinfer.fp4_quantize(x, gs, 16, False, True, False, True)
through_op = kernel_calls[-1]
flashinfer.fp4_quantize(x, gs, 16, False, True, False, enable_pdl=True)
direct = kernel_calls[-1]
print("MARK" + json.dumps(dict(through_op=through_op, direct=direct, calls=len(kernel_calls))))
""".replace("MARK", MARK)


def _run(site, version):
    params = {"module": MODULE, "kernel_params": _kernel_params((site / FILE).read_text(encoding="utf-8"))}
    return _child(site, CHILD, params)


@pytest.mark.torch
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)")
@pytest.mark.parametrize("version", ["0.6.18.post1", "0.7.0.post1"])
def test_upstream_op_reaches_the_kernel_with_enable_pdl(tmp_path_factory, version: str) -> None:
    pristine = _run(release_site(version, tmp_path_factory, bytecode=True), version)
    # the bug, in the same set-up: enable_pdl=True arrives as is_global_scale_inversed, and the kernel
    # gets the auto-detected PDL setting (the stub's "<auto-pdl>") instead of the caller's True
    assert pristine["through_op"]["is_global_scale_inversed"] is True, pristine
    assert pristine["through_op"]["enable_pdl"] == "<auto-pdl>", pristine
    assert pristine["direct"]["enable_pdl"] is True and pristine["direct"]["is_global_scale_inversed"] is False, pristine

    site = applied_site(version, tmp_path_factory, FULLGRAPH, KEYWORDS)  # both patch the same file
    patched = _run(site, version)
    assert patched["calls"] == 2
    assert patched["through_op"]["is_global_scale_inversed"] is False, patched
    assert patched["through_op"]["enable_pdl"] is True, patched
    assert patched["through_op"] == patched["direct"], "the op must reach the kernel as fp4_quantize(..., enable_pdl=True) does"
    assert patched["through_op"]["global_scale"] == "<gs>" and patched["through_op"]["sf_vec_size"] == 16


@pytest.mark.parametrize(
    ("version", "state"),
    [("0.6.0", "not-needed"), ("0.6.12", "applicable"), ("0.7.0.post1", "applicable"), ("0.7.1", "obsolete"), ("0.7.4", "obsolete")],
)
def test_states_across_releases(tmp_path_factory, version: str, state: str) -> None:
    """Patched on 0.6.12 - 0.7.0.post1, obsolete from 0.7.1 where upstream forwards by keyword."""
    site = release_site(version, tmp_path_factory, sources_only=True)
    specs = load_specs(SPECS_DIR)
    engine = Engine(find_distribution(from_site_packages(site), "flashinfer-python"), specs)
    by_id = {s.id: s for s in specs}
    report = engine.report(by_id[SPEC])
    assert report.state == state, report.to_json()
    if state == "applicable":  # and together with fp4-quantize-fullgraph on the same file
        assert engine.report(by_id[FULLGRAPH]).state == "applicable"
        plans = engine.plan([by_id[SPEC], by_id[FULLGRAPH]])
        assert set(plans[FILE].specs) == {SPEC, FULLGRAPH}
