"""The command line against the real flashinfer-python 0.6.0 wheel, unpacked per test.

Everything goes through ``python -m fp4patch ... --site-packages DIR`` (``run_cli``). The
pristine state is the wheel's own RECORD (sha256, urlsafe base64 without padding); hashes are
computed, never hard-coded.
"""

from __future__ import annotations

import ast
import base64
import csv
import difflib
import hashlib
import importlib.util
import json
import os
import py_compile
import shutil
import sys
from pathlib import Path

import pytest

from fp4patch.catalog.spec import load_specs

from .conftest import SPECS_DIR, read_only, run_cli, snapshot

CPP_EXT = "flashinfer/jit/cpp_ext.py"
FP4 = "flashinfer/fp4_quantization.py"
DIST_INFO = "flashinfer_python-0.6.0.dist-info"
CUDA_SPEC = "cuda-version-from-torch"
DISABLE_SPEC = "fp4-quantize-compiler-disable"
STATE = Path(".fp4patch")


def sp(site: Path) -> tuple[str, str]:
    return ("--site-packages", str(site))


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def assert_matches_record(site: Path) -> None:
    """Every file is the wheel's (RECORD hash), and there is no other file (no state, no temp files)."""
    rows = list(csv.reader((site / DIST_INFO / "RECORD").read_text(encoding="utf-8").splitlines()))
    expected = {row[0]: row[1] for row in rows}
    files = snapshot(site)
    assert set(files) == set(expected), f"extra: {sorted(set(files) - set(expected))[:5]}, missing: {sorted(set(expected) - set(files))[:5]}"
    wrong = [path for path, digest in expected.items() if digest and record_hash(files[path]) != digest]
    assert not wrong, f"differ from the wheel's RECORD: {wrong}"
    assert not (site / STATE).exists()


def cli_json(*args: str, code: int = 0) -> dict:
    done = run_cli(*args, "--json")
    assert done.returncode == code, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def specs_state(payload: dict) -> dict[str, str]:
    return {s["id"]: s["state"] for s in payload["specs"]}


