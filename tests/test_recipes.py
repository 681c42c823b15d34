"""The example recipes run as written: the Dockerfile's build-stage RUN lines, in order, in a fresh
directory standing in for the image's filesystem (no Docker engine needed).

The commands are parsed out of examples/Dockerfile, so the recipe and this test cannot diverge;
only the image paths (/opt/venv, /opt/fp4patch, /src/fp4patch) are mapped into a temporary
directory and ARG defaults are expanded. ``/src/fp4patch`` (``COPY . /src/fp4patch``) is a copy of
the build context as Docker computes it from ``.dockerignore`` (the Docker SDK's matcher), so the
recipe also proves that the context holds what the image builds from.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from .conftest import REPO

DOCKERFILE = REPO / "examples" / "Dockerfile"
# How README and the Dockerfile's header say to build: the checkout is the context.
DOCKERFILE_IN_CONTEXT = "examples/Dockerfile"


def docker_build_context(root: Path, dockerfile: str = DOCKERFILE_IN_CONTEXT) -> set[str]:
    """Paths (relative to ``root``, files and folders) that ``docker build -f DOCKERFILE ROOT`` sends.

    ``root/.dockerignore`` is read as the Docker SDK reads it (blank lines and ``#`` comments
    dropped) and matched by ``docker.utils.build.exclude_paths``, the SDK's port of moby's
    pattern matcher (Go ``filepath.Match`` per path element, ``**``, ``!`` exceptions, and the
    Dockerfile and .dockerignore always sent).
    """
    from docker.utils.build import exclude_paths

    ignore = root / ".dockerignore"
    lines = ignore.read_text().splitlines() if ignore.exists() else []
    patterns = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    return {path.replace(os.sep, "/") for path in exclude_paths(str(root), patterns, dockerfile=dockerfile)}


def wheel_sources(root: Path) -> set[str]:
    """Files that ``pip install /src/fp4patch`` builds the wheel from, read from pyproject.toml.

    The hatch wheel target's packages and force-included folders (bytecode caches left out), the
    readme and pyproject.toml itself.
    """
    project = tomllib.loads((root / "pyproject.toml").read_text())
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    folders = [*wheel["packages"], *wheel.get("force-include", {})]
    files = {"pyproject.toml", project["project"]["readme"]}
    for folder in folders:
        files |= {
            p.relative_to(root).as_posix()
            for p in (root / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        }
    return files


def context_files(root: Path) -> set[str]:
    return {p for p in docker_build_context(root) if (root / p).is_file()}


# What `make test`, `make demo`, pytest, hypothesis, python -m build and git leave in a checkout.
LOCAL_LEFTOVERS = [
    ".venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so",
    ".demo/target/lib/python3.11/site-packages/flashinfer/data/cubin.bin",
    ".demo/tool/bin/fp4patch",
    ".cache/fp4patch/releases/flashinfer_python-0.7.4-py3-none-any.whl",
    ".hypothesis/examples/x",
    ".git/objects/pack/pack-1.pack",
    ".pytest_cache/v/cache/lastfailed",
    ".whl/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
    "build/lib/fp4patch/cli.py",
    "dist/fp4patch-0.1.0-py3-none-any.whl",
    "fp4patch/__pycache__/cli.cpython-311.pyc",
    "patches/flashinfer-python/fp4-quantize-fullgraph/__pycache__/custom_op_v0_5.cpython-311.pyc",
    "venv/bin/python",
    "benchmarks/results/cli.json",
]


def test_docker_context_is_the_wheel_sources_and_leaves_local_environments_out(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    sources = wheel_sources(REPO)
    for relative in [*sources, ".dockerignore", DOCKERFILE_IN_CONTEXT]:
        if not (REPO / relative).exists():
            continue
        (checkout / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / relative, checkout / relative)
    for relative in LOCAL_LEFTOVERS:
        (checkout / relative).parent.mkdir(parents=True, exist_ok=True)
        (checkout / relative).write_bytes(b"x")
    sent = context_files(checkout)
    assert not sent & set(LOCAL_LEFTOVERS), f"sent to the builder: {sorted(sent & set(LOCAL_LEFTOVERS))}"
    assert sent == sources | {".dockerignore", DOCKERFILE_IN_CONTEXT}, f"missing {sorted(sources - sent)}; extra {sorted(sent - sources)}"


def test_docker_context_of_this_checkout_stays_small() -> None:
    sent = context_files(REPO)
    assert sent <= wheel_sources(REPO) | {".dockerignore", DOCKERFILE_IN_CONTEXT}, sorted(sent - wheel_sources(REPO))
    size = sum((REPO / p).stat().st_size for p in sent)
    # what is sent is the wheel's own sources (asserted above); most of it is patches/, whose specs carry
    # a before/after case per release era with the whole rendered op block (2.3 MB on 2026-12-01): the
    # bound catches a cache or venv slipping past .dockerignore, which is tens of MB
    assert size < 4_000_000, f"build context {size} bytes"


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
@pytest.mark.recipe
def test_dockerfile_build_stage_runs(tmp_path: Path) -> None:
    runs, args = dockerfile_stage(DOCKERFILE, "build")
    root = tmp_path / "image"
    source = root / "src/fp4patch"  # COPY . /src/fp4patch: the build context, as Docker computes it
    for relative in context_files(REPO):
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / relative, source / relative)
    mapping = {"/opt/venv": str(root / "opt/venv"), "/opt/fp4patch": str(root / "opt/fp4patch"), "/src/fp4patch": str(source)}
    env = {**os.environ, "NO_COLOR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", **args}
    env.pop("PYTHONPATH", None)
    if os.environ.get("TORCH_INDEX_URL"):  # `make test TORCH_INDEX_URL=...`: the CPU build here too, not the CUDA one
        env["PIP_EXTRA_INDEX_URL"] = " ".join(filter(None, [os.environ.get("PIP_EXTRA_INDEX_URL"), os.environ["TORCH_INDEX_URL"]]))
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
@pytest.mark.recipe
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
    assert "::notice title=fp4patch fp4-quantize-fullgraph%3A applied::" in verify  # `:` escaped in a property
    assert "::error" not in verify
    against = outputs["Will the patches apply to the next release?"]
    assert f"flashinfer-python {job_env['FLASHINFER_NEXT']}: fp4-quantize-fullgraph applicable" in against
    assert "::error" not in against


# ------------------------------------------------------------------------------------- Makefile
#: The variables the Makefile reads that a README invocation may set (``make test TORCH_INDEX_URL=...``,
#: ``make test TEST_JOBS=0``, ``make demo FLASHINFER_VERSION=0.7.4``): make exports them to the suite, and a
#: command-line one reaches every make run below through MAKEFLAGS.
MAKE_VARIABLES = ("PYTHON", "VENV", "FLASHINFER_VERSION", "TORCH_SPEC", "TORCH_INDEX_URL", "TEST_JOBS", "ROUNDS", "JOBS", "TORCH_MATRIX", "FP4PATCH_TORCH_CACHE")
#: What a parent make hands its children: the command-line variables and options of the invocation.
MAKE_INHERITED = ("MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKELEVEL", "GNUMAKEFLAGS", "MAKEFILES")


def make_dry_run(*args: str) -> list[str]:
    """The commands ``make -n ARGS`` would run in this checkout (nothing is run), with the Makefile's
    defaults for every variable ``ARGS`` does not set: the suite may itself run under ``make test
    TORCH_INDEX_URL=...`` (the README's command), whose variables must not leak into the make run here."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if k not in MAKE_VARIABLES and k not in MAKE_INHERITED}
    done = subprocess.run(["make", "-n", *args], capture_output=True, text=True, cwd=REPO, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def pip_installs(lines: list[str]) -> list[str]:
    return [line for line in lines if " -m pip install " in line]


def test_make_test_takes_the_torch_requirement_and_index_from_variables(tmp_path: Path) -> None:
    venv = tmp_path / "venv"  # not built yet: make shows the whole installation
    index = "https://download.pytorch.org/whl/cpu"
    chosen = pip_installs(make_dry_run("test", f"VENV={venv}", "TORCH_SPEC=torch==2.13.0+cpu", f"TORCH_INDEX_URL={index}"))
    torch_lines = [line for line in chosen if "'torch==" in line]
    assert len(torch_lines) == 1, chosen
    # the install, then what make says when it fails (test_make_test_behind_a_firewall_says_what_to_do)
    install, _, on_failure = torch_lines[0].partition(" || ")
    assert install.endswith(f"--index-url {index} 'torch==2.13.0+cpu'") and "leave TORCH_INDEX_URL out" in on_failure, chosen
    # the index replaces the registry for torch only: the test requirements and fp4patch come from the usual place
    assert [line for line in chosen if "--index-url" in line] == torch_lines
    default = pip_installs(make_dry_run("test", f"VENV={venv}"))
    assert len(default) == len(chosen) and not any("--index-url" in line for line in default), default
    (default_torch,) = [line for line in default if "'torch==" in line]
    assert default_torch.replace("'torch==2.13.0'", f"--index-url {index} 'torch==2.13.0+cpu'") == install


@pytest.mark.slow
@pytest.mark.recipe
def test_make_test_behind_a_firewall_says_what_to_do(tmp_path: Path) -> None:
    """``make test TORCH_INDEX_URL=...`` asks only that index for torch; where it cannot be reached pip ends "No
    matching distribution found for torch==2.13.0", and make's last line says why and what to do (issue 34, item 10).
    The firewall: an index on a closed port, pip's configuration and ``PIP_*`` variables (this machine's wheel folder)
    left out, no retries."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    closed = "http://127.0.0.1:9/simple"
    env = {k: v for k, v in os.environ.items()
           if k not in MAKE_VARIABLES and k not in MAKE_INHERITED and not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_RETRIES="0", PIP_DISABLE_PIP_VERSION_CHECK="1")
    venv = tmp_path / "venv"
    done = subprocess.run(["make", f"{venv}/.installed", f"VENV={venv}", f"TORCH_INDEX_URL={closed}"],
                          capture_output=True, text=True, cwd=REPO, env=env, check=False, timeout=300)
    assert done.returncode != 0 and not (venv / ".installed").exists(), done.stdout + done.stderr
    assert "No matching distribution found for torch==2.13.0" in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("make: ***")]
    assert lines[-1].startswith(f"make: torch==2.13.0 was looked for only in TORCH_INDEX_URL={closed}"), lines[-1]
    assert "leave TORCH_INDEX_URL out" in lines[-1] and "a firewall" in lines[-1], lines[-1]


@pytest.mark.parametrize(
    "invocation",
    [
        {"TORCH_INDEX_URL": "https://download.pytorch.org/whl/cpu"},
        {"TEST_JOBS": "0"},
        {"TORCH_SPEC": "torch==2.13.0+cpu", "TORCH_INDEX_URL": "https://download.pytorch.org/whl/cpu"},
    ],
    ids=["torch-index-url", "test-jobs-0", "torch-spec"],
)
def test_the_make_recipe_tests_pass_under_every_readme_invocation(
    invocation: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `make test TORCH_INDEX_URL=...` (README, development.md) runs the suite with the variable exported and in
    # MAKEFLAGS, which a child make reads; the recipe tests must see the Makefile's own defaults all the same
    for name, value in invocation.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MAKEFLAGS", " ".join(f"{k}={v}" for k, v in invocation.items()))
    monkeypatch.setenv("MAKELEVEL", "1")
    test_make_test_takes_the_torch_requirement_and_index_from_variables(tmp_path)
    test_make_test_runs_the_suite_in_parallel_workers(tmp_path)


def test_make_test_runs_the_suite_in_parallel_workers(tmp_path: Path) -> None:
    (run,) = [line for line in make_dry_run("test", f"VENV={tmp_path / 'venv'}", "TEST_JOBS=3") if " -m pytest " in line]
    quick = '-m "not property_long and not eras and not exhaustive and not recipe and not heavy and not releases and not matrix"'
    assert " -n 3 --dist loadgroup " in run and quick in run
    (heavy,) = [line for line in make_dry_run("test-heavy", f"VENV={tmp_path / 'venv'}", "TEST_JOBS=3") if " -m pytest " in line]
    # the heavy tests make test leaves out, with the same other exclusions: together they are the suite
    assert " -n 3 --dist loadgroup " in heavy and '-m "heavy and not property_long and not eras and not exhaustive and not recipe and not releases and not matrix"' in heavy
    (releases,) = [line for line in make_dry_run("test-releases", f"VENV={tmp_path / 'venv'}", "TEST_JOBS=3") if " -m pytest " in line]
    assert " -n 3 --dist loadgroup " in releases and "-m releases" in releases
    (recipes,) = [line for line in make_dry_run("test-recipes", f"VENV={tmp_path / 'venv'}") if " -m pytest " in line]
    assert '-m recipe' in recipes


def test_ci_runs_the_tests_and_the_recipes() -> None:
    commands = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines() if line.strip().startswith("make ")]
    assert commands == [
        "make test", "make lint", "make test-heavy", 'make test-releases RELEASES="$(.venv/bin/python scripts/ci_releases.py)"',
        "make test-recipes", 'make test-torch TORCH_MATRIX="2.7.1 2.15.0"',
    ]


def test_make_test_torch_runs_the_matrix_of_the_variables(tmp_path: Path) -> None:
    """``make test-torch`` hands TORCH_MATRIX, TEST_JOBS and TORCH_INDEX_URL to scripts/torch_matrix.py, and the venvs'
    cache (FP4PATCH_TORCH_CACHE) lies outside the checkout by default."""
    index = "https://download.pytorch.org/whl/cpu"
    (run,) = [line for line in make_dry_run("test-torch", f"VENV={tmp_path / 'venv'}", "TEST_JOBS=2", 'TORCH_MATRIX=2.10.0 2.15.0',
                                            f"TORCH_INDEX_URL={index}") if "scripts/torch_matrix.py" in line]
    assert run.endswith(f"scripts/torch_matrix.py run --python python3 --jobs 2 --torch-index-url {index} 2.10.0 2.15.0"), run
    (default,) = [line for line in make_dry_run("test-torch", f"VENV={tmp_path / 'venv'}") if "scripts/torch_matrix.py" in line]
    assert "--torch-index-url" not in default and default.endswith("--jobs auto 2.6.0 2.7.1 2.8.0 2.9.1 2.10.0 2.11.0 2.12.1 2.13.0 2.14.0 2.14.1 2.15.0")
    env = {k: v for k, v in os.environ.items() if k not in MAKE_VARIABLES and k not in MAKE_INHERITED}  # as make_dry_run
    done = subprocess.run(["make", "-pn", "test-torch", f"VENV={tmp_path / 'venv'}"], capture_output=True, text=True, cwd=REPO, env=env, check=False)
    (cache,) = [line for line in done.stdout.splitlines() if line.startswith("FP4PATCH_TORCH_CACHE ")]
    assert cache.endswith("$(HOME)/.cache/fp4patch/torch")


def _recording_interpreter(path: Path, log: Path) -> Path:
    """A stand-in interpreter at ``path``: appends ``<its name> <arguments>`` to ``log`` and exits 7."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "$(basename "$0") $*" >> "{log}"\nexit 7\n')
    path.chmod(0o755)
    return path


def test_make_demo_makes_its_venvs_with_the_python_given(tmp_path: Path) -> None:
    """``make demo PYTHON=...`` (Makefile's variable, as for ``make test``) creates the demo's venvs with that
    interpreter, not with whatever ``python3`` is on PATH (issue 34, item 9). Run on a copy of the Makefile and
    scripts/demo.sh (the demo replaces ``.demo`` beside the script), with stand-ins that stop at the first venv."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    checkout = tmp_path / "checkout"
    for relative in ("Makefile", "scripts/demo.sh"):
        (checkout / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / relative, checkout / relative)
    log = tmp_path / "calls.log"
    chosen = _recording_interpreter(tmp_path / "chosen" / "python3.11", log)
    _recording_interpreter(tmp_path / "path" / "python3", log)  # what PATH offers
    env = {k: v for k, v in os.environ.items() if k not in MAKE_VARIABLES and k not in MAKE_INHERITED}
    env["PATH"] = f"{tmp_path / 'path'}{os.pathsep}{env['PATH']}"
    done = subprocess.run(["make", "demo", f"PYTHON={chosen}"], capture_output=True, text=True, cwd=checkout, env=env, check=False)
    assert done.returncode != 0, done.stdout + done.stderr  # the stand-in refused to make the venv
    assert log.read_text().splitlines() == [f"python3.11 -m venv {checkout / '.demo' / 'target'}"], log.read_text()


#: "1,387 tests", "133 heavy tests": a count of tests, as the docs would write one
TEST_COUNT = re.compile(r"\b\d[\d,]*\s+(?:\w+\s+)?tests\b")


def test_the_suite_size_is_stated_in_one_place() -> None:
    """The number of tests changes with every session, so the docs state it once, in docs/development.md's dated
    measurement of ``make test`` (issue 34, item 10: the README said about 1,330, docs/development.md 864, a run gave
    1,387); the README and the other pages say how long the suite takes, not how many tests it has."""
    found = {
        (page.relative_to(REPO).as_posix(), match.group())
        for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
        for match in TEST_COUNT.finditer(page.read_text())
    }
    assert len(found) == 1, sorted(found)
    ((page, count),) = found
    (paragraph,) = [p for p in (REPO / page).read_text().split("\n\n") if count in p]
    assert page == "docs/development.md" and paragraph.startswith("Time of `make test`:"), (page, paragraph[:80])
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", paragraph), "the measurement carries its date"
