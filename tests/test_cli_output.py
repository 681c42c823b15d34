"""Issue 11, the command line: help text, conflicting output options, what `revert --spec` and
`--format github` say, the plain aligned form in logs, docs and behaviour in agreement,
`new` following re-exports, and `verify --against` on an sdist-only release from a fresh venv."""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import pytest
from packaging.version import Version

from fp4patch.cli.render import verify_output
from fp4patch.errors import EnvironmentProblem
from fp4patch.catalog.releases import fetch
from fp4patch.states import APPLICABLE, SATISFIED

from .conftest import REPO, release_site, run_cli, snapshot

CUDA, FULLGRAPH = "cuda-version-from-torch", "fp4-quantize-fullgraph"
#: Characters of rich's box tables (and typer's help panels).
BOX = re.compile("[─│┃━┏┓┗┛┡┩╇╭╮╰╯┼├┤]")


def unwrapped(text: str) -> str:
    """Output with each wrapped line joined again (fp4patch wraps a long line at the log width, its continuation
    lines indented by four spaces: render.wrap)."""
    return re.sub(r"\n {4}(?=\S)", " ", text)


def sp(site: Path) -> tuple[str, str]:
    return ("--site-packages", str(site))


# ---------------------------------------------------------------------------------------- help
@pytest.mark.parametrize("command", [(), ("status",), ("diff",), ("apply",), ("verify",), ("revert",), ("new",)])
def test_help_shows_flags_without_a_value(command: tuple[str, ...]) -> None:
    done = run_cli(*command, "--help", check=True)
    assert "<bool>" not in done.stdout
    flag = re.search(r"--(json|help)\s+(\S+)", done.stdout)
    assert flag and not flag.group(2).startswith("<"), flag


def test_a_flag_takes_no_value() -> None:
    done = run_cli("verify", "--json", "true")
    assert done.returncode == 2 and done.stderr.startswith("fp4patch: error: ") and done.stderr.count("\n") == 1


def test_usage_names_arguments_in_capitals_and_new_names_the_defining_module() -> None:
    text = run_cli("new", "--help", check=True).stdout
    assert "Usage: fp4patch new [OPTIONS] SPEC_ID" in text and "{spec_id}" not in text
    example = " ".join(text.split())  # the help column wraps
    assert "flashinfer.quantization.fp4_quantization:fp4_quantize" in example
    assert "e.g. flashinfer.fp4_quantization:" not in example


def test_revert_help_says_it_reverts_every_applied_spec() -> None:
    text = " ".join(run_cli("revert", "--help", check=True).stdout.replace("│", " ").split())
    assert "default: every applied spec" in text and "specs marked default" not in text
    status = " ".join(run_cli("status", "--help", check=True).stdout.replace("│", " ").split())
    assert "default: every known spec" in status


@pytest.mark.parametrize("command", ["verify", "revert", "scan"])
def test_help_paragraphs_wrap_at_the_terminal_width_only(command: str) -> None:
    """A docstring's own line breaks do not survive into the help screen: on an 80-column terminal a
    paragraph's line ends only where its next word would not fit (typer keeps a docstring's line breaks
    in every paragraph but the first)."""
    text = run_cli(command, "--help", check=True, env={"COLUMNS": "80"}).stdout
    prose = text[text.index("Usage:") : text.index("╭")].splitlines()[1:]
    paragraphs = [p.splitlines() for p in "\n".join(line.strip() for line in prose).strip().split("\n\n")]
    assert len(paragraphs) >= 2, text
    for lines in paragraphs:
        assert all(len(line) + 1 + len(after.split()[0]) > 70 for line, after in itertools.pairwise(lines)), lines


# ----------------------------------------------------------------------------- output options
@pytest.mark.parametrize(
    "args",
    [
        ("verify", "--json", "--format", "github"),
        ("verify", "--format", "table", "--json"),
        ("verify", "-q", "--json"),
        ("verify", "--quiet", "--format", "json"),
        ("verify", "-q", "--format", "github"),
        ("status", "-q", "--json"),
        ("apply", "--json", "-q"),
        ("revert", "--json", "-q"),
        ("diff", "--json", "-q"),
    ],
)
def test_conflicting_output_options_are_a_usage_error(site_060: Path, args: tuple[str, ...]) -> None:
    before = snapshot(site_060)
    done = run_cli(*args, *sp(site_060))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and done.stderr.startswith("fp4patch: error: --") and done.stderr.count("\n") == 1
    assert snapshot(site_060) == before


