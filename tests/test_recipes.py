"""The recipes run as written, from folders that are not fp4patch's checkout, with the install lines the docs give
(issue 34, item 1: fp4patch is not on the package registry, so a user's CI job or image build must install it from
a wheel ``make dist`` built or from its git repository).

* examples/Dockerfile: the build stage's ``COPY`` and ``RUN`` lines, in order, in a fresh directory standing in for
  the image's filesystem (no Docker engine needed), with a user's repository as the build context: that file and
  ``dist/`` holding the wheel ``make dist`` built. Only the image paths (/opt/venv, /opt/fp4patch, /tmp/fp4patch) are
  mapped into the temporary directory and ARG defaults are expanded; the checkout's own context is computed with the
  Docker SDK's ``.dockerignore`` matcher.
* examples/github-workflow.yml: the ``run:`` steps in order, in a user's repository, installing fp4patch with the
  workflow's own ``FP4PATCH`` requirement (the git URL the README gives) from a git repository of this working tree.
* README's Install lines: ``make dist`` in a checkout, the wheel and the git URL installed elsewhere.

A git URL names a host that a test cannot reach: :func:`local_vcs_url` keeps its tag or commit and the rest of the
line and only points it at a local repository (``git+file://``) made from this working tree.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import fp4patch
from fp4patch.catalog.spec import load_specs

from .conftest import REPO, SPECS_DIR, release_site

DOCKERFILE = REPO / "examples" / "Dockerfile"
# How README and the Dockerfile's header say to build in a checkout: the checkout is the context.
DOCKERFILE_IN_CONTEXT = "examples/Dockerfile"
#: What ``make dist`` writes (``fp4patch/__init__.py``'s version)
WHEEL = f"fp4patch-{fp4patch.__version__}-py3-none-any.whl"
#: The host part of the documented git URL, up to the repository: what :func:`local_vcs_url` replaces
VCS_HOST = re.compile(r"git\+https://[^@\s\"]+")


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


def context_files(root: Path, dockerfile: str = DOCKERFILE_IN_CONTEXT) -> set[str]:
    return {p for p in docker_build_context(root, dockerfile) if (root / p).is_file()}


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without make's variables (:data:`MAKE_VARIABLES`, :data:`MAKE_INHERITED`: the suite
    may run under ``make test TORCH_INDEX_URL=...``) and without PYTHONPATH (nothing from this checkout)."""
    env = {k: v for k, v in os.environ.items() if k not in MAKE_VARIABLES and k not in MAKE_INHERITED and k != "PYTHONPATH"}
    return {**env, "NO_COLOR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``command`` in bash (``-euo pipefail``) in ``cwd``; fails the test with its output when it exits non-zero."""
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", command], capture_output=True, text=True, env=env, cwd=cwd)
    assert done.returncode == 0, f"$ {command}\n(in {cwd}) exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def make_dist(dist: Path) -> Path:
    """The wheel ``make dist`` builds, written to ``dist`` (``DIST=``, so that parallel tests never share the
    checkout's ``dist/``); returns its path."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shell(f"make -C {REPO} dist DIST={dist}", cwd=REPO, env=clean_env())
    (wheel,) = dist.glob("fp4patch-*.whl")
    assert wheel.name == WHEEL
    return wheel


def working_tree_repository(where: Path) -> Path:
    """A git repository at ``where`` holding this working tree as one commit (the files git tracks or would track:
    ``git ls-files --cached --others --exclude-standard``), tagged ``v<version>`` as a release is; what a git URL
    install clones."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for relative in filter(None, listed):
        if (REPO / relative).is_file():
            (where / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / relative, where / relative)
    git = ["git", "-c", "user.name=fp4patch tests", "-c", "user.email=tests@localhost", "-c", "init.defaultBranch=main"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "working tree"], ["tag", f"v{fp4patch.__version__}"]):
        subprocess.run([*git, *command], cwd=where, capture_output=True, check=True)
    return where


def local_vcs_url(line: str, repository: Path) -> str:
    """``line`` (a documented install line or requirement with one ``git+https://HOST/OWNER/REPO@REV`` URL) with
    the URL's host and path pointed at ``repository``; the tag or commit and everything else kept."""
    urls = VCS_HOST.findall(line)
    assert len(urls) == 1, f"one git URL expected in {line!r}"
    # a host, localhost, for the pip a fresh venv has (23.x), whose requirement parser wants one in a git+ URL
    return line.replace(urls[0], f"git+file://localhost{repository}")