def one_line_error(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("fp4patch: error: "), stderr
    return lines[0]


def break_anchor(site: Path) -> None:
    """Upstream drift: get_cuda_version no longer calls subprocess.check_output."""
    path = site / CPP_EXT
    text = path.read_text(encoding="utf-8")
    old = 'subprocess.check_output([nvcc, "--version"], text=True)'
    assert text.count(old) == 1
    path.write_text(text.replace(old, 'subprocess.run([nvcc, "--version"], text=True, capture_output=True).stdout'), encoding="utf-8")


def own_spec(spec_id: str, *, versions: str = "==0.6.0", default: bool = True, conflicts: tuple[str, ...] = ()) -> str:
    """A small spec written by the test (independent of the catalog's version ranges)."""
    return f'''id = "{spec_id}"
summary = "test spec {spec_id}"
rationale = "test"
distribution = "flashinfer-python"
default = {str(default).lower()}
conflicts = {json.dumps(list(conflicts))}

[[target]]
versions = "{versions}"
file = "{CPP_EXT}"

  [[target.operation]]
  kind = "insert-at-function-start"
  function = "get_cuda_version"
  anchor-calls = ["subprocess.check_output"]
  code = """
if torch.version.cuda is not None:
    return Version(torch.version.cuda)
"""
'''


def own_specs_dir(tmp_path: Path, **specs: str) -> Path:
    directory = tmp_path / "own-specs" / "flashinfer-python"
    directory.mkdir(parents=True)
    for spec_id, text in specs.items():
        (directory / f"{spec_id}.toml").write_text(text, encoding="utf-8")
    return directory.parent


# --------------------------------------------------------------------------- the user journey
def test_apply_verify_revert_restores_the_wheel_byte_for_byte(site_060: Path) -> None:
    assert_matches_record(site_060)  # the fixture is the wheel as built
    original = snapshot(site_060)
    before = cli_json("verify", *sp(site_060), code=1)
    assert before["ok"] is False and specs_state(before)[CUDA_SPEC] == "applicable"

    applied = cli_json("apply", *sp(site_060))
    assert CUDA_SPEC in applied["specs"] and CPP_EXT in applied["written"]
    changed = {p for p, data in snapshot(site_060).items() if original.get(p) != data and not p.startswith(str(STATE))}
    assert changed == set(applied["written"])
    assert (
        b'if getattr(torch.compiler, "is_dynamo_compiling", bool)() and torch.version.cuda is not None:\n'
        b"        return Version(torch.version.cuda)\n"
    ) in (site_060 / CPP_EXT).read_bytes()
    compile((site_060 / CPP_EXT).read_bytes(), CPP_EXT, "exec")

    verify = run_cli("verify", *sp(site_060))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "verify: ok" in verify.stdout and CUDA_SPEC in verify.stdout

    manifest = json.loads((site_060 / STATE / "flashinfer-python" / "manifest.json").read_text())
    assert manifest["version"] == "0.6.0" and CUDA_SPEC in manifest["specs"]
    assert manifest["files"][CPP_EXT]["patched_sha256"] == hashlib.sha256((site_060 / CPP_EXT).read_bytes()).hexdigest()

    reverted = run_cli("revert", *sp(site_060))
    assert reverted.returncode == 0, reverted.stderr
    assert f"restored {CPP_EXT}" in reverted.stdout
    assert_matches_record(site_060)
    after = cli_json("verify", "--applicable", *sp(site_060))
    assert after["ok"] is True and specs_state(after) == specs_state(before)


def test_apply_twice_writes_nothing(site_060: Path) -> None:
    run_cli("apply", "--spec", CUDA_SPEC, *sp(site_060), check=True)
    files = snapshot(site_060)
    stats = {p: os.stat(site_060 / p) for p in files}
    second = cli_json("apply", "--spec", CUDA_SPEC, *sp(site_060))
    assert second["written"] == []
    assert snapshot(site_060) == files
    for path, st in stats.items():
        now = os.stat(site_060 / path)
        if not path.startswith(str(STATE)):
            assert (now.st_ino, now.st_mtime_ns) == (st.st_ino, st.st_mtime_ns), path
    assert "nothing written" in run_cli("apply", "--spec", CUDA_SPEC, *sp(site_060), check=True).stdout


def test_apply_twice_on_read_only_state_succeeds(site_060: Path) -> None:
    run_cli("apply", "--spec", CUDA_SPEC, *sp(site_060), check=True)
    files = snapshot(site_060)
    with read_only(site_060 / STATE / "flashinfer-python"):
        again = run_cli("apply", "--spec", CUDA_SPEC, *sp(site_060))
    assert snapshot(site_060) == files
    assert again.returncode == 0, again.stderr


def test_diff_writes_nothing_and_shows_what_apply_does(site_060: Path) -> None:
    files = snapshot(site_060)
    done = run_cli("diff", *sp(site_060))
    assert done.returncode == 0, done.stderr
    assert snapshot(site_060) == files
    assert not (site_060 / STATE).exists()
    assert f"--- a/{CPP_EXT}\n+++ b/{CPP_EXT}\n" in done.stdout
    assert '+    if getattr(torch.compiler, "is_dynamo_compiling", bool)() and torch.version.cuda is not None:\n' in done.stdout

    as_json = cli_json("diff", *sp(site_060))
    assert snapshot(site_060) == files
    by_file = {f["file"]: f for f in as_json["files"]}
    assert CUDA_SPEC in by_file[CPP_EXT]["specs"]

    # the diff is exactly what apply then writes
    run_cli("apply", *sp(site_060), check=True)
    for relative, entry in by_file.items():
        old = files[relative].decode().splitlines(keepends=True)
        new = (site_060 / relative).read_text(encoding="utf-8").splitlines(keepends=True)
        assert entry["diff"] == "".join(difflib.unified_diff(old, new, f"a/{relative}", f"b/{relative}"))

    after = run_cli("diff", *sp(site_060))
    assert after.returncode == 0 and after.stdout == ""


def test_status_lists_every_spec_with_its_state(site_060: Path) -> None:
    known = {s.id: s for s in load_specs(SPECS_DIR) if s.distribution == "flashinfer-python"}
    status = cli_json("status", *sp(site_060))
    assert (status["distribution"], status["version"]) == ("flashinfer-python", "0.6.0")
    assert Path(status["site_packages"]) == site_060.resolve()
    assert status["recorded"] == []
    assert set(specs_state(status)) == set(known)
    assert {s["id"]: s["default"] for s in status["specs"]} == {i: s.default for i, s in known.items()}
    assert specs_state(status)[CUDA_SPEC] == "applicable"
    assert specs_state(status)[DISABLE_SPEC] == "applicable"

    run_cli("apply", "--spec", CUDA_SPEC, *sp(site_060), check=True)
    status = cli_json("status", *sp(site_060))
    assert status["recorded"] == [CUDA_SPEC]
    assert specs_state(status)[CUDA_SPEC] == "applied"
    assert specs_state(status)[DISABLE_SPEC] == "applicable"
    text = run_cli("status", *sp(site_060), check=True).stdout
    assert CUDA_SPEC in text and "flashinfer-python 0.6.0" in text


# --------------------------------------------------------------------------- drift and refusals
def test_anchor_removed_verify_fails_and_apply_writes_nothing(site_060: Path) -> None:
    break_anchor(site_060)
    files = snapshot(site_060)

    verify = run_cli("verify", "--spec", CUDA_SPEC, *sp(site_060))
    assert verify.returncode == 1
    assert CUDA_SPEC in verify.stdout and "subprocess.check_output" in verify.stdout and "drifted" in verify.stdout
    report = cli_json("verify", "--spec", CUDA_SPEC, *sp(site_060), code=1)
    (spec,) = report["specs"]
    assert spec["state"] == "drifted"
    assert "call to subprocess.check_output missing from get_cuda_version()" in spec["detail"]
    assert run_cli("verify", "--applicable", "--spec", CUDA_SPEC, *sp(site_060)).returncode == 1

    for args in (("apply", "--spec", CUDA_SPEC), ("apply",)):
        done = run_cli(*args, *sp(site_060))
        assert done.returncode == 1, done.stdout + done.stderr
        line = one_line_error(done.stderr)
        assert CUDA_SPEC in line and "subprocess.check_output" in line and "nothing written" in line
        assert snapshot(site_060) == files
        assert not (site_060 / STATE).exists()


def test_read_only_directory_refuses_and_writes_nothing(site_060: Path) -> None:
    files = snapshot(site_060)
    with read_only(site_060 / "flashinfer" / "jit"):
        done = run_cli("apply", "--spec", CUDA_SPEC, "--spec", DISABLE_SPEC, *sp(site_060))
        assert done.returncode == 3, done.stdout + done.stderr
        assert CPP_EXT.rsplit("/", 1)[1] in one_line_error(done.stderr)
        assert str(site_060 / CPP_EXT) in done.stderr
    assert snapshot(site_060) == files  # the writable fp4_quantization.py was not patched either
    assert not (site_060 / STATE).exists()


def test_unwritable_manifest_leaves_no_patched_file(site_060: Path) -> None:
    run_cli("apply", "--spec", CUDA_SPEC, *sp(site_060), check=True)
    files = snapshot(site_060)
    with read_only(site_060 / STATE / "flashinfer-python"):
        done = run_cli("apply", "--spec", CUDA_SPEC, "--spec", DISABLE_SPEC, *sp(site_060))
    assert done.returncode == 3
    assert snapshot(site_060) == files


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        pytest.param("broken-toml", 'id = "broken-toml"\nsummary = "unterminated  # <-- here\n', "invalid TOML", id="invalid-toml"),
        pytest.param(
            "broken-code",
            own_spec("broken-code").replace("    return Version(torch.version.cuda)\n", "    return Version(torch.version.cuda  # <-- here\n"),
            "code does not parse",
            id="code-does-not-parse",
        ),
    ],
)
@pytest.mark.parametrize("command", ["apply", "verify"])
def test_malformed_spec_stops_before_any_file_is_touched(tmp_path: Path, site_060: Path, name, text, needle, command) -> None:
    specs = tmp_path / "patches"
    shutil.copytree(SPECS_DIR, specs)
    broken = specs / "flashinfer-python" / f"{name}.toml"
    broken.write_text(text, encoding="utf-8")
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "# <-- here" in row)
    files = snapshot(site_060)
    done = run_cli(command, "--specs-dir", str(specs), *sp(site_060))
    assert done.returncode == 2, done.stdout + done.stderr
    assert one_line_error(done.stderr).startswith(f"fp4patch: error: {broken}:{line}: ")
    assert needle in done.stderr
    assert snapshot(site_060) == files
    assert not (site_060 / STATE).exists()


