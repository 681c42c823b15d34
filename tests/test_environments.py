"""Environments fp4patch meets (issue 11): every place Python may load bytecode from, the target
interpreter's flags and environment, and state left behind by an uninstall or a reinstall.

The honest check for bytecode is a fresh interpreter, started as the runtime would be (the same
``PYTHONPYCACHEPREFIX``, ``-O``/``-OO``), asking the import system's own loader which code object
``import`` would run for a target file, and comparing it with the source on disk (``WHICH_CODE``):
no torch import is needed for that, so every combination is cheap.
"""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fp4patch.catalog.releases import fetch

from .conftest import release_site, run_cli, snapshot
from .test_cli_real_wheel import CPP_EXT, DIST_INFO, FP4, STATE, assert_matches_record, one_line_error, sp

BOTH = ("--spec", "cuda-version-from-torch", "--spec", "fp4-quantize-compiler-disable")
TARGETS = (CPP_EXT, FP4)
MODES = ("TIMESTAMP", "CHECKED_HASH", "UNCHECKED_HASH")
FLAG = {"TIMESTAMP": 0, "CHECKED_HASH": 3, "UNCHECKED_HASH": 1}


@pytest.fixture
def site_060(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private 0.6.0 site-packages of hard links to the shared pristine unpack (fp4patch replaces
    files by rename, and Python only adds new files, so the pristine copy is never written)."""
    target = tmp_path / "site-0.6.0"
    shutil.copytree(release_site("0.6.0", tmp_path_factory), target, symlinks=True, copy_function=os.link)
    return target


# --------------------------------------------------------------------------- bytecode
#: Run in a fresh interpreter: for each file, is the code ``import`` would run for it (the loader's
#: get_code: a valid pyc if there is one, else the source) the source on disk compiled now (every
#: nested code object's bytecode, constants and names)? Prints {file: bool}.
WHICH_CODE = """
import importlib.util, json, sys
def shape(code):
    return (code.co_code, tuple(shape(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts), code.co_names)
result = {}
for path in json.loads(sys.argv[1]):
    spec = importlib.util.spec_from_file_location("probe_module", path)
    loaded = spec.loader.get_code("probe_module")
    fresh = compile(open(path, "rb").read(), path, "exec", dont_inherit=True)
    result[path] = shape(loaded) == shape(fresh)
print(json.dumps(result))
"""


def prefixed_pyc(prefix: Path, source: Path, optimization: int = 0) -> Path:
    """Where an interpreter with ``sys.pycache_prefix = prefix`` keeps the bytecode of ``source``
    (importlib's own rule, computed by this interpreter with the prefix set for the call)."""
    saved = sys.pycache_prefix
    sys.pycache_prefix = str(prefix)
    try:
        return Path(importlib.util.cache_from_source(str(source), optimization="" if optimization == 0 else optimization))
    finally:
        sys.pycache_prefix = saved


def in_tree_pyc(source: Path, optimization: int = 0) -> Path:
    saved = sys.pycache_prefix
    sys.pycache_prefix = None
    try:
        return Path(importlib.util.cache_from_source(str(source), optimization="" if optimization == 0 else optimization))
    finally:
        sys.pycache_prefix = saved


def compile_pyc(source: Path, pyc: Path, mode: str, optimization: int) -> None:
    pyc.parent.mkdir(parents=True, exist_ok=True)
    py_compile.compile(str(source), cfile=str(pyc), optimize=optimization, invalidation_mode=py_compile.PycInvalidationMode[mode], doraise=True)


def runs_disk_code(site: Path, prefix: Path | None, optimization: int) -> dict[str, bool]:
    """{relative target: True when a fresh ``python [-O|-OO]`` (with ``PYTHONPYCACHEPREFIX=prefix``)
    would run the code on disk}."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPYCACHEPREFIX", "PYTHONOPTIMIZE", "PYTHONDONTWRITEBYTECODE")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # look, do not write
    if prefix is not None:
        env["PYTHONPYCACHEPREFIX"] = str(prefix)
    flags = ["-O"] * optimization
    files = [str(site / t) for t in TARGETS]
    done = subprocess.run([sys.executable, *flags, "-c", WHICH_CODE, json.dumps(files)], capture_output=True, text=True, env=env, check=True)
    return {str(Path(p).relative_to(site)): ok for p, ok in json.loads(done.stdout).items()}


def prefix_python(tmp_path: Path, prefix: Path) -> Path:
    """A target interpreter that runs with ``PYTHONPYCACHEPREFIX=prefix`` (as a runtime image may
    set it) while fp4patch itself runs without it: a wrapper script around this interpreter."""
    wrapper = tmp_path / "python-with-prefix"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPYCACHEPREFIX="{prefix}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper


def test_unchecked_hash_pyc_under_the_targets_pycache_prefix_does_not_survive_apply(site_060: Path, tmp_path: Path) -> None:
    """The reported case: the target keeps pycs outside the tree (PYTHONPYCACHEPREFIX) and one of
    fp4_quantization.py is unchecked-hash: after apply the patched code must run, and verify must
    not say ok while the old pyc would."""
    prefix = tmp_path / "pycache"
    python = prefix_python(tmp_path, prefix)
    compile_pyc(site_060 / FP4, prefixed_pyc(prefix, site_060 / FP4), "UNCHECKED_HASH", 0)
    assert runs_disk_code(site_060, prefix, 0) == {CPP_EXT: True, FP4: True}
    assert "PYTHONPYCACHEPREFIX" not in os.environ  # fp4patch itself runs without it: only the target has it
    env = {"PYTHONPATH": str(site_060)}

    done = run_cli("apply", *BOTH, "--python", str(python), env=env)
    assert done.returncode == 0, done.stderr
    assert runs_disk_code(site_060, prefix, 0) == {CPP_EXT: True, FP4: True}, "apply left a stale unchecked-hash pyc under the prefix"
    verify = run_cli("verify", *BOTH, "--python", str(python), env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr

    run_cli("revert", "--python", str(python), env=env, check=True)
    assert runs_disk_code(site_060, prefix, 0) == {CPP_EXT: True, FP4: True}, "revert left a stale pyc under the prefix"


@pytest.mark.parametrize("mode", MODES)
def test_bytecode_in_every_place_and_level_runs_the_disk_code(site_060: Path, tmp_path: Path, mode: str) -> None:
    """pycs of both target files at -O levels 0, 1, 2, in ``__pycache__`` and under the target's
    pycache prefix, in one invalidation mode: after apply and after revert, a fresh interpreter of
    each kind runs the code on disk, and each pyc kept its mode."""
    prefix = tmp_path / "pycache"
    python = prefix_python(tmp_path, prefix)
    pycs = []
    for t in TARGETS:
        for level in (0, 1, 2):
            for pyc in (in_tree_pyc(site_060 / t, level), prefixed_pyc(prefix, site_060 / t, level)):
                compile_pyc(site_060 / t, pyc, mode, level)
                pycs.append(pyc)
    env = {"PYTHONPATH": str(site_060)}
    for command in ("apply", "revert"):
        done = run_cli(command, *(BOTH if command == "apply" else ()), "--python", str(python), env=env)
        assert done.returncode == 0, done.stderr
        for level in (0, 1, 2):
            for where in (None, prefix):
                assert runs_disk_code(site_060, where, level) == dict.fromkeys(TARGETS, True), (command, level, where)
        for pyc in pycs:
            assert pyc.exists(), f"{command} removed {pyc} instead of rewriting it"
            assert int.from_bytes(pyc.read_bytes()[4:8], "little") == FLAG[mode], pyc


@pytest.mark.parametrize("where", ["prefix", "tree"])
def test_verify_fails_while_stale_bytecode_would_run_and_apply_refreshes_it(site_060: Path, tmp_path: Path, where: str) -> None:
    """A stale unchecked-hash pyc put back after apply (a cache restored by a build, another tool):
    verify exits 1 naming it — the recorded answer of apply is not used — and apply makes it current."""
    prefix = tmp_path / "pycache"
    python = prefix_python(tmp_path, prefix)
    level = 2 if where == "tree" else 0
    pyc = in_tree_pyc(site_060 / FP4, level) if where == "tree" else prefixed_pyc(prefix, site_060 / FP4, level)
    old = tmp_path / "old.pyc"
    compile_pyc(site_060 / FP4, old, "UNCHECKED_HASH", level)
    env = {"PYTHONPATH": str(site_060)}
    run_cli("apply", *BOTH, "--python", str(python), env=env, check=True)
    assert run_cli("verify", *BOTH, "--python", str(python), env=env).returncode == 0

    pyc.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(old, pyc)
    assert runs_disk_code(site_060, prefix if where == "prefix" else None, level)[FP4] is False
    for extra in ((), ("--json",), ("--format", "github")):
        verify = run_cli("verify", *BOTH, "--python", str(python), *extra, env=env)
        assert verify.returncode == 1, (extra, verify.stdout, verify.stderr)
        assert f"{pyc}: unchecked-hash bytecode of {site_060 / FP4} compiled from other source" in verify.stderr
        # the advised command acts on the environment verify was given (run as written, it works)
        assert f"run `fp4patch apply --python {python}` (rewrites it) or delete it" in verify.stderr
        if not extra:  # the log's last line gives the reason too, not "see above" about another stream
            last = re.sub(r"\n {4}(?=\S)", " ", verify.stdout).splitlines()[-1]  # a long line wraps at the log width
            assert last.startswith("verify: failed — ") and f"{pyc}: unchecked-hash bytecode" in last, verify.stdout
            assert "see above" not in verify.stdout
        if extra == ("--format", "github"):  # a CI run shows annotations: one must say why it failed
            errors = [ln for ln in verify.stdout.splitlines() if ln.startswith("::error")]
            assert errors and any("unchecked-hash bytecode" in ln for ln in errors), verify.stdout
    assert json.loads(run_cli("verify", *BOTH, "--python", str(python), "--json", env=env).stdout)["ok"] is False

    done = run_cli("apply", *BOTH, "--python", str(python), env=env)
    assert done.returncode == 0, done.stderr
    assert f"{site_060 / FP4}: made its stale bytecode current ({pyc} rewritten)" in done.stderr
    assert runs_disk_code(site_060, prefix if where == "prefix" else None, level)[FP4] is True
    assert run_cli("verify", *BOTH, "--python", str(python), env=env).returncode == 0


# --------------------------------------------------------------------------- leftovers
@pytest.mark.parametrize("stray", ["no-metadata", "metadata-without-version", "other-version"])
def test_a_stray_dist_info_beside_the_real_one_is_named(site_060: Path, stray: str) -> None:
    """An interrupted install/uninstall can leave a second ``.dist-info``; which one describes the
    files cannot be told, so every command refuses, naming each folder and what it says (not "version None")."""
    folder = site_060 / "flashinfer_python-0.5.0.dist-info"
    says = {"no-metadata": "no version (no METADATA file)", "metadata-without-version": "no version (METADATA without a Version field)",
            "other-version": "version 0.5.0"}[stray]
    if stray != "other-version":
        folder.mkdir()
        (folder / "RECORD").write_text("")
        if stray == "metadata-without-version":
            (folder / "METADATA").write_text("Metadata-Version: 2.1\nName: flashinfer-python\n", encoding="utf-8")
    else:
        shutil.copytree(site_060 / DIST_INFO, folder)
        metadata = folder / "METADATA"
        text = metadata.read_text(encoding="utf-8")
        metadata.unlink()  # a new file: never write through the hard link to the pristine copy
        metadata.write_text(text.replace("Version: 0.6.0", "Version: 0.5.0", 1), encoding="utf-8")
    files = snapshot(site_060)
    for command in ("status", "apply", "verify", "revert"):
        done = run_cli(command, *sp(site_060))
        assert done.returncode == 2, (command, done.stderr)
        line = one_line_error(done.stderr)
        assert "flashinfer_python-0.5.0.dist-info" in line and DIST_INFO in line, line
        assert f"flashinfer_python-0.5.0.dist-info: {says}" in line, line
        assert "None" not in line
    assert snapshot(site_060) == files


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One venv for this module's pip tests (made once: venvs are slow); each test installs what it needs."""
    where = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    return where


def pip(venv: Path, *args: str) -> None:
    """This interpreter's pip acting on ``venv`` (``pip --python``), offline, from the release cache."""
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def install(venv: Path, version: str, *extra: str) -> None:
    pip(venv, "install", "-q", "--no-deps", "--no-index", "--no-compile", *extra, str(fetch("flashinfer-python", version)))


def venv_site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def test_pip_uninstall_after_apply_leftovers_are_reported_and_cleaned(venv: Path) -> None:
    python = str(venv / "bin" / "python")
    install(venv, "0.6.0", "--force-reinstall")
    site = venv_site(venv)
    run_cli("apply", "--python", python, check=True)
    pip(venv, "uninstall", "-y", "flashinfer-python")
    state = site / STATE / "flashinfer-python"
    assert (state / "manifest.json").is_file()  # pip leaves fp4patch's directory: not in RECORD

    for command in ("status", "verify", "apply", "revert"):
        done = run_cli(command, "--python", python)
        assert done.returncode == 2, (command, done.stderr)
        line = one_line_error(done.stderr)
        assert "flashinfer-python is not installed" in line
        assert f"fp4patch's record of flashinfer-python 0.6.0 in {state}: flashinfer-python is no longer installed there" in line
        assert f"`fp4patch clean --python {python}` removes it" in line
    done = run_cli("clean", "--python", python, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [(s["path"], s["kind"]) for s in report["removed"]] == [(str(state), "gone")] and report["kept"] == []
    assert not (site / STATE).exists()
    done = run_cli("clean", "--python", python)
    assert done.returncode == 0 and "nothing to clean" in done.stdout


@pytest.mark.parametrize("how", ["upgrade", "another-record"])
def test_state_of_a_reinstalled_distribution_is_reported_and_cleaned(venv: Path, how: str) -> None:
    """After ``pip install`` of another version, or a reinstall of the same version that wrote
    another RECORD (here: with bytecode compiled, which RECORD lists), the record describes files that
    are gone: status says so, revert refuses it, clean removes it and leaves the installed files alone."""
    python = str(venv / "bin" / "python")
    install(venv, "0.6.0", "--force-reinstall")
    site = venv_site(venv)
    run_cli("apply", "--spec", "cuda-version-from-torch", "--python", python, check=True)
    if how == "upgrade":
        install(venv, "0.6.1")
        now = "flashinfer-python 0.6.1 is installed there now (upgraded or reinstalled)"
    else:
        pip(venv, "install", "-q", "--no-deps", "--no-index", "--force-reinstall", str(fetch("flashinfer-python", "0.6.0")))
        now = "flashinfer-python 0.6.0 was reinstalled since (its RECORD differs)"
    state = site / STATE / "flashinfer-python"
    status = run_cli("status", "--python", python, "--json")
    assert status.returncode == 0, status.stderr
    note = json.loads(status.stdout)["stale_record"]
    assert note == (
        f"fp4patch's record of flashinfer-python 0.6.0 in {state}: {now}; "
        f"`fp4patch apply --python {python}` replaces it, `fp4patch clean --python {python}` removes it"
    )
    assert f"stale record: {note}" in " ".join(run_cli("status", "--python", python).stdout.split())
    refused = run_cli("revert", "--python", python)
    assert refused.returncode == 3 and "backups are for flashinfer-python 0.6.0 but" in one_line_error(refused.stderr)

    files = snapshot(site)
    done = run_cli("clean", "--python", python)
    assert done.returncode == 0, done.stderr
    assert f"removed fp4patch's record of flashinfer-python 0.6.0 in {state}: {now}" in " ".join(done.stdout.split())
    assert not (site / STATE).exists()
    assert snapshot(site) == {k: v for k, v in files.items() if not k.startswith(str(STATE))}
    status = run_cli("status", "--python", python, "--json")
    assert json.loads(status.stdout)["stale_record"] is None and json.loads(status.stdout)["recorded"] == []


def test_clean_keeps_the_record_of_the_installed_distribution(site_060: Path) -> None:
    run_cli("apply", *sp(site_060), check=True)
    files = snapshot(site_060)
    state = (site_060 / STATE).rglob("*")
    state = {p: p.read_bytes() for p in state if p.is_file()}
    done = run_cli("clean", *sp(site_060))
    assert done.returncode == 0, done.stderr
    assert "kept fp4patch's record of flashinfer-python 0.6.0" in done.stdout and "`fp4patch revert` removes them" in " ".join(done.stdout.split())
    assert snapshot(site_060) == files and {p: p.read_bytes() for p in state} == state
    run_cli("revert", *sp(site_060), check=True)
    assert_matches_record(site_060)


# --------------------------------------------------------------------------- target flags
#: fp4_quantize's spec and the nvcc one: enough to run every command's path in the target
TWO_SPECS = ("--spec", "cuda-version-from-torch", "--spec", "fp4-quantize-fullgraph")
TORCH_SKIP = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)")
#: How a runtime image may start Python: command-line flags, or the environment variables that set them.
FLAGS = {
    "-O": (["-O"], {}),
    "-OO": (["-OO"], {}),
    "PYTHONOPTIMIZE=2": ([], {"PYTHONOPTIMIZE": "2"}),
    "-I": (["-I"], {}),
    "PYTHONDONTWRITEBYTECODE=1": ([], {"PYTHONDONTWRITEBYTECODE": "1"}),
}


@pytest.fixture(scope="module")
def target_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding a hard-linked copy of flashinfer-python 0.6.0, with torch and FlashInfer's
    import-time dependencies reached through a ``.pth`` file to this interpreter's site-packages
    (a ``.pth`` is read in isolated mode too, unlike ``PYTHONPATH``)."""
    where = tmp_path_factory.mktemp("target") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = venv_site(where)
    shutil.rmtree(site)
    shutil.copytree(release_site("0.6.0", tmp_path_factory), site, symlinks=True, copy_function=os.link)
    own = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "torch").is_dir()) if importlib.util.find_spec("torch") else ""
    (site / "zz-test-deps.pth").write_text(f"{own}\n" if own else "")
    return where


def flagged_python(tmp_path: Path, venv: Path, flag: str) -> tuple[Path, dict[str, str]]:
    """A target interpreter started the way ``flag`` says (a wrapper script), and the environment to run fp4patch in."""
    args, env = FLAGS[flag]
    wrapper = tmp_path / f"python{flag.replace('=', '-')}"
    wrapper.write_text(f'#!/bin/sh\nexec "{venv / "bin" / "python"}" {" ".join(args)} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper, env


@pytest.mark.parametrize("flag", list(FLAGS))
def test_every_static_command_works_with_the_targets_flags(target_venv: Path, tmp_path: Path, flag: str) -> None:
    python, env = flagged_python(tmp_path, target_venv, flag)
    site = venv_site(target_venv)
    pristine = {t: (site / t).read_bytes() for t in TARGETS}
    for command in ("status", "diff", "apply", "verify", "revert"):
        # two specs: how the target is started is what varies here, not how much is patched
        done = run_cli(command, "--python", str(python), *TWO_SPECS, env=env)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr)
        if command == "verify":
            assert "verify: ok" in done.stdout
    assert {t: (site / t).read_bytes() for t in TARGETS} == pristine
    assert not (site / STATE).exists()


#: make test runs the probe under PYTHONOPTIMIZE=2 alone and under -OO -I with PYTHONDONTWRITEBYTECODE
#: together (below); one flag at a time is make test-all (exhaustive)
PROBE_FLAGS = [flag if flag == "PYTHONOPTIMIZE=2" else pytest.param(flag, marks=pytest.mark.exhaustive) for flag in FLAGS]


@TORCH_SKIP
@pytest.mark.parametrize("flag", PROBE_FLAGS)
def test_the_trace_probe_runs_in_a_target_with_flags(
    target_venv: Path, site_060: Path, tmp_path: Path, flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``verify --trace``'s probe, through fp4patch's own runner, in a target started with each
    flag, on a patched copy given as a directory (as ``--against`` and ``--site-packages`` do): the
    target's own FlashInfer is unpatched, so a pass proves the copy was traced — under ``-I`` too,
    which ignores ``PYTHONPATH``. One case each; the whole probe runs in the next test."""
    from fp4patch.target.environment import from_python
    from fp4patch.checks.trace import run_probe

    python, env = flagged_python(tmp_path, target_venv, flag)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    run_cli("apply", *sp(site_060), *TWO_SPECS, check=True)
    cases = run_probe(from_python(str(python)), site_060, case_filter="M=1 K=64 ")
    assert [(c["passed"], c["error"]) for c in cases] == [(True, None)], cases


@TORCH_SKIP
def test_verify_trace_with_optimization_isolation_and_no_bytecode_together(target_venv: Path, tmp_path: Path) -> None:
    wrapper = tmp_path / "python-flags"
    wrapper.write_text(f'#!/bin/sh\nPYTHONDONTWRITEBYTECODE=1 exec "{target_venv / "bin" / "python"}" -OO -I "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    run_cli("apply", "--python", str(wrapper), *TWO_SPECS, check=True)
    try:
        done = run_cli("verify", "--trace", "--json", "--python", str(wrapper), *TWO_SPECS)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr
        report = json.loads(done.stdout)
        assert report["ok"] and report["trace"] and all(c["passed"] for c in report["trace"])
    finally:
        run_cli("revert", "--python", str(wrapper), check=True)  # every applied spec


@TORCH_SKIP
@pytest.mark.parametrize("variable", ["TORCH_COMPILE_DISABLE", "TORCHDYNAMO_DISABLE"])
def test_verify_trace_names_the_variable_that_disables_torch_compile(site_060: Path, variable: str) -> None:
    run_cli("apply", *sp(site_060), check=True)
    done = run_cli("verify", "--trace", *sp(site_060), env={variable: "1"})
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr
    line = one_line_error(done.stderr)
    assert f"{variable}=1 in the environment disables torch.compile (Dynamo)" in line and "sm75" not in line, line
    assert "`fp4patch verify --trace` needs torch.compile" in line


def test_a_recorded_verify_answer_is_not_used_under_another_pycache_prefix(site_060: Path, tmp_path: Path) -> None:
    """apply records verify's answer with the bytecode paths of the target's prefix then; a target
    that later keeps its pycs under another prefix (holding a stale one) must get the full check."""
    first, second = tmp_path / "first", tmp_path / "second"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    python_a, python_b = prefix_python(tmp_path / "a", first), prefix_python(tmp_path / "b", second)
    env = {"PYTHONPATH": str(site_060)}
    old = tmp_path / "old.pyc"
    compile_pyc(site_060 / FP4, old, "UNCHECKED_HASH", 0)
    run_cli("apply", *BOTH, "--python", str(python_a), env=env, check=True)
    assert run_cli("verify", *BOTH, "--python", str(python_a), env=env).returncode == 0
    pyc = prefixed_pyc(second, site_060 / FP4)
    pyc.parent.mkdir(parents=True)
    shutil.copyfile(old, pyc)
    verify = run_cli("verify", *BOTH, "--python", str(python_b), env=env)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert f"{pyc}: unchecked-hash bytecode of {site_060 / FP4} compiled from other source" in verify.stderr


@pytest.fixture(scope="module")
def static_only_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv as `make demo` leaves .demo/target: flashinfer-python 0.6.0 (hard-linked) and nothing else, no torch."""
    where = tmp_path_factory.mktemp("static") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = venv_site(where)
    shutil.rmtree(site)
    shutil.copytree(release_site("0.6.0", tmp_path_factory), site, symlinks=True, copy_function=os.link)
    return where


@pytest.mark.parametrize("command", [("verify", "--trace"), ("scan",)], ids=["verify-trace", "scan"])
def test_trace_and_scan_without_torch_give_the_pip_line_that_makes_them_work(static_only_venv: Path, command: tuple[str, ...]) -> None:
    """The README's demo target has no torch: `verify --trace` and `scan` there end in one line carrying the one
    `pip install` of torch's CPU build and FlashInfer's import-time dependencies into that interpreter."""
    import shlex

    from fp4patch.checks.trace import TORCH_CPU_INDEX, TRACE_REQUIREMENTS

    python = str(static_only_venv / "bin" / "python")
    done = run_cli(*command, "--python", python)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr
    line = one_line_error(done.stderr)
    assert "cannot import torch" in line and f"`fp4patch {command[0]}" in line, line
    pip_line = shlex.split(line.rsplit("`", 2)[-2])
    assert pip_line[:4] == [python, "-m", "pip", "install"] and TORCH_CPU_INDEX in pip_line and pip_line[-len(TRACE_REQUIREMENTS):] == list(TRACE_REQUIREMENTS)


def test_the_pip_line_installs_what_the_suites_trace_tests_install() -> None:
    """fp4patch's advised requirements for a CPU trace are the ones requirements-test.txt gives the suite, whose
    trace tests import the real 0.6.0 and 0.7.4 on CPU with them (besides torch)."""
    from packaging.requirements import Requirement

    from fp4patch.checks.trace import TRACE_REQUIREMENTS

    from .conftest import REPO

    lines = (REPO / "requirements-test.txt").read_text().split("# flashinfer-python's import-time dependencies", 1)[1].splitlines()
    listed = {Requirement(line).name for line in lines[1:] if line.strip() and not line.startswith("#")}
    assert {Requirement(r).name for r in TRACE_REQUIREMENTS} == listed | {"torch"}
    # the README gives the same line for the demo's target
    from fp4patch.checks.trace import install_line

    assert f"$ {install_line('.demo/target/bin/python')}\n" in (REPO / "README.md").read_text()


# --------------------------------------------------------------------------- a FlashInfer that shadows the installed one
@pytest.fixture
def shadowed_venv(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(venv, shadow)``: a venv holding flashinfer-python 0.6.0 (hard links) to which the default specs were
    applied (so a verdict is recorded), and a folder holding a ``flashinfer`` package without metadata (a source
    checkout on the path: the import system takes it, ``importlib.metadata`` still finds the venv's)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv_site(venv)
    shutil.rmtree(site)
    shutil.copytree(release_site("0.6.0", tmp_path_factory), site, symlinks=True, copy_function=os.link)
    run_cli("apply", "--python", str(venv / "bin" / "python"), "-q", check=True)
    shadow = tmp_path / "checkout"
    (shadow / "flashinfer").mkdir(parents=True)
    (shadow / "flashinfer" / "__init__.py").write_text("raise ImportError('the static commands must not import this')\n")
    return venv, shadow


@pytest.mark.parametrize("how", ["PYTHONPATH", "pth"])
def test_a_flashinfer_that_shadows_the_installed_one_is_refused_naming_both(shadowed_venv: tuple[Path, Path], how: str) -> None:
    """`status`/`verify --python` read the venv's site-packages while the interpreter imports another flashinfer
    (on PYTHONPATH; put first by a .pth line): they reported the venv's copy applied, the recorded verdict too. Now
    one line, exit 2, naming the file imported, the site-packages read and what to do."""
    venv, shadow = shadowed_venv
    python, site = str(venv / "bin" / "python"), venv_site(venv)
    assert run_cli("verify", "--python", python).returncode == 0  # unshadowed: applied
    env: dict[str, str] = {}
    if how == "PYTHONPATH":
        env["PYTHONPATH"] = os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")])
        why, todo = f"({shadow} is on PYTHONPATH)", f"remove {shadow} from PYTHONPATH"
    else:
        pth = site / "aa-checkout.pth"
        pth.write_text(f"import sys; sys.path.insert(0, {str(shadow)!r})\n")
        why, todo = f"({pth} adds {shadow} to sys.path)", f"remove that line from {pth}"
    for command in ("status", "verify", "apply", "scan"):
        done = run_cli(command, "--python", python, env=env)
        assert done.returncode == 2, (command, done.stdout[-2000:], done.stderr)
        line = one_line_error(done.stderr)
        assert f"{shadow / 'flashinfer' / '__init__.py'}: {python} imports flashinfer from here {why}" in line, line
        assert f"not from {site.resolve()}, where fp4patch reads and patches flashinfer-python 0.6.0; {todo}" in line, line


def test_a_flashinfer_in_the_current_directory_is_refused(shadowed_venv: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -c`/`-m` put the current directory first: a flashinfer there is what the target imports."""
    from fp4patch.errors import EnvironmentProblem
    from fp4patch.target.environment import find_distribution, from_python

    venv, shadow = shadowed_venv
    python = str(venv / "bin" / "python")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert find_distribution(from_python(python), "flashinfer-python").site_packages == venv_site(venv).resolve()
    monkeypatch.chdir(shadow)
    with pytest.raises(EnvironmentProblem) as refused:
        find_distribution(from_python(python), "flashinfer-python")
    assert f"({shadow} is the current directory, first on sys.path for `python -c` and `python -m`)" in str(refused.value)
    assert str(refused.value).endswith("; run from another directory, so that the installed flashinfer is imported")


@TORCH_SKIP
def test_the_trace_probe_names_the_flashinfer_it_imported(target_venv: Path, tmp_path_factory: pytest.TempPathFactory,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`verify --trace --python` ran its probes with whatever flashinfer the target imported and failed every case
    without saying which: the probe now refuses one imported from elsewhere than the site-packages checked, naming it."""
    from fp4patch.checks.trace import run_probe
    from fp4patch.errors import EnvironmentProblem
    from fp4patch.target.environment import from_python

    other = release_site("0.6.0", tmp_path_factory, bytecode=True)
    site = venv_site(target_venv)
    monkeypatch.setenv("PYTHONPATH", str(other))
    with pytest.raises(EnvironmentProblem) as refused:
        run_probe(from_python(str(target_venv / "bin" / "python")), expect=site, case_filter="M=1 K=64 ")
    assert f"trace probe could not run: flashinfer was imported from {other / 'flashinfer' / '__init__.py'}, not from {site}" in str(refused.value)


# ------------------------------------------------------------------ a root apply under umask 077, another user serving
def _other_user_python() -> tuple[list[str], dict[str, str]] | None:
    """``(argv prefix, env)`` that runs this Python's torch and fp4patch as the user ``nobody`` (uid 65534): this
    interpreter if nobody may run it, else a system interpreter of the same version with this one's import paths
    (a pyenv under /root is not readable by other users); None when there is none, or this is not root."""
    import pwd

    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwuid(65534)
    except KeyError:
        return None
    paths = [p for p in sys.path if p and Path(p).is_dir() and (Path(p, "torch").is_dir() or Path(p, "typer").is_dir())]
    repo = str(Path(__file__).resolve().parent.parent)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join([repo, *paths]), "NO_COLOR": "1", "COLUMNS": "200"}
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, shutil.which(version, path="/usr/local/bin:/usr/bin:/bin")):
        if not candidate:
            continue
        try:
            probe = subprocess.run([candidate, "-c", "import torch, fp4patch, typer"], env=env, user=65534, group=65534,
                                   capture_output=True, check=False)
        except OSError:  # nobody may not run it
            continue
        if probe.returncode == 0:
            return [candidate], env
    return None


@TORCH_SKIP
def test_a_root_apply_under_umask_077_serves_another_user(tmp_path_factory: pytest.TempPathFactory) -> None:
    """An image built as root under `umask 077`, run as another user: after apply the bytecode of every patched file
    went from 644 to 600 (and stayed 600 after revert), `.fp4patch/` and its folders were 700, and the serving
    user's `status`/`verify` ended in a PermissionError traceback. Now what fp4patch writes beside FlashInfer takes
    the modes of what it replaces (bytecode: the source's) and site-packages' (its folders), and that user's
    status, verify, import and compile work; a state they cannot read is one line, exit 3."""
    import tempfile

    other = _other_user_python()
    if other is None:
        pytest.skip("needs root, a `nobody` user and an interpreter nobody may run with this one's torch")
    prefix, env = other
    base = Path(tempfile.mkdtemp(prefix="fp4patch-umask-", dir="/tmp"))  # pytest's tmp_path is private to root
    try:
        base.chmod(0o755)
        site = base / "site-packages"
        shutil.copytree(release_site("0.6.0", tmp_path_factory, bytecode=True), site, symlinks=True, copy_function=os.link)
        home = base / "home"
        home.mkdir(mode=0o777)
        home.chmod(0o777)
        sources = [FP4, CPP_EXT]
        assert all((site / s).stat().st_mode & 0o777 == 0o644 for s in sources)

        def as_root(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "fp4patch", *args, "--site-packages", str(site)], cwd=base,
                                  env={**os.environ, "NO_COLOR": "1"}, preexec_fn=lambda: os.umask(0o077),
                                  capture_output=True, text=True, check=False)

        def as_other(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([*prefix, *args], cwd=base, env={**env, "HOME": str(home)}, user=65534, group=65534,
                                  capture_output=True, text=True, check=False)

        def pyc_modes() -> set[int]:
            return {p.stat().st_mode & 0o777 for s in sources for p in (site / s).parent.glob(f"__pycache__/{Path(s).stem}.*.pyc")}

        assert as_root("apply").returncode == 0
        assert pyc_modes() == {0o644}, pyc_modes()
        state = site / STATE
        assert {p.stat().st_mode & 0o777 for p in [state, *state.rglob("*")] if p.is_dir()} == {0o755}
        assert {p.stat().st_mode & 0o777 for p in state.rglob("*") if p.is_file()} == {0o644}
        for command in (("status",), ("verify",)):
            done = as_other("-m", "fp4patch", *command, "--site-packages", str(site))
            assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
        imported = as_other("-c", f"import sys; sys.path.insert(0, {str(site)!r}); import flashinfer.fp4_quantization as m; "
                                  "print(m._fp4patch_fp4_quantize_available)")
        assert imported.returncode == 0 and imported.stdout.split()[-1] == "True", imported.stderr[-3000:]
        compiled = as_other("-m", "fp4patch", "scan", "--json", "--function", "fp4_quantize", "--site-packages", str(site))
        assert compiled.returncode == 0, compiled.stderr[-3000:]
        scanned = {r["name"]: r["status"] for r in json.loads(compiled.stdout)["functions"]}
        assert scanned["fp4_quantize"] == "compiles", compiled.stdout[-3000:]
        # a state this user cannot read (an older fp4patch's 700 folders): one line, exit 3, the chmod that shares it
        (state / "flashinfer-python").chmod(0o700)
        for command in ("status", "verify"):
            done = as_other("-m", "fp4patch", command, "--site-packages", str(site))
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            assert done.returncode == 3 and len(lines) == 1 and f"chmod -R a+rX {state}" in lines[0], done.stderr[-3000:]
        (state / "flashinfer-python").chmod(0o755)
        assert as_root("revert").returncode == 0
        assert pyc_modes() == {0o644}, pyc_modes()
        assert as_other("-m", "fp4patch", "status", "--site-packages", str(site)).returncode == 0
    finally:
        shutil.rmtree(base, ignore_errors=True)