# ----------------------------------------------------------------------------------- README
def readme_install_lines() -> list[str]:
    """The commands of the README's Install section (its console block; the ``$ `` lines, comments dropped)."""
    section = (REPO / "README.md").read_text().split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```console\n", 1)[1].split("```", 1)[0]
    return [line[2:].split("  #", 1)[0].strip() for line in block.splitlines() if line.startswith("$ ")]


def test_the_readme_installs_the_wheel_make_dist_builds_or_the_git_repository() -> None:
    """The Install section's lines: ``make dist``, then pip on the wheel it writes (its name from the version) and on
    a git URL pinned to the release's tag; the workflow installs that same URL."""
    make, wheel, vcs = readme_install_lines()
    assert make == "make dist"
    assert wheel == f"pip install dist/{WHEEL}"
    assert vcs.startswith('pip install "fp4patch @ git+https://') and vcs.endswith(f'/fp4patch@v{fp4patch.__version__}"'), vcs
    _, job_env = workflow_steps(WORKFLOW)
    assert f'"{job_env["FP4PATCH"]}"' in vcs, (job_env["FP4PATCH"], vcs)
    assert f"\n$ {wheel} " in (REPO / "docs" / "commands.md").read_text()  # the command list's first line


@pytest.mark.slow
@pytest.mark.recipe
def test_the_readme_install_lines_work_outside_the_checkout(tmp_path: Path, tmp_path_factory) -> None:
    """The three lines as written: ``make dist`` in a copy of the checkout; the wheel copied to a folder elsewhere and
    installed there; the git URL installed from a third folder (pointed at a local repository of this working tree).
    Each fp4patch so installed lists the built-in specs on a real FlashInfer 0.6.0 with nothing of the checkout on
    its path."""
    make, wheel_line, vcs_line = readme_install_lines()
    checkout = working_tree_repository(tmp_path / "checkout")
    env = clean_env()
    shell(make, cwd=checkout, env=env)
    elsewhere = tmp_path / "ci-job"
    (elsewhere / "dist").mkdir(parents=True)
    shutil.copy2(checkout / "dist" / WHEEL, elsewhere / "dist" / WHEEL)
    site = release_site("0.6.0", tmp_path_factory)
    expected = {s.id for s in load_specs(SPECS_DIR)}
    for name, line, cwd in (("wheel", wheel_line, elsewhere), ("git", local_vcs_url(vcs_line, checkout), tmp_path)):
        venv = tmp_path / f"venv-{name}"
        shell(f"python3 -m venv {venv}", cwd=cwd, env=env)
        assert line.startswith("pip install ")
        shell(f"{venv}/bin/{line}", cwd=cwd, env=env)
        done = shell(f"{venv}/bin/fp4patch status --site-packages {site} --json", cwd=cwd, env=env)
        status = json.loads(done.stdout)
        assert status["version"] == "0.6.0" and {s["id"] for s in status["specs"]} == expected, (name, status["specs"])


# -------------------------------------------------------------------------------- Dockerfile
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
    "dist/fp4patch-0.1.0.tar.gz",
    "dist/other_tool-1.0-py3-none-any.whl",
    "fp4patch/__pycache__/cli.cpython-311.pyc",
    "fp4patch/cli/entry.py",
    "patches/flashinfer-python/fp4-quantize-fullgraph.toml",
    "venv/bin/python",
    "benchmarks/results/cli.json",
]


def test_docker_context_of_a_checkout_is_the_wheel_make_dist_built(tmp_path: Path) -> None:
    """From a checkout, ``docker build -f examples/Dockerfile .`` sends the wheel and nothing else of what a checkout
    holds (sources, venvs, caches, other build output)."""
    checkout = tmp_path / "checkout"
    for relative in [*LOCAL_LEFTOVERS, f"dist/{WHEEL}"]:
        (checkout / relative).parent.mkdir(parents=True, exist_ok=True)
        (checkout / relative).write_bytes(b"x")
    for relative in (".dockerignore", DOCKERFILE_IN_CONTEXT):
        (checkout / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / relative, checkout / relative)
    assert context_files(checkout) == {".dockerignore", DOCKERFILE_IN_CONTEXT, f"dist/{WHEEL}"}


def test_docker_context_of_this_checkout_stays_small() -> None:
    sent = context_files(REPO)
    extra = {p for p in sent - {".dockerignore", DOCKERFILE_IN_CONTEXT} if not re.fullmatch(r"dist/fp4patch-[^/]+\.whl", p)}
    assert not extra, sorted(extra)