def test_version_outside_every_target_is_not_targeted(tmp_path: Path, site_060: Path) -> None:
    metadata = site_060 / DIST_INFO / "METADATA"
    metadata.write_text(metadata.read_text(encoding="utf-8").replace("\nVersion: 0.6.0\n", "\nVersion: 0.1.0\n", 1), encoding="utf-8")
    specs = own_specs_dir(tmp_path, **{"only-060": own_spec("only-060")})
    files = snapshot(site_060)

    verify = run_cli("verify", "--specs-dir", str(specs), *sp(site_060))
    assert verify.returncode == 1
    assert "not-targeted" in verify.stdout and "flashinfer-python 0.1.0" in verify.stdout
    report = cli_json("verify", "--specs-dir", str(specs), *sp(site_060), code=1)
    assert report["version"] == "0.1.0" and specs_state(report) == {"only-060": "not-targeted"}
    assert run_cli("verify", "--applicable", "--specs-dir", str(specs), *sp(site_060)).returncode == 1
    assert specs_state(cli_json("status", "--specs-dir", str(specs), *sp(site_060))) == {"only-060": "not-targeted"}

    apply = run_cli("apply", "--specs-dir", str(specs), *sp(site_060))
    assert apply.returncode == 1
    assert "only-060" in one_line_error(apply.stderr) and "0.1.0" in apply.stderr
    assert snapshot(site_060) == files