def test_conflicting_output_options_are_refused_by_the_recorded_verify_too(site_060: Path) -> None:
    run_cli("apply", *sp(site_060), check=True)
    assert run_cli("verify", "--json", *sp(site_060)).returncode == 0
    done = run_cli("verify", "--json", "--format", "github", *sp(site_060))
    assert done.returncode == 2 and done.stdout == ""


def test_github_annotations_say_not_applied_and_what_to_run(site_060: Path) -> None:
    done = run_cli("verify", "--format", "github", *sp(site_060))
    assert done.returncode == 1
    errors = [line for line in done.stdout.splitlines() if line.startswith("::error")]
    assert errors and all("not applied" in line and f"run `fp4patch apply --site-packages {site_060}`" in line for line in errors)
    assert not any("is applicable" in line for line in errors)


def test_a_non_default_spec_not_applied_is_advised_by_name(site_060: Path) -> None:
    """A plain `fp4patch apply` leaves a non-default spec out: the advice names it."""
    disable = "fp4-quantize-compiler-disable"
    done = run_cli("verify", "--spec", disable, "--spec", CUDA, *sp(site_060))
    assert done.returncode == 1
    assert f"run `fp4patch apply --site-packages {site_060} --spec {CUDA} --spec {disable}`" in unwrapped(done.stdout).splitlines()[-1], done.stdout
    github = run_cli("verify", "--spec", disable, "--format", "github", *sp(site_060)).stdout
    errors = [line for line in github.splitlines() if line.startswith("::error")]
    assert errors and all(f"run `fp4patch apply --site-packages {site_060} --spec {disable}`" in line for line in errors), github


def test_the_advised_apply_command_works_as_written(site_060: Path, tmp_path: Path) -> None:
    """The advice names the target and the specs directory verify was given: without them, `fp4patch
    apply` patches another environment (a Dockerfile's `verify --python /opt/venv/bin/python`) or does
    not know a spec of `--specs-dir` ("unknown spec")."""
    import shlex

    mine = tmp_path / "specs" / "flashinfer-python"
    mine.mkdir(parents=True)
    text = (REPO / "patches" / "flashinfer-python" / f"{CUDA}.toml").read_text()
    text = re.sub(r'(?m)^id = .*$', 'id = "my-cuda"', re.sub(r"(?m)^default = .*$", "default = false", text))
    (mine / "my-cuda.toml").write_text(text)
    args = ("--site-packages", str(site_060), "--specs-dir", str(mine.parent), "--spec", "my-cuda")
    done = run_cli("verify", *args)
    assert done.returncode == 1
    advised = re.search(r"run `([^`]+)`", unwrapped(done.stdout).splitlines()[-1])
    assert advised, done.stdout
    github = run_cli("verify", *args, "--format", "github").stdout
    assert all(f"run `{advised[1]}`" in line for line in github.splitlines() if line.startswith("::error")), github
    command = shlex.split(advised[1])
    assert command[:2] == ["fp4patch", "apply"], advised[1]
    run_cli(*command[1:], check=True)
    assert run_cli("verify", *args).returncode == 0


def test_with_one_spec_drifted_the_advised_apply_leaves_it_out_and_works_as_written(site_060: Path) -> None:
    """A plain apply refuses while one spec is drifted: the advice (last line, and every github
    annotation) skips it, so it applies the others when run as printed."""
    import shlex

    cpp = site_060 / "flashinfer" / "jit" / "cpp_ext.py"
    cpp.write_text(cpp.read_text().replace("subprocess.check_output(", "subprocess.run("))  # cuda-version-from-torch's anchor gone
    done = run_cli("verify", *sp(site_060))
    advised = re.search(r"run `([^`]+)`", unwrapped(done.stdout).splitlines()[-1])
    assert done.returncode == 1 and advised and f"--skip {CUDA}" in advised[1], done.stdout
    github = run_cli("verify", "--format", "github", *sp(site_060)).stdout
    assert all(f"--skip {CUDA}" in line for line in github.splitlines() if line.startswith("::error") and "not applied" in line), github
    run_cli(*shlex.split(advised[1])[1:], check=True)
    assert run_cli("verify", *sp(site_060), "--skip", CUDA).returncode == 0


