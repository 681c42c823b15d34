"""``fp4patch verify --opcheck`` where it can be checked without a GPU: its refusal and its op lookup.

The probe's real run (``torch.library.opcheck`` of every patched op against the real kernels) needs a
CUDA device; its H200 results are in docs/gpu-results.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from fp4patch.cli.render import opcheck_lines
from fp4patch.probes.opcheck_probe import CASES

from .conftest import applied_site, release_site, run_cli
from .python_forkserver import run_python

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]

PROBE = Path(__file__).resolve().parent.parent / "fp4patch" / "probes" / "opcheck_probe.py"


def test_opcheck_without_a_gpu_says_so_in_one_line(tmp_path_factory) -> None:
    site = applied_site("0.6.0", tmp_path_factory)
    done = run_cli("verify", "--opcheck", "--site-packages", str(site))
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0] and "--opcheck needs a CUDA GPU" in lines[0], done.stderr


def test_probe_finds_the_fingerprinted_op_of_each_patched_function(tmp_path_factory) -> None:
    site = applied_site("0.6.0", tmp_path_factory)
    unpatched = release_site("0.6.0", tmp_path_factory, bytecode=True)
    script = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import opcheck_probe as p;"
        "print(json.dumps({f: (str(op._schema.name) if op is not None else None) for f in p.CASES for op in [p.patched_op(f)]}))"
    )
    found = {}
    for name, where in (("patched", site), ("unpatched", unpatched)):
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}, "PYTHONPATH": str(where)}
        done = run_python(["-c", script, str(PROBE.parent)], env=env, cwd=where)
        assert done.returncode == 0, done.stderr[-3000:]
        found[name] = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(op is None for op in found["unpatched"].values()), found
    assert found["patched"]["fp4_quantize"].startswith("fp4patch::fp4_quantize_"), found
    # two specs patch flashinfer/gemm/gemm_base.py; each op is found through its own entry
    assert found["patched"]["bmm_fp8"].startswith("fp4patch::bmm_fp8_"), found
    assert found["patched"]["mm_fp4"].startswith("fp4patch::mm_fp4_"), found


def test_opcheck_lines_count_each_status_and_list_what_did_not_pass() -> None:
    results = [
        {"function": "fp4_quantize", "case": "M=1", "status": "passed", "detail": ""},
        {"function": "mm_fp4", "case": "M=8", "status": "skipped", "detail": "ValueError: does not support backend 'cutlass' with capability 90"},
        {"function": "bmm_fp8", "case": "M=8", "status": "failed", "detail": "AssertionError: fake differs"},
    ]
    lines = opcheck_lines(results)
    assert lines[0] == "opcheck against the real kernels: 1 passed, 1 failed, 1 skipped"
    assert [line.split()[0] for line in lines[1:]] == ["mm_fp4", "bmm_fp8"] and "capability 90" in lines[1]
    assert set(CASES) >= {"fp4_quantize", "bmm_fp8", "mm_fp4"}


CASE_CHECK = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import opcheck_probe as p
import scan_probe
from torch._subclasses.fake_tensor import FakeTensorMode

scan_probe.install_device_stubs(torch)  # fake CUDA tensors on a CPU machine, as the scan makes them
report = {}
for function, cases in p.CASES.items():
    op = p.patched_op(function)
    if op is None:
        report[function] = None
        continue
    names = {a.name for a in op._schema.arguments}
    rows = []
    with FakeTensorMode():
        for case, kwargs in cases(torch, torch.device("cuda")):
            if isinstance(kwargs, Exception):  # a case built from a real kernel call (mm_fp4 quantizes first)
                continue
            try:
                op(**{k: v for k, v in kwargs.items() if k in names})
                error = ""
            except Exception as exc:
                error = type(exc).__name__ + ": " + (str(exc).splitlines() or [""])[0]
            rows.append({"case": case, "unknown": sorted(set(kwargs) - names), "error": error})
    report[function] = rows
print(json.dumps(report))
"""


def test_every_opcheck_case_names_its_ops_parameters_and_its_fake_accepts_it(tmp_path_factory) -> None:
    # The probe drops a keyword the installed op lacks (an older release); a misspelt one would vanish
    # silently too. On the newest release every case's keywords must be the op's, and its fake must run.
    site = applied_site("0.7.4", tmp_path_factory)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}, "PYTHONPATH": str(site)}
    done = run_python(["-c", CASE_CHECK, str(PROBE.parent)], env=env, cwd=site)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(report) == set(CASES)
    missing = [f for f, rows in report.items() if rows is None]
    assert not missing, f"no patched op on 0.7.4 for {missing}"
    checked = 0
    for function, rows in report.items():
        for row in rows:
            assert not row["unknown"], (function, row)
            assert not row["error"], (function, row)
            checked += 1
    assert checked >= 2 * len(CASES)
