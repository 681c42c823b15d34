"""A catalog of bad input — spec, environment, file system — against the real 0.6.0 wheel.

Every case runs the command line (``python -m fp4patch``) and checks the whole contract of a
refusal: stderr is exactly one non-empty line ``fp4patch: error: ...`` that names the file or
thing at fault (and, where there is one, what to do), the exit code is the one docs/states-and-exit-codes.md gives
for that class (1 check failed, 2 usage/environment, 3 file system), and the site-packages is
byte for byte what it was before (``snapshot``; the state directory included).

The "Bad input, by class" table of docs/states-and-exit-codes.md lists each kind once; keep the two in step.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from .conftest import SPECS_DIR, applied_site, read_only, run_cli, snapshot
from .test_cli_real_wheel import own_spec

CPP_EXT = "flashinfer/jit/cpp_ext.py"
FP4 = "flashinfer/fp4_quantization.py"
DIST_INFO = "flashinfer_python-0.6.0.dist-info"
CUDA, FULLGRAPH, DISABLE = "cuda-version-from-torch", "fp4-quantize-fullgraph", "fp4-quantize-compiler-disable"
STATE = Path(".fp4patch") / "flashinfer-python"


def sp(site: Path) -> tuple[str, str]:
    return ("--site-packages", str(site))


def refused(done, code: int, *needles: str) -> str:
    """The one-line contract: exit ``code``, one non-empty stderr line naming every needle."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == code, f"exit {done.returncode}, expected {code}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert len(lines) == 1, f"expected one line on stderr:\n{done.stderr}"
    assert lines[0].startswith("fp4patch: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in: {lines[0]}"
    return lines[0]


def unchanged(site: Path, before: dict[str, bytes]) -> None:
    after = snapshot(site)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    assert not changed, f"files changed: {changed[:10]}"


# =========================================================================== spec (exit 2)
def _spec_dir(tmp_path: Path, name: str, text: str | bytes, with_real: bool = True) -> tuple[Path, Path]:
    """A specs dir: the real specs (optionally) plus ``name``.toml with ``text``."""
    specs = tmp_path / "patches"
    if with_real:
        shutil.copytree(SPECS_DIR, specs)
    directory = specs / "flashinfer-python"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return specs, path


GOOD = own_spec("bad-spec")
CODE_BLOCK = '''  code = """
if torch.version.cuda is not None:
    return Version(torch.version.cuda)
"""
'''
assert CODE_BLOCK in GOOD
DECORATOR_SPEC = GOOD.replace(
    '''  kind = "insert-at-function-start"
  function = "get_cuda_version"
  anchor-calls = ["subprocess.check_output"]
''' + CODE_BLOCK,
    '''  kind = "add-decorator"
  function = "get_cuda_version"
  decorator = "torch.compiler.disable("
''',
)

SPEC_CASES = [
    # (id, file name, text, needles)
    ("malformed-toml", "bad-spec.toml", GOOD + "oops = \n", ["invalid TOML"]),
    ("unknown-key", "bad-spec.toml", 'colour = "blue"\n' + GOOD, ["unknown key 'colour'", "allowed:"]),
    ("missing-id", "bad-spec.toml", GOOD.replace('id = "bad-spec"\n', ""), ["missing required key 'id'"]),
    ("id-not-kebab-case", "Bad_Spec.toml", GOOD.replace('id = "bad-spec"', 'id = "Bad_Spec"'), ["'Bad_Spec'", "kebab-case"]),
    ("id-differs-from-file-name", "bad-spec.toml", GOOD.replace('id = "bad-spec"', 'id = "other-name"'), ["'other-name'", "file name"]),
    ("bad-version-specifier", "bad-spec.toml", GOOD.replace('versions = "==0.6.0"', 'versions = "~=banana"'), ["invalid PEP 440 specifier", "banana"]),
    ("unknown-operation-kind", "bad-spec.toml", GOOD.replace('"insert-at-function-start"', '"insert-everywhere"'), ["unknown operation kind 'insert-everywhere'", "known:"]),
    ("operation-missing-function", "bad-spec.toml", GOOD.replace('  function = "get_cuda_version"\n', ""), ["missing required key 'function'"]),
    ("code-does-not-parse", "bad-spec.toml", GOOD.replace("return Version(torch.version.cuda)\n", "return Version(torch.version.cuda\n"), ["code does not parse"]),
    ("code-file-missing", "bad-spec.toml", GOOD.replace(CODE_BLOCK, '  code-file = "nowhere/early_return.py"\n'), ["cannot read code-file 'nowhere/early_return.py'"]),
    ("code-and-code-file", "bad-spec.toml", GOOD.replace(CODE_BLOCK, CODE_BLOCK + '  code-file = "x.py"\n'), ["exactly one of 'code' and 'code-file'"]),
    ("conflicts-unknown-spec", "bad-spec.toml", own_spec("bad-spec", conflicts=("no-such-spec",)), ["conflicts names unknown spec 'no-such-spec'"]),
    ("requires-unknown-spec", "bad-spec.toml", GOOD.replace("conflicts = []", 'conflicts = []\nrequires = ["no-such-spec"]'), ["requires names unknown spec 'no-such-spec'"]),
    ("target-file-outside-site-packages", "bad-spec.toml", GOOD.replace(f'file = "{CPP_EXT}"', 'file = "../../etc/evil.py"'), ["'../../etc/evil.py'", "inside site-packages"]),
    ("decorator-not-an-expression", "bad-spec.toml", DECORATOR_SPEC, ["'torch.compiler.disable('", "not a Python expression"]),
    ("default-not-a-boolean", "bad-spec.toml", GOOD.replace("default = true", 'default = "yes"'), ["'default' must be true or false"]),
    ("no-target", "bad-spec.toml", GOOD[: GOOD.index("[[target]]")], ["at least one [[target]]"]),
    ("spec-not-utf8", "bad-spec.toml", GOOD.encode() + b"# \xff\xfe\n", ["cannot read spec"]),
]


@pytest.mark.parametrize(("name", "text", "needles"), [pytest.param(n, t, k, id=i) for i, n, t, k in SPEC_CASES])
def test_malformed_spec(tmp_path: Path, site_060: Path, name: str, text, needles: list[str]) -> None:
    specs, path = _spec_dir(tmp_path, name, text)
    before = snapshot(site_060)
    done = run_cli("apply", "--specs-dir", str(specs), *sp(site_060))
    line = refused(done, 2, *needles)
    assert line.startswith(f"fp4patch: error: {path}:") or "code-file" in line, line  # path:line: message
    unchanged(site_060, before)


def test_duplicate_spec_ids(tmp_path: Path, site_060: Path) -> None:
    specs, _ = _spec_dir(tmp_path, "twin.toml", own_spec("twin"))
    second = specs / "other-distribution" / "twin.toml"
    second.parent.mkdir()
    second.write_text(own_spec("twin"), encoding="utf-8")
    before = snapshot(site_060)
    refused(run_cli("apply", "--specs-dir", str(specs), *sp(site_060)), 2, "duplicate spec id 'twin'", "twin.toml")
    unchanged(site_060, before)


def test_empty_specs_dir(tmp_path: Path, site_060: Path) -> None:
    empty = tmp_path / "empty-specs"
    empty.mkdir()
    before = snapshot(site_060)
    refused(run_cli("apply", "--specs-dir", str(empty), *sp(site_060)), 2, str(empty))
    unchanged(site_060, before)


def test_specs_dir_missing(tmp_path: Path, site_060: Path) -> None:
    missing = tmp_path / "no-such-dir"
    before = snapshot(site_060)
    refused(run_cli("apply", "--specs-dir", str(missing), *sp(site_060)), 2, str(missing), "--specs-dir")
    unchanged(site_060, before)


# =========================================================================== environment and usage (exit 2)
def _script(tmp_path: Path, name: str, body: str, executable: bool = True) -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    path.chmod(0o755 if executable else 0o644)
    return path


@pytest.mark.parametrize(
    ("kind", "needles"),
    [
        pytest.param("missing", ["cannot run this interpreter", "--python"], id="python-does-not-exist"),
        pytest.param("not-executable", ["cannot run this interpreter", "--python"], id="python-not-executable"),
        pytest.param("exits-1", ["interpreter failed", "--python"], id="python-exits-1"),
        pytest.param(
            "prints-garbage",
            ["--python"],
            id="python-prints-garbage",
        ),
    ],
)
def test_broken_python(tmp_path: Path, site_060: Path, kind: str, needles: list[str]) -> None:
    python = {
        "missing": lambda: tmp_path / "no-venv" / "bin" / "python",
        "not-executable": lambda: _script(tmp_path, "python", "#!/bin/sh\nexit 0\n", executable=False),
        "exits-1": lambda: _script(tmp_path, "python", "#!/bin/sh\necho 'broken interpreter' >&2\nexit 1\n"),
        "prints-garbage": lambda: _script(tmp_path, "python", "#!/bin/sh\necho 'Python 3.11.7'\n"),
    }[kind]()
    before = snapshot(site_060)
    refused(run_cli("apply", "--python", str(python)), 2, str(python), *needles)
    unchanged(site_060, before)


def test_python_and_site_packages_together_check_that_directory_with_that_interpreter(site_060: Path, tmp_path: Path) -> None:
    """Not a usage error since issue 24: ``--site-packages`` names the files, ``--python`` the interpreter that runs
    what needs torch. An ``--python`` that is not an interpreter is still refused, nothing written."""
    before = snapshot(site_060)
    done = run_cli("status", "--python", sys.executable, *sp(site_060))
    assert done.returncode == 0 and str(site_060.resolve()) in done.stdout, done.stderr
    refused(run_cli("apply", "--python", str(tmp_path / "no-python"), *sp(site_060)), 2, "no-python")
    unchanged(site_060, before)


@pytest.mark.parametrize("kind", ["missing", "a-file"], ids=["site-packages-missing", "site-packages-is-a-file"])
def test_site_packages_not_a_directory(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "site-packages"
    if kind == "a-file":
        path.write_text("not a directory\n")
    refused(run_cli("apply", *sp(path)), 2, str(path), "--site-packages", "a file, not a" if kind == "a-file" else "not found")
    assert (path.is_file() and path.read_text() == "not a directory\n") or not path.exists()


def test_distribution_not_installed(tmp_path: Path) -> None:
    empty = tmp_path / "empty-site"
    (empty / "other_pkg-1.0.dist-info").mkdir(parents=True)
    (empty / "other_pkg-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: other-pkg\nVersion: 1.0\n")
    before = snapshot(empty)
    refused(run_cli("apply", *sp(empty)), 2, "flashinfer-python is not installed", "pip install --no-deps flashinfer-python")
    unchanged(empty, before)


def test_metadata_version_invalid(site_060: Path) -> None:
    metadata = site_060 / DIST_INFO / "METADATA"
    metadata.write_text(metadata.read_text(encoding="utf-8").replace("\nVersion: 0.6.0\n", "\nVersion: six-point-oh\n", 1), encoding="utf-8")
    before = snapshot(site_060)
    refused(run_cli("apply", *sp(site_060)), 2, "flashinfer-python", "'six-point-oh'", "PEP 440")
    unchanged(site_060, before)


def test_unknown_spec(site_060: Path) -> None:
    before = snapshot(site_060)
    refused(run_cli("apply", "--spec", "no-such-spec", *sp(site_060)), 2, "'no-such-spec'", "fp4patch status")
    unchanged(site_060, before)


def test_a_misspelt_spec_gets_a_suggestion(site_060: Path) -> None:
    for option in ("--spec", "--skip"):
        refused(run_cli("apply", option, "fp4-quantise-fullgraph", *sp(site_060)), 2, "'fp4-quantise-fullgraph'", "did you mean 'fp4-quantize-fullgraph'?")


def test_python_naming_a_directory_says_so(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\n")
    for given, advice in ((venv, f"pass --python {venv}/bin/python"), (venv / "bin", "pass --python PATH to a Python executable")):
        refused(run_cli("status", "--python", str(given)), 2, f"{given}: is a directory, not an interpreter", advice)
        refused(run_cli("verify", "--python", str(given)), 2, "is a directory")


def test_conflicting_specs_selected_together(site_060: Path) -> None:
    before = snapshot(site_060)
    refused(run_cli("apply", "--spec", FULLGRAPH, "--spec", DISABLE, *sp(site_060)), 2, FULLGRAPH, DISABLE, "--spec")
    unchanged(site_060, before)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(DISABLE, FULLGRAPH, id="declaring-spec-asked-second"),
        pytest.param(
            FULLGRAPH,
            DISABLE,
            id="declaring-spec-applied-first",
        ),
    ],
)
def test_spec_conflicting_with_one_already_applied(site_060: Path, first: str, second: str) -> None:
    run_cli("apply", "--spec", first, *sp(site_060), check=True)
    before = snapshot(site_060)
    refused(run_cli("apply", "--spec", second, *sp(site_060)), 2, FULLGRAPH, DISABLE, "revert")
    unchanged(site_060, before)


def test_revert_of_a_spec_that_is_not_applied(site_060: Path) -> None:
    run_cli("apply", "--spec", CUDA, *sp(site_060), check=True)
    before = snapshot(site_060)
    refused(run_cli("revert", "--spec", DISABLE, *sp(site_060)), 2, f"'{DISABLE}'", "not applied", CUDA)
    unchanged(site_060, before)


def test_unknown_option(site_060: Path) -> None:
    before = snapshot(site_060)
    refused(run_cli("apply", "--frobnicate", "--spec", CUDA, *sp(site_060)), 2, "--frobnicate", "--help")
    unchanged(site_060, before)


@pytest.mark.parametrize("output", [(), ("--json",), ("--format", "github")], ids=["text", "json", "github"])
@pytest.mark.parametrize("content", ["empty", "junk", "truncated"])
def test_verify_wheel_of_a_file_that_is_not_a_wheel_is_one_line(tmp_path: Path, content: str, output: tuple[str, ...]) -> None:
    """`verify --wheel` of an empty, junk or truncated file ended in zipfile's traceback (`BadZipFile: File is not a
    zip file`, exit 1) in every output format: one line naming the file and what gets a good copy now, exit 2 as for
    a damaged --sdist, nothing written (no download, no temporary directory left)."""
    from .conftest import DIST, fetch

    wheel = tmp_path / "flashinfer_python-0.6.0-py3-none-any.whl"
    wheel.write_bytes({"empty": b"", "junk": b"not a zip archive\n" * 64, "truncated": fetch(DIST, "0.6.0").read_bytes()[:200_000]}[content])
    given = wheel.read_bytes()
    scratch, cache = tmp_path / "tmp", tmp_path / "cache"
    scratch.mkdir()
    done = run_cli("verify", "--wheel", str(wheel), *output, env={"TMPDIR": str(scratch), "FP4PATCH_CACHE": str(cache)})
    line = refused(done, 2, f"{wheel}: cannot unpack: not a wheel (zip) file", "download it again")
    assert "Traceback" not in done.stdout + done.stderr
    if output == ("--json",):
        assert json.loads(done.stdout) == {"schema": 1, "error": line.removeprefix("fp4patch: error: "), "exit_code": 2}
    assert wheel.read_bytes() == given and not list(scratch.iterdir()) and not cache.exists()


# =========================================================================== the installed files (exit 1)
def test_version_not_targeted(tmp_path: Path, site_060: Path) -> None:
    metadata = site_060 / DIST_INFO / "METADATA"
    metadata.write_text(metadata.read_text(encoding="utf-8").replace("\nVersion: 0.6.0\n", "\nVersion: 0.1.0\n", 1), encoding="utf-8")
    specs, _ = _spec_dir(tmp_path, "only-060.toml", own_spec("only-060"), with_real=False)
    before = snapshot(site_060)
    refused(run_cli("apply", "--specs-dir", str(specs), *sp(site_060)), 1, "only-060", "0.1.0", "fp4patch verify")
    unchanged(site_060, before)


def test_drifted_anchor(site_060: Path) -> None:
    path = site_060 / CPP_EXT
    old = 'subprocess.check_output([nvcc, "--version"], text=True)'
    path.write_text(path.read_text(encoding="utf-8").replace(old, 'subprocess.run([nvcc, "--version"], text=True, capture_output=True).stdout'), encoding="utf-8")
    before = snapshot(site_060)
    refused(run_cli("apply", "--spec", CUDA, *sp(site_060)), 1, CUDA, "subprocess.check_output", "nothing written")
    unchanged(site_060, before)


@pytest.mark.parametrize("kind", ["missing", "directory"], ids=["target-file-missing", "directory-instead-of-target-file"])
def test_target_file_not_there(site_060: Path, kind: str) -> None:
    path = site_060 / CPP_EXT
    path.unlink()
    if kind == "directory":
        path.mkdir()
        (path / "keep.txt").write_text("a directory where the module should be\n")
    before = snapshot(site_060)
    refused(run_cli("apply", "--spec", CUDA, *sp(site_060)), 1, CPP_EXT, CUDA, "nothing written")
    unchanged(site_060, before)
    assert path.is_dir() == (kind == "directory")


@pytest.mark.parametrize(
    ("garbage", "needle"),
    [
        pytest.param(b"\ndef broken(:\n", "not valid Python", id="target-not-valid-python"),
        pytest.param(b"\n# caf\xe9 in latin-1\n", "not valid Python", id="target-not-utf8"),
        pytest.param(b"\x00\x00\x00", "not valid Python", id="target-has-nul-bytes"),
    ],
)
def test_target_file_unparsable(site_060: Path, garbage: bytes, needle: str) -> None:
    path = site_060 / CPP_EXT
    path.write_bytes(path.read_bytes() + garbage)
    before = snapshot(site_060)
    refused(run_cli("apply", "--spec", CUDA, *sp(site_060)), 1, str(path), needle, "reinstall")
    unchanged(site_060, before)


# =========================================================================== the file system (exit 3)
def test_read_only_directory_of_a_target_file(site_060: Path) -> None:
    before = snapshot(site_060)
    with read_only(site_060 / "flashinfer" / "jit"):
        refused(run_cli("apply", "--spec", CUDA, *sp(site_060)), 3, str(site_060 / CPP_EXT), "writable")
    unchanged(site_060, before)


def test_read_only_site_packages_for_the_first_apply(site_060: Path) -> None:
    before = snapshot(site_060)
    with read_only(site_060):
        refused(run_cli("apply", "--spec", CUDA, *sp(site_060)), 3, str(site_060), "writable")
    unchanged(site_060, before)
    assert not (site_060 / ".fp4patch").exists()


def test_read_only_state_directory(site_060: Path) -> None:
    run_cli("apply", "--spec", CUDA, *sp(site_060), check=True)
    before = snapshot(site_060)
    with read_only(site_060 / STATE):
        refused(run_cli("apply", "--spec", CUDA, "--spec", FULLGRAPH, *sp(site_060)), 3, str(site_060 / STATE), "writable")
    unchanged(site_060, before)


def test_state_path_is_a_file(site_060: Path) -> None:
    (site_060 / ".fp4patch").write_text("not a directory\n")
    before = snapshot(site_060)
    refused(run_cli("apply", "--spec", CUDA, *sp(site_060)), 3, str(site_060 / ".fp4patch"))
    unchanged(site_060, before)


@pytest.mark.parametrize("content", ["{not json", "[]", '{"schema": 1}', ""], ids=["manifest-not-json", "manifest-a-list", "manifest-missing-keys", "manifest-empty"])
@pytest.mark.parametrize("command", ["status", "apply", "revert"])
def test_manifest_corrupted(site_060: Path, content: str, command: str) -> None:
    run_cli("apply", "--spec", CUDA, *sp(site_060), check=True)
    manifest = site_060 / STATE / "manifest.json"
    manifest.write_text(content, encoding="utf-8")
    before = snapshot(site_060)
    refused(run_cli(command, "--spec", CUDA, *sp(site_060)), 3, str(manifest), "unreadable manifest", "reinstall")
    unchanged(site_060, before)


@pytest.mark.parametrize("kind", ["missing", "altered"], ids=["backup-missing", "backup-altered"])
def test_backup_damaged_on_revert(site_060: Path, kind: str) -> None:
    run_cli("apply", "--spec", CUDA, *sp(site_060), check=True)
    backup = site_060 / STATE / "backups" / CPP_EXT
    if kind == "missing":
        backup.unlink()
    else:
        backup.write_bytes(backup.read_bytes() + b"\n# altered\n")
    before = snapshot(site_060)
    refused(run_cli("revert", *sp(site_060)), 3, str(backup), f"backup {kind}", "reinstall")
    unchanged(site_060, before)


@pytest.mark.parametrize("kind", ["edited", "deleted"], ids=["file-changed-after-apply", "file-deleted-after-apply"])
def test_patched_file_changed_before_revert(site_060: Path, kind: str) -> None:
    run_cli("apply", "--spec", CUDA, *sp(site_060), check=True)
    target = site_060 / CPP_EXT
    if kind == "edited":
        target.write_bytes(target.read_bytes() + b"\n# edited by hand after apply\n")
    else:
        target.unlink()
    before = snapshot(site_060)
    refused(run_cli("revert", *sp(site_060)), 3, str(target), "changed since apply", "--force")
    unchanged(site_060, before)


def test_partial_revert_of_a_file_changed_after_apply(site_060: Path) -> None:
    run_cli("apply", "--spec", FULLGRAPH, *sp(site_060), check=True)
    target = site_060 / FP4
    target.write_bytes(target.read_bytes() + b"\n# edited by hand after apply\n")
    before = snapshot(site_060)
    # a spec of another file: every file of the patched set gets the new set's stamp (fp4patch.engine.set_stamp), the
    # edited one too, so the apply is refused, naming it, and writes nothing
    refused(run_cli("apply", "--spec", CUDA, *sp(site_060)), 3, str(target), "--force")
    unchanged(site_060, before)
    refused(run_cli("revert", "--spec", FULLGRAPH, *sp(site_060)), 3, str(target), "--force")
    unchanged(site_060, before)


def test_backups_of_another_version(site_060: Path) -> None:
    run_cli("apply", "--spec", CUDA, *sp(site_060), check=True)
    manifest = site_060 / STATE / "manifest.json"
    data = json.loads(manifest.read_text(encoding="utf-8"))
    data["version"] = "0.5.3"
    manifest.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    before = snapshot(site_060)
    refused(run_cli("revert", *sp(site_060)), 3, str(manifest), "0.5.3", "0.6.0", "--force")
    unchanged(site_060, before)


def test_symlinked_target_file_is_refused(tmp_path: Path, site_060: Path) -> None:
    """Decided behaviour: refuse (exit 3), never write through the link nor replace it."""
    target = site_060 / CPP_EXT
    real = tmp_path / "elsewhere" / "cpp_ext.py"
    real.parent.mkdir()
    shutil.move(target, real)
    os.symlink(real, target)
    before, real_bytes = snapshot(site_060), real.read_bytes()
    refused(run_cli("apply", "--spec", CUDA, *sp(site_060)), 3, str(target), "symbolic link")
    unchanged(site_060, before)
    assert target.is_symlink() and real.read_bytes() == real_bytes


def status_and_verify_refuse(site: Path, reason: str) -> None:
    """``status`` prints apply's refusal (``apply refuses: REASON``) and ``verify``, with and without
    ``--applicable``, fails (exit 1) with it."""
    text = run_cli("status", *sp(site), check=True).stdout
    assert "apply refuses: " + reason in " ".join(text.split()), text
    for args in (("--applicable",), ()):
        verify = run_cli("verify", *args, "--spec", CUDA, *sp(site))
        assert verify.returncode == 1, verify.stdout + verify.stderr
        assert "verify: failed — " + reason in " ".join(verify.stdout.split()), verify.stdout


def test_status_and_verify_say_that_apply_refuses_a_symlinked_target(tmp_path: Path, site_060: Path) -> None:
    """`status` said `applicable` and `verify --applicable` passed while `apply` refused the linked file (exit 3):
    both now give apply's own line, and `verify --applicable` fails (the spec cannot be applied as the files are)."""
    target = site_060 / CPP_EXT
    real = tmp_path / "elsewhere" / "cpp_ext.py"
    real.parent.mkdir()
    shutil.move(target, real)
    os.symlink(real, target)
    before = snapshot(site_060)
    line = refused(run_cli("apply", "--spec", CUDA, *sp(site_060)), 3, str(target), "symbolic link")
    reason = line.removeprefix("fp4patch: error: ")
    status = json.loads(run_cli("status", "--json", *sp(site_060), check=True).stdout)
    assert status["apply_refused"] == reason, status["apply_refused"]
    assert {r["id"]: r["state"] for r in status["specs"]}[CUDA] == "applicable"
    status_and_verify_refuse(site_060, reason)
    unchanged(site_060, before)
    # a regular file again: nothing to refuse
    target.unlink()
    shutil.copyfile(real, target)
    assert json.loads(run_cli("status", "--json", *sp(site_060), check=True).stdout)["apply_refused"] is None
    assert run_cli("verify", "--applicable", "--spec", CUDA, *sp(site_060)).returncode == 0


def test_a_symlinked_package_folder_is_refused_like_a_symlinked_file(tmp_path: Path, site_060: Path) -> None:
    """site-packages/flashinfer -> a shared copy elsewhere: a link anywhere between site-packages and a target file is
    refused as a linked file is (the same line, exit 3), and the shared copy is never written; verify --json gives it as
    apply_refused, as status --json does. A site-packages reached through a link (a venv's lib64 -> lib) is not."""
    import jsonschema

    from .conftest import REPO

    folder = site_060 / "flashinfer"
    real = tmp_path / "elsewhere" / "cache" / "flashinfer"
    real.parent.mkdir(parents=True)
    shutil.move(folder, real)
    os.symlink(real, folder)
    before, shared = snapshot(site_060), snapshot(real)
    line = refused(run_cli("apply", *sp(site_060)), 3, f"{folder}: is a symbolic link to {real}", "--link-mode=copy")
    reason = line.removeprefix("fp4patch: error: ")
    unchanged(real, shared)
    status = json.loads(run_cli("status", "--json", *sp(site_060), check=True).stdout)
    assert status["apply_refused"] == reason, status["apply_refused"]
    status_and_verify_refuse(site_060, reason)
    verify = run_cli("verify", "--applicable", "--json", *sp(site_060))
    assert verify.returncode == 1, verify.stdout + verify.stderr
    payload = json.loads(verify.stdout)
    assert (payload["apply_refused"], payload["interrupted"], payload["ok"]) == (reason, None, False), payload
    schema = json.loads((REPO / "docs" / "json-schema.json").read_text())
    jsonschema.validate(payload, {**schema, "$ref": "#/$defs/verify"})
    unchanged(site_060, before)
    unchanged(real, shared)
    # the folder back in place, the site-packages reached through a link: nothing to refuse below it
    folder.unlink()
    shutil.move(real, folder)
    lib64 = tmp_path / "lib64"
    os.symlink(site_060, lib64)
    assert json.loads(run_cli("status", "--json", *sp(lib64), check=True).stdout)["apply_refused"] is None
    assert json.loads(run_cli("verify", "--applicable", "--json", "--spec", CUDA, *sp(lib64)).stdout)["apply_refused"] is None
    run_cli("apply", "--spec", CUDA, *sp(lib64), check=True)  # hard links (site_060's files) are written by rename


def test_uv_symlink_layout_names_every_link_and_the_reinstall(tmp_path: Path, site_060: Path) -> None:
    """`uv pip install --link-mode=symlink` links every file into uv's cache: the refusal names all the
    linked target files at once (not one per run) and the reinstall that gives regular files."""
    cache = tmp_path / "uv-cache"
    linked = [CPP_EXT, FP4, "flashinfer/gemm/gemm_base.py", "flashinfer/fused_moe/core.py"]
    for relative in linked:
        target, real = site_060 / relative, cache / relative
        real.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(target, real)
        os.symlink(real, target)
    before = snapshot(site_060)
    message = refused(run_cli("apply", *sp(site_060)), 3, *(str(site_060 / r) for r in linked), "--link-mode=copy")
    assert "flashinfer-python==0.6.0" in message
    unchanged(site_060, before)
    # given --python, the advice names that environment: a bare `uv pip install` outside a venv finds none
    import subprocess
    import sys

    bare = tmp_path / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(bare)], check=True)
    (next((bare / "lib").glob("python3*")) / "site-packages" / "flashinfer-site.pth").write_text(str(site_060) + "\n")
    python = str(bare / "bin" / "python")
    message = refused(run_cli("apply", "--python", python), 3, "--link-mode=copy")
    assert f"uv pip install --python {python} --reinstall --no-deps --link-mode=copy flashinfer-python==0.6.0" in message, message
    assert f"{python} -m pip install --force-reinstall --no-deps flashinfer-python==0.6.0" in message, message
    unchanged(site_060, before)