def test_a_hand_edit_that_undoes_a_patch_advises_the_revert_that_apply_needs_first(site_060: Path) -> None:
    """An edit of a patched file that removes its redirect leaves the spec applicable, but apply refuses a file
    changed since fp4patch patched it: verify's line advises `revert --force` first, and the two commands, run
    as printed, give a verified site (a new-user trial followed verify's `apply` into that refusal)."""
    import shlex

    run_cli("apply", *sp(site_060), check=True)
    gemm = site_060 / "flashinfer" / "gemm" / "gemm_base.py"
    text = gemm.read_text()
    assert "if _fp4patch_mm_fp4_compiler._is_compiling_flag and" in text
    gemm.write_text(text.replace("if _fp4patch_mm_fp4_compiler._is_compiling_flag and", "if False and _fp4patch_mm_fp4_compiler._is_compiling_flag and"))
    done = run_cli("verify", *sp(site_060))
    last = unwrapped(done.stdout).splitlines()[-1]
    assert done.returncode == 1 and "flashinfer/gemm/gemm_base.py: changed since fp4patch patched it" in last, done.stdout
    # one state, one instruction: `revert --force`, then `apply` (never also a bare "run `fp4patch apply`", which exits 3)
    commands = re.findall(r"`(fp4patch [^`]+)`", last)
    assert [shlex.split(c)[1] for c in commands] == ["revert", "apply"] and "--force" in commands[0], last
    assert all(f"--site-packages {site_060}" in c for c in commands), last
    assert last.count("run `") == 1, last
    github = run_cli("verify", "--format", "github", *sp(site_060)).stdout
    errors = [line for line in github.splitlines() if line.startswith("::error")]
    assert "revert" in errors[0] and not any("run `fp4patch apply" in line for line in errors), github
    refused = run_cli("apply", *sp(site_060))  # what the advice used to be: refused, and its line says the same two steps
    assert refused.returncode == 3 and re.findall(r"`fp4patch (\w+)", refused.stderr) == ["revert", "apply"], refused.stderr
    for command in commands:  # followed as printed
        run_cli(*shlex.split(command)[1:], check=True)
    assert run_cli("verify", *sp(site_060)).returncode == 0


def test_a_conflict_advises_a_revert_that_works_as_written(site_060: Path, tmp_path: Path) -> None:
    """Every command an engine message advises repeats the target and specs options (Engine.command):
    here the revert a conflicting apply asks for, with a copied --specs-dir."""
    import shlex

    specs = tmp_path / "specs"
    shutil.copytree(REPO / "patches", specs)
    args = ("--site-packages", str(site_060), "--specs-dir", str(specs))
    run_cli("apply", *args, check=True)
    refused = run_cli("apply", *args, "--spec", "fp4-quantize-compiler-disable")
    assert refused.returncode == 2, refused.stderr
    advised = re.search(r"run `([^`]+)` first", refused.stderr)
    assert advised and shlex.split(advised[1])[:2] == ["fp4patch", "revert"], refused.stderr
    assert f"--site-packages {site_060}" in advised[1] and f"--specs-dir {specs}" in advised[1], advised[1]
    run_cli(*shlex.split(advised[1])[1:], check=True)
    run_cli("apply", *args, "--spec", "fp4-quantize-compiler-disable", check=True)


# --------------------------------------------------------------------------- apply / status
def test_apply_and_status_list_declared_specs_apart_from_applied_ones(site_060: Path) -> None:
    """A default spec declared not-needed on 0.6.0 is recorded by apply (revert knows it) but is not
    called applied: the summary lines name it with the state verify gives it."""
    done = unwrapped(run_cli("apply", *sp(site_060), check=True).stdout)
    specs = {s["id"]: s["state"] for s in json.loads(run_cli("status", "--json", *sp(site_060), check=True).stdout)["specs"]}
    idle = sorted(i for i, state in specs.items() if state == "not-needed")
    assert idle
    again = unwrapped(run_cli("apply", *sp(site_060), check=True).stdout)
    status = unwrapped(run_cli("status", *sp(site_060), check=True).stdout)
    for text, lead in ((done, r"applied "), (again, r"already applied \("), (status, r"recorded as applied by fp4patch: ")):
        found = re.search(lead + r"(.+?)\)?; not needed on this release: (.+?)(;|$)", text, re.MULTILINE)
        assert found, text
        assert {i for i in found[1].split(", ")} == {i for i, state in specs.items() if state == "applied"}, text
        assert found[2].split(", ") == [f"{i} (not-needed)" for i in idle], text