def test_compiler_disable_spec_is_outermost_on_fp4_quantize(site_060: Path) -> None:
    files = snapshot(site_060)
    done = cli_json("apply", "--spec", DISABLE_SPEC, *sp(site_060))
    assert done["specs"] == [DISABLE_SPEC] and done["written"] == [FP4]

    changed = {p for p, data in snapshot(site_060).items() if files.get(p) != data and not p.startswith(str(STATE))}
    assert changed == {FP4}
    tree = ast.parse((site_060 / FP4).read_bytes())
    (function,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "fp4_quantize"]
    decorators = [ast.unparse(d) for d in function.decorator_list]
    assert decorators[0] == "torch.compiler.disable"
    assert decorators[1:] == [ast.unparse(d) for d in _original_decorators(files[FP4])]
    from fp4patch.engine.set_stamp import strip, token_of

    # one line added to FlashInfer's code; after it, the set stamp every patched file carries (fp4patch.engine.set_stamp)
    patched = (site_060 / FP4).read_bytes()
    assert token_of(patched)
    old, new = files[FP4].decode().splitlines(), strip(patched).decode().splitlines()
    assert [line for line in difflib.ndiff(old, new) if line[:1] in "+-"] == ["+ @torch.compiler.disable"]

    assert run_cli("verify", "--spec", DISABLE_SPEC, *sp(site_060)).returncode == 0
    assert run_cli("verify", "--spec", CUDA_SPEC, *sp(site_060)).returncode == 1  # not selected, not applied
    run_cli("revert", *sp(site_060), check=True)
    assert_matches_record(site_060)


def _original_decorators(source: bytes) -> list[ast.expr]:
    tree = ast.parse(source)
    (function,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "fp4_quantize"]
    return function.decorator_list


def test_revert_refuses_a_file_changed_after_apply_and_force_restores(site_060: Path) -> None:
    run_cli("apply", "--spec", CUDA_SPEC, *sp(site_060), check=True)
    target = site_060 / CPP_EXT
    target.write_bytes(target.read_bytes() + b"\n# edited by hand after apply\n")
    files = snapshot(site_060)

    refused = run_cli("revert", *sp(site_060))
    assert refused.returncode == 3
    assert str(target) in one_line_error(refused.stderr)
    assert "--force" in refused.stderr
    assert snapshot(site_060) == files

    as_json = run_cli("revert", "--json", *sp(site_060))
    assert as_json.returncode == 3 and json.loads(as_json.stdout)["exit_code"] == 3

    forced = run_cli("revert", "--force", *sp(site_060))
    assert forced.returncode == 0, forced.stderr
    assert_matches_record(site_060)


def test_apply_keeps_mode_and_rewrites_stale_bytecode(site_060: Path) -> None:
    """An existing pyc is compiled again from the new source (its mode kept: see
    tests/test_reliability.py); other modules' bytecode is left alone."""
    target = site_060 / CPP_EXT
    target.chmod(0o640)
    pyc = Path(importlib.util.cache_from_source(str(target)))
    py_compile.compile(str(target), cfile=str(pyc), doraise=True)
    stale = pyc.read_bytes()
    other_pyc = Path(importlib.util.cache_from_source(str(site_060 / "flashinfer/jit/core.py")))
    py_compile.compile(str(site_060 / "flashinfer/jit/core.py"), cfile=str(other_pyc), doraise=True)
    other = other_pyc.read_bytes()

    run_cli("apply", "--spec", CUDA_SPEC, *sp(site_060), check=True)
    assert target.stat().st_mode & 0o7777 == 0o640
    assert pyc.read_bytes() != stale and _pyc_matches(pyc, target)
    assert other_pyc.read_bytes() == other  # only the patched module's bytecode changes

    run_cli("revert", *sp(site_060), check=True)
    assert target.stat().st_mode & 0o7777 == 0o640
    assert _pyc_matches(pyc, target)