# =========================================================================== install kinds and concurrency
def test_target_file_differs_from_record(site_060: Path) -> None:
    """Edited by hand, anchors intact: refused unless --allow-modified."""
    target = site_060 / CPP_EXT
    target.write_bytes(target.read_bytes() + b"\n# a local hotfix\n")
    before = snapshot(site_060)
    refused(run_cli("apply", "--spec", CUDA, *sp(site_060)), 3, str(target), "RECORD", "--allow-modified")
    unchanged(site_060, before)


def test_editable_install(site_060: Path) -> None:
    direct_url = {"url": "file:///src/flashinfer", "dir_info": {"editable": True}}
    (site_060 / DIST_INFO / "direct_url.json").write_text(json.dumps(direct_url), encoding="utf-8")
    before = snapshot(site_060)
    refused(run_cli("apply", "--spec", CUDA, *sp(site_060)), 2, "flashinfer-python is an editable install", "file:///src/flashinfer", "pip install --no-deps flashinfer-python==0.6.0")
    unchanged(site_060, before)


def _add_to_record(site: Path, *entries: str) -> None:
    record = site / DIST_INFO / "RECORD"
    record.write_text(record.read_text(encoding="utf-8") + "".join(f"{e},,\n" for e in entries), encoding="utf-8")


@pytest.mark.parametrize("kind", ["pep660-finder", "pep660-pth", "pth-develop", "egg-link"])
def test_a_development_install_without_direct_url_is_named_with_where_its_files_are(kind: str, site_060: Path, tmp_path: Path) -> None:
    """An editable or develop install by an installer that wrote no direct_url.json (issue 16): one
    line naming the install kind and where the files are, never "file ... not found" per spec."""
    checkout = tmp_path / "checkout"
    if kind == "pep660-finder":  # setuptools >= 64: a finder module mapping the package to the checkout
        finder = "__editable___flashinfer_python_0_6_0_finder.py"
        (site_060 / finder).write_text(f"MAPPING: dict[str, str] = {{'flashinfer': '{checkout}/flashinfer'}}\n", encoding="utf-8")
        _add_to_record(site_060, finder)
        where = f"{checkout}/flashinfer"
    elif kind == "pep660-pth":  # setuptools' "compat" editable mode: a .pth naming the checkout
        pth = "__editable__.flashinfer_python-0.6.0.pth"
        (site_060 / pth).write_text(f"{checkout}\n", encoding="utf-8")
        _add_to_record(site_060, pth)
        where = str(checkout)
    else:  # the package itself moved out of site-packages, found through a .pth or an egg-link
        checkout.mkdir()
        shutil.move(str(site_060 / "flashinfer"), checkout / "flashinfer")
        if kind == "pth-develop":
            (site_060 / "easy-install.pth").write_text(f"{checkout}\n", encoding="utf-8")
            where = f"{checkout}/flashinfer"
        else:
            (site_060 / "flashinfer-python.egg-link").write_text(f"{checkout}\n.\n", encoding="utf-8")
            where = str(checkout)
    before = snapshot(site_060)
    for command in ("status", "apply"):
        message = refused(run_cli(command, *sp(site_060)), 2, "flashinfer-python is a", "install: its files are in", where, "not in site-packages")
        assert "not found" not in message
    unchanged(site_060, before)


