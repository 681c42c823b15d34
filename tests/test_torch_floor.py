"""A target environment with a torch below the supported range (torch 2.7, ``fp4patch.target.torch_support``) is refused
in one line by ``apply``, ``verify`` and ``scan``, and nothing is written; a supported torch, a pre-release or
local build of one, and no torch at all are not refused (the static commands need none).

The target's torch is read from its METADATA, never imported, so a site-packages holding FlashInfer beside a
``torch-<version>.dist-info`` (what pip leaves) stands for an environment with that torch. What a patched
FlashInfer does when imported under such a torch (as unpatched) is checked on the rendered block in
``tests/test_torch_fallbacks.py`` (``old_torch``) and on the real torch 2.6.0 by ``make test-torch``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fp4patch.target.torch_support import supported

from .conftest import run_cli, snapshot


def _with_torch(site: Path, version: str) -> Path:
    info = site / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    return site


@pytest.mark.parametrize(
    ("version", "expected"),
    [("2.6.0", False), ("2.6.0+cu124", False), ("2.4.1", False), ("1.13.1", False), ("2.7.0", True), ("2.7.1+cu126", True),
     ("2.8.0a0+gitabc", True), ("2.13.0+cpu", True), ("2.15.0", True), ("3.0.0", True), ("not a version", False)],
)
def test_the_supported_range(version: str, expected: bool) -> None:
    assert supported(version) is expected


@pytest.mark.parametrize("command", ["apply", "verify", "scan"])
def test_a_torch_below_the_floor_is_refused_in_one_line(site_060: Path, command: str) -> None:
    site = _with_torch(site_060, "2.6.0")
    before = snapshot(site)
    done = run_cli(command, "--site-packages", str(site))
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"fp4patch: error: site-packages {site}: torch 2.6.0 is older than fp4patch supports (torch >=2.7, tested up to "), line
    assert line.endswith(f"`fp4patch {command}` did nothing: upgrade torch to 2.7 or newer"), line
    assert snapshot(site) == before, "nothing written"


@pytest.mark.parametrize("command", ["verify", "apply"])
def test_after_a_downgrade_is_refused(site_060: Path, command: str) -> None:
    """A torch downgraded below the floor after a successful apply is refused by ``verify`` and ``apply`` alike."""
    run_cli("apply", "--site-packages", str(site_060), check=True)
    assert run_cli(command, "--site-packages", str(site_060)).returncode == 0
    _with_torch(site_060, "2.6.0")
    done = run_cli(command, "--site-packages", str(site_060))
    assert done.returncode == 2 and "torch 2.6.0 is older than fp4patch supports" in done.stderr, done.stdout + done.stderr


@pytest.mark.parametrize("command", ["apply", "verify"])
def test_site_packages_checked_with_a_python_below_the_floor_is_refused(site_060: Path, tmp_path: Path, command: str) -> None:
    """``--site-packages D --python P``: P imports D's FlashInfer, so P's torch is the one checked (D has none)."""
    import sys

    old_torch = _with_torch(tmp_path / "old-torch", "2.6.0") if (tmp_path / "old-torch").mkdir() is None else None
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={old_torch} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    before = snapshot(site_060)
    done = run_cli(command, "--site-packages", str(site_060), "--python", str(python))
    assert done.returncode == 2 and "torch 2.6.0 is older than fp4patch supports" in done.stderr, done.stdout + done.stderr
    assert snapshot(site_060) == before, "nothing written"


@pytest.mark.parametrize("version", [None, "2.7.0", "2.15.0+cu130"])
def test_a_supported_torch_or_none_is_not_refused(site_060: Path, version: str | None) -> None:
    site = _with_torch(site_060, version) if version else site_060
    done = run_cli("apply", "--site-packages", str(site))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "applied" in done.stdout