def test_apply_of_only_declared_specs_does_not_say_already_applied(site_060: Path) -> None:
    """flashinfer-fp4-quantize-op-keywords is not needed on 0.6.0: applying it alone patches nothing
    and was never applied, so the summary does not call it (or anything) 'already applied'."""
    keywords = "flashinfer-fp4-quantize-op-keywords"
    done = run_cli("apply", "--spec", keywords, *sp(site_060), check=True).stdout
    assert "already applied" not in done, done
    assert done.strip() == f"flashinfer-python 0.6.0: nothing to apply; not needed on this release: {keywords} (not-needed); nothing written"


def test_status_after_a_reinstall_does_not_call_unpatched_specs_applied(site_060: Path, tmp_path_factory) -> None:
    """`pip install --force-reinstall` puts the original files back and leaves fp4patch's record: the
    record's specs that are applicable again are named apart from the applied ones."""
    run_cli("apply", *sp(site_060), check=True)
    pristine = release_site("0.6.0", tmp_path_factory)
    moved = "flashinfer/jit/cpp_ext.py"  # cuda-version-from-torch only
    (site_060 / moved).unlink()
    (site_060 / moved).write_bytes((pristine / moved).read_bytes())
    states = {s["id"]: s["state"] for s in json.loads(run_cli("status", "--json", *sp(site_060), check=True).stdout)["specs"]}
    assert states[CUDA] == APPLICABLE and states[FULLGRAPH] == "applied"
    line = next(x for x in unwrapped(run_cli("status", *sp(site_060), check=True).stdout).splitlines() if x.startswith("recorded as applied"))
    applied = line.split(": ", 1)[1].split(";")[0].split(", ")
    assert FULLGRAPH in applied and CUDA not in applied, line
    assert f"{CUDA} (applicable)" in line, line


# -------------------------------------------------------------------------------------- revert
def test_partial_revert_says_what_stays_applied(site_060: Path) -> None:
    run_cli("apply", *sp(site_060), check=True)
    specs = json.loads(run_cli("status", "--json", *sp(site_060), check=True).stdout)["specs"]
    still = sorted(s["id"] for s in specs if s["state"] == "applied" and s["id"] != CUDA)
    assert FULLGRAPH in still
    done = run_cli("revert", "--spec", CUDA, *sp(site_060), check=True)
    assert "byte for byte" not in done.stdout
    text = unwrapped(done.stdout)
    listed = re.search(rf"reverted {CUDA}; still applied: (.+) \(`fp4patch revert --site-packages {re.escape(str(site_060))}` reverts those too\)", text)
    assert listed and sorted(listed[1].split(", ")) == still, done.stdout
    payload = json.loads(run_cli("revert", "--json", *sp(site_060), check=True).stdout)
    assert payload["still_applied"] == []
    run_cli("apply", *sp(site_060), check=True)
    partial = json.loads(run_cli("revert", "--json", "--spec", FULLGRAPH, *sp(site_060), check=True).stdout)
    assert FULLGRAPH not in partial["still_applied"] and CUDA in partial["still_applied"]
    assert "byte for byte" in run_cli("revert", *sp(site_060), check=True).stdout


def test_revert_of_a_recorded_spec_that_changed_no_file_says_so(site_060: Path) -> None:
    # apply records every default spec, also one not needed on 0.6.0 (upstream's op is right there)
    run_cli("apply", *sp(site_060), check=True)
    specs = json.loads(run_cli("status", "--json", *sp(site_060), check=True).stdout)["specs"]
    idle = next(s["id"] for s in specs if s["state"] == "not-needed" and s["default"])
    done = run_cli("revert", "--spec", idle, *sp(site_060), check=True)
    assert "no fp4patch manifest" not in done.stdout, done.stdout
    assert re.search(rf"reverted {idle} \(it changed no file\); still applied: .*{FULLGRAPH}", unwrapped(done.stdout)), done.stdout