@pytest.mark.parametrize("layout", ["flat", "src"])
def test_a_setup_py_develop_egg_info_in_a_source_tree_is_refused(tmp_path: Path, layout: str) -> None:
    """``setup.py develop``: the metadata is an ``.egg-info`` in the checkout (or in its ``src/`` folder, with
    ``setup.py`` one level up: the break-it run saw apply plan its writes into such a checkout), which a .pth puts
    on the path."""
    from fp4patch.errors import EnvironmentProblem
    from fp4patch.target.environment import TargetEnvironment, find_distribution

    checkout = tmp_path / "checkout"
    tree = checkout / "src" if layout == "src" else checkout
    (tree / "flashinfer").mkdir(parents=True)
    (tree / "flashinfer" / "__init__.py").write_text("", encoding="utf-8")
    (checkout / "setup.py").write_text("from setuptools import setup\nsetup()\n", encoding="utf-8")
    info = tree / "flashinfer_python.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.6.0\n", encoding="utf-8")
    with pytest.raises(EnvironmentProblem) as caught:
        find_distribution(TargetEnvironment((str(tmp_path / "site"), str(tree)), sys.executable, "a test environment"), "flashinfer-python")
    assert f"is a development (setup.py develop) install: its files are in {tree}" in str(caught.value)


