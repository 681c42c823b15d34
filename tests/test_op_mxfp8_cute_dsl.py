"""``mxfp8_quantize(backend="cute-dsl")`` under torch.compile on every release that has the backend (0.6.7+).

SGLang's MXFP8 dense linear (``python/sglang/srt/layers/quantization/fp8_utils.py``,
``flashinfer_mxfp8_blockscaled_linear``, commit 002ed7e4) quantizes its 2-D activations with
``mxfp8_quantize(x, is_sf_swizzled_layout=True, alignment=32, backend="cute-dsl",
sf_swizzle_layout=SfLayout.layout_128x4)`` (``layout_linear`` when not swizzled). The CuTe-DSL driver
(``flashinfer/quantization/kernels/mxfp8_quantize.py:mxfp8_quantize_cute_dsl``) allocates the same outputs in
every release (float8_e4m3fn ``[m, round_up(K, alignment)]``, the input flattened to 2-D, and the uint8 1-D
scales); what the wrapper hands it, and the dtypes it takes, come in three eras, mirrored as release data of
the one op source (``ops/mxfp8_quantize.py``):

* 0.6.7-0.6.11.post3 (``cute_dsl_layout = "is_sf_swizzled_layout"``): the wrapper raises ``ValueError`` for
  ``SfLayout.layout_8x4`` and hands the driver the caller's ``is_sf_swizzled_layout`` (128x4 or linear);
* 0.6.12-0.7.0.post1 (``"sf_swizzle_layout"``): the layout comes from ``sf_swizzle_layout``, 8x4 included;
* 0.7.1+ (``cute_dsl_dtypes`` + float32): the driver takes fp32 input too.

Checked here: the op block fp4patch renders for a release, run in that release's real module, against the
driver's own allocation (kernel launch stubbed) over the grid's cute-dsl cases (M in 0, 1, 8, 127, 129, each
layout, SGLang's call, 3-D / column-major / fp32 / fp8 / 1-D input, alignments): the first release of each
era always, every other release with the backend under ``eras``; a neighbouring era's data on a release
differs exactly in the cases that era changed (so the data, not the grid, is what passes); and, after the
default ``apply``, SGLang's call compiles with ``fullgraph=True`` as one graph holding one fp4patch op on the
first release of each era (0.6.12 and 0.7.1 under ``eras``), the 8x4 call of the first era failing with the
wrapper's own ``ValueError``; the refusal kept for a driver no target mirrors yet (``cute_dsl`` false).
"""

from __future__ import annotations

import collections
import importlib.util
import itertools
import json

import pytest
from packaging.version import Version

from fp4patch.ops.render import release_data

from . import op_grids
from .conftest import REPO, release_params, release_site
from .test_op_variants_fullgraph import SGLANG_MXFP8, T, _compile, _one_op
from .test_trace_fullgraph import MARK, _child

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

SPEC = op_grids.specs()["mxfp8-quantize-fullgraph"]
#: the first release of each era of the CuTe-DSL path (one per target that has the backend, but 0.7.4's batch_invariant)
FIRST_OF_ERA = ("0.6.7", "0.6.12", "0.7.1")


def _release(target) -> dict:
    """The op source's RELEASE dict as rendered for ``target`` (defaults merged with the target's data)."""
    (kwargs,) = [kwargs for kind, kwargs in target.operation_specs if kind == "custom-op"]
    return release_data(kwargs["target"])


def _wheel_releases_with_the_backend() -> list[str]:
    from fp4patch.catalog.catalog_file import load_catalog

    out = []
    for r in load_catalog().releases:
        targets = [t for t in SPEC.targets_for(r.version) if not t.status]
        if r.archive == "wheel" and targets and "cute-dsl" in _release(targets[0])["backends"]:
            out.append(str(r.version))
    return out


CUTE_RELEASES = _wheel_releases_with_the_backend()


def test_every_release_with_the_backend_mirrors_it() -> None:
    """No target that accepts backend="cute-dsl" refuses it, and the first release of each era starts a target
    whose CuTe-DSL data differ from the previous one's (the eras are real splits, not copies)."""
    assert CUTE_RELEASES[0] == FIRST_OF_ERA[0] and set(FIRST_OF_ERA) <= set(CUTE_RELEASES)
    cute_targets = [t for t in SPEC.targets if not t.status and "cute-dsl" in _release(t)["backends"]]
    assert cute_targets and all(_release(t)["cute_dsl"] for t in cute_targets)
    data = [
        {k: v for k, v in _release(op_grids.target("mxfp8_quantize", v)).items() if k.startswith("cute_dsl_")}
        for v in FIRST_OF_ERA
    ]
    assert all(a != b for a, b in itertools.pairwise(data)), data
    for v in CUTE_RELEASES:  # each release takes the data of its era's first release
        era = max((e for e in FIRST_OF_ERA if Version(e) <= Version(v)), key=Version)
        got = {k: x for k, x in _release(op_grids.target("mxfp8_quantize", v)).items() if k.startswith("cute_dsl_")}
        assert got == data[FIRST_OF_ERA.index(era)], v


