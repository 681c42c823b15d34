"""The built wheel is what users get: it ships the specs, installs into a fresh venv, and its
`fp4patch` command drives another venv's real flashinfer-python through --python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fp4patch.catalog.spec import load_specs

from .conftest import REPO, SPECS_DIR, snapshot

pytestmark = [pytest.mark.slow, pytest.mark.recipe]


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1", **(env or {})})
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done


def test_wheel_installs_and_drives_a_real_flashinfer(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO))
    (wheel,) = dist.glob("fp4patch-*.whl")
    tool = tmp_path / "tool"
    run(sys.executable, "-m", "venv", str(tool))
    run(str(tool / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel))
    # the specs travel inside the wheel, not from this checkout
    shipped = {p.name for p in (tool / "lib").glob("python*/site-packages/fp4patch/patches/flashinfer-python/*.toml")}
    assert shipped == {s.path.name for s in load_specs(SPECS_DIR)}

    target = tmp_path / "target"
    run(sys.executable, "-m", "venv", str(target))
    run(str(target / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", "--no-deps", "flashinfer-python==0.6.0")
    fp4patch = str(tool / "bin" / "fp4patch")
    python = ("--python", str(target / "bin" / "python"))
    outside = {"PYTHONPATH": ""}  # nothing from this checkout

    status = json.loads(run(fp4patch, "status", *python, "--json", env=outside).stdout)
    assert status["version"] == "0.6.0"
    assert {s["id"] for s in status["specs"]} == {s.id for s in load_specs(SPECS_DIR)}
    assert Path(status["site_packages"]).is_relative_to(target)

    site = Path(status["site_packages"])
    before = snapshot(site / "flashinfer")
    run(fp4patch, "apply", *python, env=outside)
    assert run(fp4patch, "verify", *python, env=outside).returncode == 0
    assert snapshot(site / "flashinfer") != before
    run(fp4patch, "revert", *python, env=outside)
    assert snapshot(site / "flashinfer") == before
    assert not (site / ".fp4patch").exists()