def test_site_packages_is_a_zip_archive(tmp_path: Path, site_060: Path) -> None:
    archive = Path(shutil.make_archive(str(tmp_path / "site"), "zip", site_060 / DIST_INFO))
    data = archive.read_bytes()
    refused(run_cli("apply", "--spec", CUDA, *sp(archive)), 2, str(archive), "zip", "unzipped")
    assert archive.read_bytes() == data


def test_lock_held_by_another_process(site_060: Path) -> None:
    from filelock import FileLock

    lock = site_060 / ".fp4patch" / "flashinfer-python.lock"
    lock.parent.mkdir()
    with FileLock(str(lock)):
        before = snapshot(site_060)
        done = run_cli("apply", "--spec", CUDA, *sp(site_060), env={"FP4PATCH_LOCK_TIMEOUT": "1"})
        # "waiting for lock ..." may come first on stderr: the refusal is the last line, and the only error line
        errors = [line for line in done.stderr.splitlines() if line.startswith("fp4patch: error: ")]
        assert done.returncode == 3 and len(errors) == 1, done.stderr
        assert str(lock) in errors[0] and "FP4PATCH_LOCK_TIMEOUT" in errors[0], errors[0]
        assert done.stderr.strip().splitlines()[-1] == errors[0]
        unchanged(site_060, before)


