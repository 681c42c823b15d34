"""The example recipes run as written: the Dockerfile's build-stage RUN lines, in order, in a fresh
directory standing in for the image's filesystem (no Docker engine needed).

The commands are parsed out of examples/Dockerfile, so the recipe and this test cannot diverge;
only the image paths (/opt/venv, /opt/fp4patch, /src/fp4patch) are mapped into a temporary
directory and ARG defaults are expanded.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO

DOCKERFILE = REPO / "examples" / "Dockerfile"


def dockerfile_stage(path: Path, stage: str) -> tuple[list[str], dict[str, str]]:
    """RUN commands of ``stage`` in order (continuation lines joined), and the ARG defaults."""
    text = re.sub(r"\\\n", " ", path.read_text())
    args: dict[str, str] = {}
    runs: list[str] = []
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            args[key.strip()] = value.strip()
        elif word == "FROM":
            current = rest.split(" AS ")[-1].strip() if " AS " in rest else None
        elif word == "RUN" and current == stage:
            runs.append(rest)
    return runs, args


def test_dockerfile_parses_into_the_steps_users_read() -> None:
    runs, args = dockerfile_stage(DOCKERFILE, "build")
    assert args["FLASHINFER_VERSION"]
    assert any("fp4patch apply --python /opt/venv/bin/python" in r for r in runs)
    assert runs[-1].startswith("/opt/fp4patch/bin/fp4patch verify --trace")


@pytest.mark.slow
@pytest.mark.torch
def test_dockerfile_build_stage_runs(tmp_path: Path) -> None:
    runs, args = dockerfile_stage(DOCKERFILE, "build")
    root = tmp_path / "image"
    mapping = {"/opt/venv": str(root / "opt/venv"), "/opt/fp4patch": str(root / "opt/fp4patch"), "/src/fp4patch": str(REPO)}
    env = {**os.environ, "NO_COLOR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", **args}
    env.pop("PYTHONPATH", None)
    for command in runs:
        for image_path, local in mapping.items():
            command = command.replace(image_path, local)
        for key, value in args.items():
            command = command.replace("${" + key + "}", value)
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", command], capture_output=True, text=True, env=env, cwd=tmp_path)
        assert done.returncode == 0, f"RUN {command}\nexit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    # The last step was verify --trace: every trace case passed in the server's venv.
    assert "verify: ok" in done.stdout
    assert "cases passed" in done.stdout


WORKFLOW = REPO / "examples" / "github-workflow.yml"


def workflow_steps(path: Path) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The ``run:`` steps of the workflow's only job, in order, with the job's ``env``."""
    import yaml

    data = yaml.safe_load(path.read_text())
    (job,) = data["jobs"].values()
    steps = [(step.get("name", step["run"][:40]), step["run"]) for step in job["steps"] if "run" in step]
    return steps, {k: str(v) for k, v in job.get("env", {}).items()}


@pytest.mark.slow
def test_github_workflow_steps_run(tmp_path: Path) -> None:
    steps, job_env = workflow_steps(WORKFLOW)
    assert [name for name, _ in steps][-1].startswith("Will the patches apply")
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    env = {**os.environ, **job_env, "RUNNER_TEMP": str(runner_temp), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    outputs = {}
    for name, script in steps:
        done = subprocess.run(["bash", "-eo", "pipefail", "-c", script], capture_output=True, text=True, env=env, cwd=REPO)
        assert done.returncode == 0, f"step {name!r} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        outputs[name] = done.stdout
    # verify printed GitHub annotations: a notice per applied spec, no error
    verify = outputs["Patch and verify"]
    assert "::notice title=fp4patch fp4-quantize-fullgraph: applied::" in verify
    assert "::error" not in verify
    against = outputs["Will the patches apply to the next release?"]
    assert f"flashinfer-python {job_env['FLASHINFER_NEXT']}: fp4-quantize-fullgraph applicable" in against
    assert "::error" not in against
