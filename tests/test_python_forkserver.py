"""The tests' fork server (tests/python_forkserver.py): a forked child sees what a fresh interpreter would."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .python_forkserver import run_python

PRINT_PATH = "import json, sys; print(json.dumps(sys.path))"


def test_a_forked_child_has_the_sys_path_of_a_fresh_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `PYTHONPATH=... pytest`: the server starts with this process's PYTHONPATH; a request whose
    # environment has another (or none) must not see the server's entries (a CLI run without
    # --python/--site-packages then found a FlashInfer the fresh interpreter does not)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    monkeypatch.setenv("PYTHONPATH", str(ours))
    preload = ("json",)  # a server of its own (no other test asks for this preload)
    for env_path in (None, str(theirs)):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if env_path:
            env["PYTHONPATH"] = env_path
        monkeypatch.setenv("FP4PATCH_TEST_FORKSERVER", "1")
        forked = run_python(["-c", PRINT_PATH], env=env, cwd=tmp_path, preload=preload)
        monkeypatch.setenv("FP4PATCH_TEST_FORKSERVER", "0")
        fresh = run_python(["-c", PRINT_PATH], env=env, cwd=tmp_path, preload=preload)
        assert forked.returncode == fresh.returncode == 0, forked.stderr + fresh.stderr
        assert json.loads(forked.stdout) == json.loads(fresh.stdout)
        assert str(ours) not in json.loads(forked.stdout)