def test_a_write_that_fails_midway_puts_every_file_back_and_says_so(site_060: Path) -> None:
    """One target directory refuses new files (``chattr +i`` as root): the apply fails at that file, the
    files written before it are put back, and the one line says so — not only that the failing file is
    unchanged — so nobody wonders whether the others are half-patched."""
    import os
    import subprocess

    target = site_060 / CPP_EXT
    if os.geteuid() != 0 or shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode:
        pytest.skip("needs root and chattr +i (an immutable file: the preflight passes, the rename onto it fails)")
    try:
        before = snapshot(site_060)
        line = refused(run_cli("apply", *sp(site_060)), 3, str(target), "write failed", "put back as they were: nothing changed")
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)
    assert "other file(s) of this operation" in line
    unchanged(site_060, before)


@pytest.mark.parametrize(
    ("command", "given"),
    [
        ("revert", "fp4-quantise-fullgraph"),
        ("revert", "FP4-Quantize-Fullgraph"),
        ("apply", "MM-FP4-FULLGRAPH"),
        ("status", "FP4-Quantize-Fullgraph"),
        ("diff", "MM-FP4-FULLGRAPH"),
        ("verify", "FP4-Quantize-Fullgraph"),
    ],
)
def test_a_misspelt_or_miscased_spec_is_unknown_with_a_suggestion_in_every_command(site_060: Path, command: str, given: str) -> None:
    """`revert --spec` with a typo said "not applied here" where the other commands say "unknown spec ... did you
    mean"; a spec in the wrong case got no suggestion anywhere. Same line in every command, nothing written."""
    before = snapshot(site_060)
    line = refused(run_cli(command, "--spec", given, *sp(site_060)), 2, f"unknown spec {given!r}", "did you mean", "fp4patch status")
    meant = re.search(r"did you mean '([a-z0-9-]+)'", line)
    assert meant and meant[1] == given.lower().replace("quantise", "quantize"), line
    if given != given.lower():
        assert "spec ids are lower case" in line, line
    assert len(line) < 250, line  # no list of every known spec in a CI log line
    unchanged(site_060, before)


def test_diff_stat_on_a_patched_environment_says_it_is_patched(tmp_path_factory: pytest.TempPathFactory) -> None:
    site = applied_site("0.6.0", tmp_path_factory)
    for args in (("--stat",), ()):
        done = run_cli("diff", *args, "--site-packages", str(site))
        assert done.returncode == 0, done.stderr
        said = done.stdout if args else done.stderr  # a plain diff keeps stdout an empty patch
        assert "0 file(s)" not in said and "flashinfer-python 0.6.0 is patched" in said, said
        assert args or done.stdout == ""