def dockerfile_stage(path: Path, stage: str) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """``(instruction, arguments)`` of the ``COPY`` and ``RUN`` lines of ``stage`` in order (continuation lines
    joined), and the ARG defaults."""
    text = re.sub(r"\\\n", " ", path.read_text())
    args: dict[str, str] = {}
    steps: list[tuple[str, str]] = []
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
        elif word in ("RUN", "COPY") and current == stage:
            steps.append((word, rest))
    return steps, args


def copy_step(arguments: str, context: Path, image: dict[str, str]) -> None:
    """Docker's ``COPY SRC... DEST/`` from ``context`` (sources relative to it, wildcards as in Go's filepath.Match,
    which Path.glob matches for these) into the image path ``DEST/`` mapped by ``image``; no flags."""
    *sources, dest = arguments.split()
    assert not dest.startswith("--") and dest.endswith("/") and not any(s.startswith("--") for s in sources), arguments
    target = Path(image.get(dest.rstrip("/"), dest))
    target.mkdir(parents=True, exist_ok=True)
    for source in sources:
        matched = sorted(context.glob(source))
        assert matched, f"COPY {source}: no source files in the build context {context}"
        for path in matched:
            shutil.copy2(path, target / path.name)


def test_dockerfile_parses_into_the_steps_users_read() -> None:
    steps, args = dockerfile_stage(DOCKERFILE, "build")
    assert args["FLASHINFER_VERSION"]
    assert ("COPY", "dist/fp4patch-*.whl /tmp/fp4patch/") in steps
    assert any(word == "RUN" and "fp4patch apply --python /opt/venv/bin/python" in r for word, r in steps)
    assert steps[-1][1].startswith("/opt/fp4patch/bin/fp4patch verify --trace")


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.recipe
def test_dockerfile_build_stage_runs(tmp_path: Path) -> None:
    """The Dockerfile in a user's repository (not the checkout) beside ``dist/`` holding the wheel ``make dist``
    built, as its header says; its build stage's COPY and RUN lines run in order."""
    steps, args = dockerfile_stage(DOCKERFILE, "build")
    context = tmp_path / "my-server"
    make_dist(context / "dist")
    shutil.copy2(DOCKERFILE, context / "Dockerfile")
    (context / "serve.py").write_text("# the user's own files\n")
    built = tmp_path / "image-context"  # what `docker build .` sends, as Docker computes it
    for relative in context_files(context, "Dockerfile"):
        (built / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(context / relative, built / relative)
    root = tmp_path / "image"
    image = {"/opt/venv": str(root / "opt/venv"), "/opt/fp4patch": str(root / "opt/fp4patch"), "/tmp/fp4patch": str(root / "tmp/fp4patch")}
    env = clean_env(**args)
    if os.environ.get("TORCH_INDEX_URL"):  # `make test TORCH_INDEX_URL=...`: the CPU build here too, not the CUDA one
        env["PIP_EXTRA_INDEX_URL"] = " ".join(filter(None, [os.environ.get("PIP_EXTRA_INDEX_URL"), os.environ["TORCH_INDEX_URL"]]))
    for word, command in steps:
        if word == "COPY":
            copy_step(command, built, image)
            continue
        for image_path, local in image.items():
            command = command.replace(image_path, local)
        for key, value in args.items():
            command = command.replace("${" + key + "}", value)
        done = shell(command, cwd=tmp_path, env=env)
    # The last step was verify --trace: every trace case passed in the server's venv.
    assert "verify: ok" in done.stdout
    assert "cases passed" in done.stdout


# ---------------------------------------------------------------------------------- workflow
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
    """The steps in a user's repository, fp4patch installed with the job's ``FP4PATCH`` (the README's git URL)."""
    steps, job_env = workflow_steps(WORKFLOW)
    assert [name for name, _ in steps][-1].startswith("Will the patches apply")
    assert any('"$FP4PATCH"' in script for _, script in steps)
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    user_repository = tmp_path / "my-server"  # what actions/checkout checked out: the user's, not fp4patch's
    user_repository.mkdir()
    fp4patch_repository = working_tree_repository(tmp_path / "fp4patch.git")
    env = clean_env(**{**job_env, "FP4PATCH": local_vcs_url(job_env["FP4PATCH"], fp4patch_repository)}, RUNNER_TEMP=str(runner_temp))
    outputs = {}
    for name, script in steps:
        done = subprocess.run(["bash", "-eo", "pipefail", "-c", script], capture_output=True, text=True, env=env, cwd=user_repository)
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