def test_revert_of_a_spec_not_applied_names_applied_and_idle_records_apart(site_060: Path) -> None:
    run_cli("apply", *sp(site_060), check=True)
    specs = {s["id"]: s["state"] for s in json.loads(run_cli("status", "--json", *sp(site_060), check=True).stdout)["specs"]}
    run_cli("revert", "--spec", FULLGRAPH, *sp(site_060), check=True)
    done = run_cli("revert", "--spec", FULLGRAPH, *sp(site_060))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    # counted apart, not listed (a CI log line of every spec id was 800 characters): `fp4patch status` lists them
    found = re.search(r"\((\d+) specs applied; (\d+) recorded that changed no file\); `fp4patch status` lists them", done.stderr)
    assert found, done.stderr
    assert int(found[1]) == len({i for i, state in specs.items() if state == "applied"} - {FULLGRAPH})
    assert int(found[2]) == len({i for i, state in specs.items() if state == "not-needed"})


def test_revert_spec_with_nothing_applied_is_a_usage_error_as_the_docs_say(site_060: Path) -> None:
    page = (REPO / "docs" / "states-and-exit-codes.md").read_text()  # "Bad input, by class"
    usage_row = next(line for line in page.splitlines() if line.startswith("| usage | 2 |"))
    assert "`revert --spec` of a spec not applied" in usage_row
    before = snapshot(site_060)
    done = run_cli("revert", "--spec", CUDA, *sp(site_060))
    assert done.returncode == 2 and done.stderr.startswith(f"fp4patch: error: spec '{CUDA}' is not applied here")
    assert snapshot(site_060) == before
    assert run_cli("revert", *sp(site_060)).returncode == 0  # nothing to revert is not an error


# ---------------------------------------------------------------------------- logs: plain lines
def test_status_and_against_in_a_log_are_aligned_lines(site_060: Path) -> None:
    status = run_cli("status", *sp(site_060), check=True).stdout
    assert not BOX.search(status), status
    rows = [line for line in status.splitlines() if re.match(r"  \S", line)]  # a row's wrapped summary continues under it
    # one row per spec the catalog lists here, the state column aligned
    listed = json.loads(run_cli("status", "--json", *sp(site_060), check=True).stdout)["specs"]
    assert len(rows) == len(listed) and len({line.index(" applicable ") for line in rows if " applicable " in line}) == 1, rows
    against = run_cli("verify", "--wheel", str(fetch("flashinfer-python", "0.6.0")), check=True).stdout
    assert not BOX.search(against), against
    assert "on the pristine release:\n" in against and re.search(rf"\n  {CUDA} +applied ", against), against


