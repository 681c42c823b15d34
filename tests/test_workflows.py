"""Issue 6: what users see in CI and in a terminal — GitHub annotations, the versioned JSON schema,
colour and --quiet, shell completion, `fp4patch new`, and what the static commands import."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import libcst as cst
import pytest

from fp4patch.codemods import OpState
from fp4patch.catalog.spec import load_spec

from .conftest import REPO, SPECS_DIR, run_cli, snapshot

SCHEMA = json.loads((REPO / "docs" / "json-schema.json").read_text())
CPP_EXT = "flashinfer/jit/cpp_ext.py"
ANSI = re.compile(r"\x1b\[")


def validate(kind: str, payload: dict) -> None:
    jsonschema.validate(payload, {**SCHEMA, "$ref": f"#/$defs/{kind}"})


def sp(site: Path) -> tuple[str, str]:
    return ("--site-packages", str(site))


def test_json_outputs_match_the_documented_schema(site_060: Path) -> None:
    validate("status", json.loads(run_cli("status", *sp(site_060), "--json", check=True).stdout))
    validate("diff", json.loads(run_cli("diff", *sp(site_060), "--json", check=True).stdout))
    verify = run_cli("verify", *sp(site_060), "--format", "json")
    assert verify.returncode == 1
    validate("verify", json.loads(verify.stdout))
    validate("apply", json.loads(run_cli("apply", *sp(site_060), "--json", check=True).stdout))
    validate("verify", json.loads(run_cli("verify", *sp(site_060), "--json", check=True).stdout))
    validate("revert", json.loads(run_cli("revert", *sp(site_060), "--json", check=True).stdout))
    error = run_cli("verify", "--site-packages", str(site_060 / "missing"), "--json")
    assert error.returncode == 2
    validate("error", json.loads(error.stdout))


def test_schema_rejects_what_it_should() -> None:
    with pytest.raises(jsonschema.ValidationError):
        validate("verify", {"schema": 2, "distribution": "x", "version": "1", "site_packages": "/", "ok": True, "specs": []})
    with pytest.raises(jsonschema.ValidationError):
        validate("error", {"schema": 1, "error": "x", "exit_code": 0})


def parse_workflow_command(line: str) -> tuple[str, dict[str, str], str]:
    """``(command, properties, message)`` of a workflow command as the Actions runner reads it (ActionCommand's v2
    parser): the properties end at the first ``::``, split on ``,`` then on the first ``=``, each value unescaped
    (``%0D``, ``%0A``, ``%3A``, ``%2C``, ``%25``), and the message unescaped (``%0D``, ``%0A``, ``%25``)."""
    assert line.startswith("::"), line
    end = line.index("::", 2)
    command, _, given = line[2:end].partition(" ")
    properties = {}
    for pair in filter(None, given.split(",")):
        name, _, value = pair.partition("=")
        properties[name] = value.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")
    message = line[end + 2:].replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")
    return command, properties, message


def test_github_format_points_at_spec_and_upstream_line(site_060: Path) -> None:
    """The file= property was written raw: a site-packages path holding `,` or `:` (a CI workspace named after a
    matrix job) ended the property early, and the runner annotated a file that does not exist."""
    site = site_060.parent / "ci,job:1 %25" / "site-packages"
    site.parent.mkdir()
    site_060.rename(site)
    cpp_ext = site / CPP_EXT
    text = cpp_ext.read_text()
    cpp_ext.write_text(text.replace("subprocess.check_output(", "subprocess.run("))
    done = run_cli("verify", *sp(site), "--spec", "cuda-version-from-torch", "--format", "github")
    assert done.returncode == 1
    errors = [parse_workflow_command(line) for line in done.stdout.splitlines() if line.startswith("::error ")]
    assert len(errors) == 2, done.stdout
    spec_path = SPECS_DIR / "flashinfer-python" / "cuda-version-from-torch.toml"
    spec_line = next(t.line for t in load_spec(spec_path).targets if t.file == CPP_EXT)
    def_line = next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith("def get_cuda_version"))
    assert [(e[1]["file"], e[1]["line"]) for e in errors] == [
        (str(Path("patches/flashinfer-python/cuda-version-from-torch.toml")), str(spec_line)), (str(cpp_ext), str(def_line)),
    ], done.stdout
    for command, properties, message in errors:
        assert command == "error" and set(properties) == {"file", "line", "title"}
        assert properties["title"] == "fp4patch cuda-version-from-torch: drifted"
        assert "subprocess.check_output" in message


def test_github_format_notices_when_applied(site_060: Path) -> None:
    run_cli("apply", *sp(site_060), check=True)
    done = run_cli("verify", *sp(site_060), "--format", "github", check=True)
    lines = done.stdout.splitlines()
    assert lines and all(line.startswith("::notice title=fp4patch ") for line in lines)
    notices = [parse_workflow_command(line) for line in lines]
    assert all(properties["title"] == "fp4patch {}: {}".format(*message.split()) for _, properties, message in notices), done.stdout


def test_unknown_format_is_a_usage_error(site_060: Path) -> None:
    done = run_cli("verify", *sp(site_060), "--format", "xml")
    assert done.returncode == 2
    assert "--format 'xml'" in done.stderr


def test_no_colour_when_not_a_terminal_or_no_color(site_060: Path) -> None:
    env = {"NO_COLOR": "", "FORCE_COLOR": ""}
    piped = subprocess.run([sys.executable, "-m", "fp4patch", "status", *sp(site_060)], capture_output=True, text=True, cwd=REPO, env={k: v for k, v in __import__("os").environ.items() if k not in env})
    assert piped.returncode == 0 and "cuda-version-from-torch" in piped.stdout
    assert not ANSI.search(piped.stdout)
    forced = run_cli("status", *sp(site_060), env={"FORCE_COLOR": "1", "NO_COLOR": ""})
    assert ANSI.search(forced.stdout), "FORCE_COLOR should colour (so the check above can fail)"
    off = run_cli("status", *sp(site_060), env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert not ANSI.search(off.stdout)


def test_quiet_prints_nothing_and_keeps_exit_codes(site_060: Path) -> None:
    failing = run_cli("verify", *sp(site_060), "--quiet")
    assert failing.returncode == 1 and failing.stdout == ""
    applied = run_cli("apply", *sp(site_060), "-q")
    assert applied.returncode == 0 and applied.stdout == ""
    assert run_cli("verify", *sp(site_060), "-q").returncode == 0


def test_shell_completion_is_available() -> None:
    # what the installed completion script runs (--show-completion detects the calling shell, so
    # the shell is named through the environment instead)
    script = run_cli(env={"_FP4PATCH_COMPLETE": "source_bash"})
    assert script.returncode == 0 and "_FP4PATCH_COMPLETE" in script.stdout
    done = run_cli(env={"_FP4PATCH_COMPLETE": "complete_bash", "COMP_WORDS": "fp4patch ver", "COMP_CWORD": "1"})
    assert done.returncode == 0
    assert done.stdout.split() == ["verify"]


def test_new_scaffolds_a_spec_the_suite_accepts(site_060: Path, tmp_path: Path) -> None:
    specs = tmp_path / "patches"
    done = run_cli(
        "new", "fp4-quantize-demo", "--function", "flashinfer.fp4_quantization:fp4_quantize", "--summary", "demo",
        *sp(site_060), "--specs-dir", str(specs),
    )
    assert done.returncode == 0, done.stderr
    path = specs / "flashinfer-python" / "fp4-quantize-demo.toml"
    spec = load_spec(path)
    (target,) = spec.targets
    assert target.file == "flashinfer/fp4_quantization.py" and target.contains("0.6.0") and not target.contains("0.6.1")
    # its own case passes as tests/test_spec_cases.py runs it
    (case,) = spec.cases
    module = cst.parse_module(case.before)
    for op in target.operations:
        assert op.check(module).state is OpState.APPLICABLE
        module = op.apply(module)
    assert module.code == case.after
    # and it plans against the real file: diff shows the placeholder after the docstring
    before = snapshot(site_060)
    diff = run_cli("diff", "--spec", "fp4-quantize-demo", "--specs-dir", str(specs), *sp(site_060), check=True).stdout
    assert "+    # TODO(fp4patch): replace with the statements to insert\n+    pass\n" in diff
    assert snapshot(site_060) == before
    again = run_cli("new", "fp4-quantize-demo", "--function", "flashinfer.fp4_quantization:fp4_quantize", *sp(site_060), "--specs-dir", str(specs))
    assert again.returncode == 2 and "spec exists" in again.stderr
    missing = run_cli("new", "x-y", "--function", "flashinfer.fp4_quantization:no_such", *sp(site_060), "--specs-dir", str(specs))
    assert missing.returncode == 2 and "no function 'no_such'" in missing.stderr


def imported_modules(*args: str) -> set[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "fp4patch", *args], capture_output=True, text=True, cwd=REPO, env={**__import__("os").environ, "NO_COLOR": "1"})
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "fp4patch" in names, done.stderr[-2000:]
    return names


def test_static_commands_import_neither_torch_nor_flashinfer(site_060: Path) -> None:
    for args in (("status",), ("diff",), ("verify",), ("apply",), ("verify",), ("revert",)):
        names = imported_modules(*args, *sp(site_060))
        assert not {"torch", "flashinfer"} & names, args