# --------------------------------------------------------------------------- #
# The rendered fake against the CuTe-DSL driver's own allocation, over the grid's cute-dsl cases
# --------------------------------------------------------------------------- #
_DRIVER_CHILD = f"""
import importlib, importlib.util, json, sys, warnings
params = json.loads(sys.argv[1])
sys.path.insert(0, params["repo"])
import torch
from fp4patch.probes import oracle
from tests.oracle_helpers import rendered_entry

spec = importlib.util.spec_from_file_location("_fp4patch_fake_check_probe", params["probe"])
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
warnings.simplefilter("ignore")
recorder = oracle.KernelRecorder()
with oracle.device_stubs():
    import flashinfer

    module = importlib.import_module(params["module"])
    entry = rendered_entry(params["block"], params["op_name"], module, "mxfp8_quantize")
    with oracle.jit_modules_replaced(recorder):
        summary, records = probe.run_function(oracle, flashinfer, torch, recorder, params["request"], fake=entry)
print({MARK!r} + json.dumps(dict(version=flashinfer.__version__, error=summary["error"], records=records)))
"""


def _run_block(code_version: str, data_version: str, tmp_path_factory) -> list[dict]:
    """The grid's cute-dsl records of ``code_version``'s wrapper and driver against the op block rendered for
    ``data_version``'s target, run in ``code_version``'s module."""
    site = release_site(code_version, tmp_path_factory, sources_only=True)
    target = op_grids.target("mxfp8_quantize", data_version)
    (rendered,) = target.custom_ops
    (block,) = [op.code for op in target.operations if op.kind == "append-to-module"]
    params = {
        "repo": str(REPO),
        "probe": str(op_grids.PROBE),
        "module": target.file[: -len(".py")].replace("/", "."),
        "block": block,
        "op_name": rendered.op_name,
        "request": op_grids.as_json(op_grids.request("mxfp8_quantize", code_version)),
    }
    result = _child(site, _DRIVER_CHILD, params)
    assert result["version"] == code_version and not result["error"], result["error"]
    assert [r["name"] for r in result["records"]] == [c["name"] for c in op_grids.cases("mxfp8_quantize", code_version)]
    return [r for r in result["records"] if r["name"].startswith("cute-dsl ")]