def test_trace_cases_in_a_log_are_aligned_lines(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # a log this wide: no row wraps (another test of the worker may have set it)
    header = {"schema": 1, "distribution": "flashinfer-python", "version": "0.6.0", "site_packages": "/s"}
    reports = [{"id": CUDA, "state": "applied", "detail": "", "targets": [{"file": "flashinfer/jit/cpp_ext.py"}]}]
    cases = [
        {"name": "m1-k64", "passed": True, "graphs": 1, "graph_breaks": 0, "custom_ops": ["fp4patch::fp4_quantize"], "layout_ok": True},
        {"name": "m127-k7168-dynamic", "passed": False, "graphs": 2, "error": "Unsupported: Attempted to call function marked as skipped\nmore"},
    ]
    verify_output(header, reports, False, SATISFIED, "table", cases=cases)
    text = capsys.readouterr().out
    assert not BOX.search(text) and "\x1b[" not in text
    assert "fullgraph trace: 1/2 cases passed" in text
    rows = [line for line in text.splitlines() if line.startswith("  m")]
    assert len(rows) == 2 and rows[0].index("PASS") == rows[1].index("FAIL")
    assert rows[1].endswith("Unsupported: Attempted to call function marked as skipped more")


# ------------------------------------------------------------------------------- docs agreement
def test_docs_list_the_states_verify_against_accepts() -> None:
    page = " ".join((REPO / "docs" / "commands.md").read_text().split())  # "Before an upgrade: `verify --against`"
    sentence = page[page.index("Each selected spec must be") : page.index("on the pristine release")]
    assert set(re.findall(r"`([a-z-]+)`", sentence)) == set(SATISFIED) | {APPLICABLE}


# ------------------------------------------------------------------------------------------ new
@pytest.mark.parametrize(
    ("version", "given", "defining"),
    [
        ("0.7.4", "flashinfer", "flashinfer.quantization.fp4_quantization"),
        ("0.7.4", "flashinfer.fp4_quantization", "flashinfer.quantization.fp4_quantization"),  # the re-export shim
        ("0.6.0", "flashinfer", "flashinfer.fp4_quantization"),
        ("0.6.0", "flashinfer.quantization.fp4_quantization", "flashinfer.fp4_quantization"),  # the README's path, moved at 0.6.7
    ],
)
def test_new_names_the_module_that_defines_a_reexported_function(tmp_path_factory, tmp_path: Path, version, given, defining) -> None:
    site = release_site(version, tmp_path_factory, sources_only=True)
    args = ("--site-packages", str(site), "--specs-dir", str(tmp_path))
    done = run_cli("new", "my-fix", "--function", f"{given}:fp4_quantize", *args)
    assert done.returncode == 2
    assert done.stderr.rstrip().endswith(f"pass --function {defining}:fp4_quantize"), done.stderr
    run_cli("new", "my-fix", "--function", f"{defining}:fp4_quantize", *args, check=True)
    assert (tmp_path / "flashinfer-python" / "my-fix.toml").is_file()


@pytest.mark.parametrize("given", ["--site-packages", "--python"])
def test_new_on_a_patched_file_advises_the_revert_for_the_same_environment(site_060: Path, tmp_path: Path, given: str) -> None:
    """`new` on a file fp4patch patched advised a bare `fp4patch revert`, which acts on fp4patch's own environment:
    the advice (and the `next:` line after) repeat the --python / --site-packages given, and work as written."""
    import shlex

    env = {"PYTHONPATH": os.pathsep.join([str(site_060), os.environ.get("PYTHONPATH", "")])} if given == "--python" else None
    where = (given, str(site_060) if given == "--site-packages" else sys.executable)
    run_cli("apply", *where, "--spec", "cuda-version-from-torch", env=env, check=True)
    args = ("new", "my-fix", "--function", "flashinfer.jit.cpp_ext:get_cuda_version", *where, "--specs-dir", str(tmp_path / "my specs"))
    done = run_cli(*args, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    advised = shlex.join(["fp4patch", "revert", *where])
    assert f"run `{advised}` first so the case shows the upstream function" in done.stderr, done.stderr
    run_cli(*shlex.split(advised)[1:], env=env, check=True)
    written = run_cli(*args, env=env, check=True).stdout
    next_step = shlex.join(["fp4patch", "diff", *where, "--specs-dir", str(tmp_path / "my specs"), "--spec", "my-fix"])
    assert f"then `{next_step}`" in written, written


# ---------------------------------------------------------------------------- sdist, pip errors
def _fresh_venv(where: Path) -> Path:
    """A venv as `python -m venv` makes it (its own pip and bundled setuptools, older than what
    flashinfer-python 0.4.x's pyproject needs), seeing fp4patch and its dependencies through a
    .pth file placed after its own site-packages."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, capture_output=True)
    python = where / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True)
    (Path(purelib.stdout.strip()) / "zz_fp4patch_dev.pth").write_text(f"{REPO}\n{sysconfig.get_paths()['purelib']}\n")
    return python


@pytest.mark.slow
@pytest.mark.recipe  # a fresh venv and an sdist build (~25 s): make test-recipes, which CI runs after make test
def test_against_an_sdist_only_release_from_a_fresh_venv(tmp_path: Path) -> None:
    python = _fresh_venv(tmp_path / "venv")
    env = {**os.environ, "NO_COLOR": "1", "FP4PATCH_CACHE": str(tmp_path / "cache")}
    own = [Version(p.name.removesuffix(".dist-info").split("-")[1]) for p in (tmp_path / "venv").glob("lib/*/site-packages/setuptools-*.dist-info")]
    assert all(v < Version("77") for v in own), own  # 0.4.1's pyproject.toml needs setuptools>=77 (license = "Apache-2.0")
    command = [str(python), "-m", "fp4patch", "verify", "--against", "flashinfer-python==0.4.1", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
    # fp4-quantize-fullgraph is declared unsupported before 0.5.0: a default spec, so it is left out
    # (listed with its reason) and the others apply, as `apply` would do after the upgrade
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["kind"] == "sdist" and payload["version"] == "0.4.1"
    states = {r["id"]: r["state"] for r in payload["after_apply"]}
    assert states[CUDA] == "applied" and states[FULLGRAPH] == "unsupported" and not payload["drifted"]
    # --strict: every default spec applied, or fail
    strict = subprocess.run([*command, "--strict"], capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
    assert strict.returncode == 1, strict.stderr
    assert any(line.startswith(f"{FULLGRAPH}: unsupported") for line in json.loads(strict.stdout)["drifted"])


def test_a_missing_release_reports_pip_s_reason(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem) as caught:
        fetch("flashinfer-python", "0.0.0.dev999", cache=tmp_path)
    assert "No matching distribution found for flashinfer-python==0.0.0.dev999" in str(caught.value)
    assert "See above" not in str(caught.value) and "\n" not in str(caught.value)


def test_a_failing_sdist_build_reports_the_backend_s_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An sdist pip cannot make sense of (no PKG-INFO naming the release, a setup.py that raises):
    the error carries the build's own last line, not pip's "See above for details"."""
    links = tmp_path / "links"
    links.mkdir()
    with tarfile.open(links / "fp4patch_broken_demo-1.0.tar.gz", "w:gz") as tar:
        data = b"raise RuntimeError('fp4patch-test: this sdist cannot be built')\n"
        info = tarfile.TarInfo("fp4patch_broken_demo-1.0/setup.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    with pytest.raises(EnvironmentProblem) as caught:
        fetch("fp4patch-broken-demo", "1.0", cache=tmp_path / "cache")
    message = str(caught.value)
    assert "RuntimeError: fp4patch-test: this sdist cannot be built" in message and "See above" not in message, message


def test_diff_stat_counts_the_lines_of_the_whole_diff(site_060: Path) -> None:
    whole = run_cli("diff", *sp(site_060), check=True).stdout
    stat = [line for line in run_cli("diff", "--stat", *sp(site_060), check=True).stdout.splitlines() if not line.startswith("    ")]
    files = re.findall(r"(?m)^\+\+\+ b/(\S+)", whole)
    assert [line.split()[0] for line in stat[:-1]] == files
    added = sum(1 for line in whole.splitlines() if line.startswith("+") and not line.startswith("+++"))
    assert stat[-1].startswith(f"{len(files)} file(s), +{added} -0 lines") and "without --stat" in stat[-1]


def test_no_log_line_runs_past_the_log_width_and_nothing_is_cut(tmp_path_factory: pytest.TempPathFactory, linked_site) -> None:
    """A new-user trial found log lines of 900-1,400 characters (apply's summary, status's record line, revert's
    "still applied", a not-applied revert's error). In a log (stdout not a terminal, no COLUMNS) every line of
    status, diff --stat, apply, verify and revert fits the 160 columns rich's console takes for a log, wrapped,
    not cut: every spec id is still there; the one-line errors stay one line, short."""
    site = linked_site("0.7.4")
    env = {"COLUMNS": ""}  # what a CI job has
    ids = [s["id"] for s in json.loads(run_cli("status", "--json", *sp(site), check=True).stdout)["specs"]]
    outputs = {}
    for command in (("status",), ("diff", "--stat"), ("apply",), ("apply",), ("status",), ("verify",), ("revert", "--spec", FULLGRAPH)):
        done = run_cli(*command, *sp(site), env=env)
        assert done.returncode == 0, done.stderr
        long = [line for line in done.stdout.splitlines() if len(line) > 160]
        assert not long, f"{' '.join(command)}: {len(long[0])} characters: {long[0]}"
        outputs[" ".join(command)] = done.stdout
    assert all(i in outputs["status"] for i in ids)  # wrapped, nothing cut
    recorded = re.search(r"recorded as applied by fp4patch: (.+?)(;|$)", unwrapped(outputs["status"]), re.MULTILINE)
    assert recorded and FULLGRAPH in recorded[1].split(", ")
    refused = run_cli("revert", "--spec", FULLGRAPH, *sp(site), env=env)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and len(refused.stderr) < 250, refused.stderr