def _pyc_matches(pyc: Path, source: Path) -> bool:
    import marshal

    code = marshal.loads(pyc.read_bytes()[16:])
    return code.co_consts == compile(source.read_bytes(), str(source), "exec", dont_inherit=True).co_consts


# --------------------------------------------------------------------------- machine output and usage errors
def test_json_output_parses_for_every_command(site_060: Path) -> None:
    status = cli_json("status", *sp(site_060))
    assert {"distribution", "version", "site_packages", "recorded", "specs"} <= set(status)
    only = ("--spec", CUDA_SPEC, *sp(site_060))
    diff = cli_json("diff", *only)
    assert diff["files"] and all({"file", "specs", "diff"} <= set(f) for f in diff["files"])
    verify = cli_json("verify", *only, code=1)
    assert verify["ok"] is False
    for spec in verify["specs"]:
        assert {"id", "state", "default", "summary", "detail", "targets"} <= set(spec)
        for target in spec["targets"]:
            assert {"file", "state", "reason", "operations"} <= set(target)
    apply = cli_json("apply", *only)
    assert apply["written"] == [f["file"] for f in diff["files"]]
    assert cli_json("verify", *only)["ok"] is True
    revert = cli_json("revert", *only)
    assert sorted(revert["restored"]) == sorted(apply["written"])
    assert cli_json("revert", *sp(site_060))["restored"] == []
    error = cli_json("status", "--spec", "no-such-spec", *sp(site_060), code=2)
    assert error["exit_code"] == 2 and "no-such-spec" in error["error"]


def test_python_option_finds_the_target_environment(site_060: Path) -> None:
    done = run_cli("status", "--json", "--python", sys.executable, env={"PYTHONPATH": str(site_060)})
    assert done.returncode == 0, done.stderr
    assert Path(json.loads(done.stdout)["site_packages"]) == site_060.resolve()


@pytest.mark.parametrize("command", ["status", "apply"])
def test_python_that_does_not_exist(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "no-venv" / "bin" / "python"
    done = run_cli(command, "--python", str(missing))
    assert done.returncode == 2
    assert str(missing) in one_line_error(done.stderr)


def test_unknown_spec(site_060: Path) -> None:
    files = snapshot(site_060)
    for command in ("apply", "verify", "diff", "status"):
        done = run_cli(command, "--spec", "no-such-spec", *sp(site_060))
        assert done.returncode == 2
        assert "'no-such-spec'" in one_line_error(done.stderr)
    assert snapshot(site_060) == files


def test_missing_distribution_and_both_targets(tmp_path: Path, site_060: Path) -> None:
    empty = tmp_path / "empty-site"
    empty.mkdir()
    done = run_cli("verify", *sp(empty))
    assert done.returncode == 2 and "flashinfer-python is not installed" in one_line_error(done.stderr)
    done = run_cli("verify", *sp(tmp_path / "nowhere"))
    assert done.returncode == 2 and "nowhere" in one_line_error(done.stderr)
    done = run_cli("verify", "--python", sys.executable, *sp(site_060))  # both: that directory, checked with that interpreter
    said = " ".join(done.stdout.split())  # a long line is wrapped at the log width
    assert done.returncode == 1 and f"run `fp4patch apply --site-packages {site_060} --python {sys.executable}`" in said, done.stdout


def test_conflicting_specs(tmp_path: Path, site_060: Path) -> None:
    specs = own_specs_dir(
        tmp_path,
        **{"spec-a": own_spec("spec-a", conflicts=("spec-b",)), "spec-b": own_spec("spec-b", default=False)},
    )
    files = snapshot(site_060)
    done = run_cli("apply", "--specs-dir", str(specs), "--spec", "spec-a", "--spec", "spec-b", *sp(site_060))
    assert done.returncode == 2
    line = one_line_error(done.stderr)
    assert "conflicts" in line and "spec-a" in line and "spec-b" in line
    assert snapshot(site_060) == files

    # one applied, the other asked for later: still refused, nothing written
    run_cli("apply", "--specs-dir", str(specs), "--spec", "spec-b", *sp(site_060), check=True)
    files = snapshot(site_060)
    done = run_cli("apply", "--specs-dir", str(specs), "--spec", "spec-a", *sp(site_060))
    assert done.returncode == 2
    assert "spec-b" in one_line_error(done.stderr)
    assert snapshot(site_060) == files