@pytest.mark.parametrize("version", release_params(CUTE_RELEASES, core=FIRST_OF_ERA))
def test_fake_equals_the_cute_dsl_driver(version: str, tmp_path_factory) -> None:
    records = _run_block(version, version, tmp_path_factory)
    mismatches = [r for r in records if r["status"] != "passed"]
    assert not mismatches, f"{len(mismatches)} of {len(records)}:\n" + json.dumps(mismatches[:10], indent=1)[:6000]
    outcomes = collections.Counter(
        "ok" if "ok" in (r["real"] or {}) else (r["real"] or {"error": ["-"]})["error"][0] for r in records
    )
    kernels = collections.Counter(k for r in records for k in r["kernels"])
    # the driver allocated its outputs for most cases and reached the (stubbed) compiled kernel; its dtype /
    # alignment asserts and the 1-D unpack were compared as errors
    assert outcomes["ok"] > 20 and outcomes["AssertionError"] >= 2 and outcomes["ValueError"] >= 1, outcomes
    assert any(k.startswith("_get_compiled_kernel") for k in kernels), kernels
    by_name = {r["name"]: r for r in records}
    sglang = by_name["cute-dsl SGLang SM100 [129, 7168] 128x4"]["real"]["ok"]
    # x_q [m, round_up(K, 32)]; sf round_up(m, 128) * round_up(K // 32, 4), from the driver itself
    assert sglang[0][0] == [129, 7168] and sglang[1][0] == [-(-129 // 128) * 128 * (-(-7168 // 32 // 4) * 4)], sglang


# Each neighbouring era's data on a release: the cases that era changed, by the grid's case names
def _layout_cases(name: str) -> bool:
    """8x4 (refused by the 0.6.7 wrapper) and SfLayout.layout_linear with is_sf_swizzled_layout left True (the
    flag picks 128x4 on 0.6.7), but at M=0, where both layouts have no scale factors."""
    return "layout_8x4" in name or name.endswith(("] 8x4", "swizzled flag")) or ("layout_linear" in name and " M=0 " not in name)


def _fp32_cases(name: str) -> bool:
    """fp32 input, accepted by the driver from 0.7.1, and fp8 input, whose dtype assert names fp32 from then."""
    return name in ("cute-dsl fp32 input", "cute-dsl fp8 input")


@pytest.mark.parametrize(
    ("code", "data", "changed"),
    [("0.6.7", "0.6.12", _layout_cases), ("0.6.12", "0.6.7", _layout_cases), ("0.7.1", "0.6.12", _fp32_cases)],
    ids=["0.6.7 code, 0.6.12 data", "0.6.12 code, 0.6.7 data", "0.7.1 code, 0.6.12 data"],
)
def test_a_neighbouring_eras_data_differs_in_what_that_era_changed(code: str, data: str, changed, tmp_path_factory) -> None:
    records = _run_block(code, data, tmp_path_factory)
    failed = {r["name"] for r in records if r["status"] != "passed"}
    assert failed == {r["name"] for r in records if changed(r["name"])} and failed, sorted(failed)


# --------------------------------------------------------------------------- #
# After the default apply: SGLang's call compiles as one graph (tests/test_op_variants_fullgraph.py's child)
# --------------------------------------------------------------------------- #
# 0.6.7 always (its wrapper's 8x4 refusal and layout flag); 0.6.12 and 0.7.1 under eras (their layout is 0.7.4's,
# compiled in tests/test_op_variants_fullgraph.py; each full apply costs some 20 s of CPU here)
@pytest.mark.parametrize("version", release_params(list(FIRST_OF_ERA), core=("0.6.7",)))
def test_sglang_call_compiles_as_one_graph(version: str, tmp_path_factory) -> None:
    linear = {**SGLANG_MXFP8, "is_sf_swizzled_layout": False, "sf_swizzle_layout": {"enum": "SfLayout.layout_linear"}}
    calls = {
        "sglang": ("mxfp8_quantize", [T(129, 7168)], SGLANG_MXFP8),
        "sglang linear, M=0": ("mxfp8_quantize", [T(0, 7168)], linear),
        "8x4 3-D": (
            "mxfp8_quantize",
            [T(2, 65, 128)],
            {"backend": "cute-dsl", "sf_swizzle_layout": {"enum": "SfLayout.layout_8x4"}},
        ),
    }
    got = _compile(version, tmp_path_factory, calls)
    _one_op(got["sglang"], "mxfp8_quantize")
    assert got["sglang"]["outputs"] == [[[129, 7168], [7168, 1], "torch.float8_e4m3fn"], [[256 * 224], [1], "torch.uint8"]]
    _one_op(got["sglang linear, M=0"], "mxfp8_quantize")
    assert got["sglang linear, M=0"]["outputs"] == [[[0, 7168], [7168, 1], "torch.float8_e4m3fn"], [[0], [1], "torch.uint8"]]
    eight = got["8x4 3-D"]
    if _release(op_grids.target("mxfp8_quantize", version))["cute_dsl_layout"] == "is_sf_swizzled_layout":
        # the wrapper refuses 8x4 on this backend: the fake raises its ValueError while tracing, which Dynamo
        # wraps (its class and message equal the wrapper's: test_fake_equals_the_cute_dsl_driver's 8x4 cases)
        assert eight["graphs"] == 0 and eight["type"] == "TorchRuntimeError", eight
    else:  # flattened to [130, 128]; sf round_up(130, 8) * round_up(128 // 32, 4)
        _one_op(eight, "mxfp8_quantize")
        assert eight["outputs"] == [[[130, 128], [128, 1], "torch.float8_e4m3fn"], [[136 * 4], [1], "torch.uint8"]]


def test_a_release_whose_driver_is_not_mirrored_is_refused_first_line() -> None:
    """The refusal kept for a later CuTe-DSL driver no target mirrors yet (release data ``cute_dsl`` false; no
    release now): fp4patch's one-line ``Unsupported`` naming the call, whatever the layout asked for."""
    import torch
    from torch._dynamo.exc import Unsupported
    from torch._subclasses.fake_tensor import FakeTensorMode

    from .oracle_helpers import load_op_source

    src = load_op_source(str(REPO / "patches" / "flashinfer-python" / "ops" / "mxfp8_quantize.py"), {}, {"cute_dsl": False})
    with FakeTensorMode():
        x = torch.empty(8, 64, dtype=torch.bfloat16, device="cuda")
        for layout in (-1, 0, 1, 2):
            with pytest.raises(Unsupported) as raised:
                src.fake(x, backend="cute-dsl", sf_swizzle_layout=layout)
            assert (
                str(raised.value)
                .splitlines()[0]
                .startswith("fp4patch: mxfp8_quantize(backend='cute-dsl') is not supported under torch.compile")
            )
        x_q, sf = src.fake(x, backend="cuda")  # the CUDA kernel's layout is still mirrored
        assert tuple(x_q.shape) == (8, 64) and tuple(sf.shape) == (128 * 4,)
