"""``scripts/torch_matrix.py`` (``make test-torch``) without installing any torch: release names, the reuse of a cached
venv, the dedupe of identical files, the junit report read into counts, and the section of docs/compatibility.md it
writes and ``make compat`` keeps."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from tools import compat_report

from .conftest import REPO

SCRIPT = REPO / "scripts" / "torch_matrix.py"


def _load():
    spec = importlib.util.spec_from_file_location("torch_matrix_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


tm = _load()


# ------------------------------------------------------------------------------------------------ releases, venvs
@pytest.mark.parametrize(("text", "says"), [
    ("banana", "torch 'banana': not a version (give releases such as 2.14.1)"),
    ("2.13.0+cpu", "torch 2.13.0+cpu: give a release such as 2.13.0 (no local label or pre-release)"),
    ("2.16.0rc1", "torch 2.16.0rc1: give a release such as 2.16.0 (no local label or pre-release)"),
])
def test_a_bad_release_is_one_line(text: str, says: str) -> None:
    with pytest.raises(tm.MatrixError) as caught:
        tm.torch_release(text)
    assert str(caught.value) == says


def test_the_matrix_is_the_decided_range() -> None:
    assert all(tm.torch_release(v) for v in tm.DEFAULT_MATRIX)
    inside = [v for v in tm.DEFAULT_MATRIX if tm.Version(v) in tm.SUPPORTED]
    assert inside[0] == "2.7.1" and inside[-1] == "2.15.0" and "2.6.0" not in inside
    assert tm.CI_MATRIX == [inside[0], inside[-1]]
    assert {t for _fi, t in tm.ENGINE_PINS.values()} <= set(tm.DEFAULT_MATRIX)
    assert {fi for fi, _t in tm.ENGINE_PINS.values()} <= set(tm.FLASHINFER_RELEASES)


def test_the_cache_location_is_a_variable(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FP4PATCH_TORCH_CACHE", str(tmp_path / "torches"))
    assert tm.venv_dir("2.10.0") == tmp_path / "torches" / "v2.10.0"
    monkeypatch.delenv("FP4PATCH_TORCH_CACHE")
    assert tm.torch_cache() == Path.home() / ".cache" / "fp4patch" / "torch"


def fake_venv(root: Path, torch: str) -> Path:
    """A folder laid out as a venv holding torch ``torch`` (its .dist-info only)."""
    site = root / "lib" / "python3.11" / "site-packages"
    info = site / f"torch-{torch}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch}\n")
    (root / "bin").mkdir()
    return root


def test_a_venv_with_the_release_is_reused_without_pip(monkeypatch, tmp_path: Path) -> None:
    venv = fake_venv(tmp_path / "v2.13.0", "2.13.0+cpu")  # a CPU build is that release too
    assert tm.has_release(venv, "2.13.0") and not tm.has_release(venv, "2.13.1")
    wanted = {"torch": "2.13.0", "requirements": tm.hashlib.sha256("\n".join(tm.requirements()).encode()).hexdigest()}
    (venv / tm.MARKER).write_text(json.dumps(wanted))

    def no_pip(*args, **kwargs):
        raise AssertionError("pip ran for a venv that has everything")

    monkeypatch.setattr(tm, "_pip", no_pip)
    made = tm.ensure_venv("2.13.0", cache=tmp_path, log=lambda _: None)
    assert (made.path, made.torch, made.built) == (venv, "2.13.0+cpu", False)
    assert (tmp_path / "v2.13.0.lock").exists()  # the venv's lock, beside it


def test_changed_requirements_are_installed_into_a_reused_venv(monkeypatch, tmp_path: Path) -> None:
    venv = fake_venv(tmp_path / "v2.9.1", "2.9.1")
    calls = []
    monkeypatch.setattr(tm, "_pip", lambda python, args, env=None: calls.append((python, args, env)) or tm.subprocess.CompletedProcess(args, 0, "", ""))
    made = tm.ensure_venv("2.9.1", cache=tmp_path, log=lambda _: None)
    assert not made.built and len(calls) == 1
    python, args, env = calls[0]
    assert python == venv / "bin" / "python" and "pytest>=8" in args and "libcst>=1.1" in args and env is None
    assert json.loads((venv / tm.MARKER).read_text())["torch"] == "2.9.1"


def test_the_torch_install_lifts_the_pip_cap_for_itself_only(monkeypatch, tmp_path: Path) -> None:
    calls = []

    def pip(python, args, env=None):
        calls.append((args, env))
        if args[-1].startswith("torch=="):
            fake_venv_files(python.parent.parent, "2.15.0")
        return tm.subprocess.CompletedProcess(args, 0, "", "")

    def fake_venv_files(root: Path, torch: str) -> None:
        site = root / "lib" / "python3.11" / "site-packages" / f"torch-{torch}.dist-info"
        site.mkdir(parents=True, exist_ok=True)
        (site / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch}\n")

    monkeypatch.setattr(tm, "_pip", pip)
    monkeypatch.setattr(tm, "_make_venv", lambda python, venv, version: (venv / "bin").mkdir(parents=True))
    made = tm.ensure_venv("2.15.0", cache=tmp_path, log=lambda _: None, min_free=0)
    assert made.built and made.torch == "2.15.0"
    (torch_args, torch_env), (req_args, req_env) = calls
    assert torch_args == ["torch==2.15.0"] and torch_env == {"PIP_CONSTRAINT": "/dev/null"}
    assert req_env is None and not any(a.startswith("torch") for a in req_args)


def test_no_room_for_a_torch_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(tm.MatrixError) as caught:
        tm.ensure_venv("2.12.1", cache=tmp_path, log=lambda _: None, min_free=1 << 60)
    message = str(caught.value)
    assert message.startswith("torch 2.12.1: not installed, ") and "GB free in" in message and "\n" not in message
    assert not (tmp_path / "v2.12.1").exists()


@pytest.mark.slow
def test_a_release_the_registry_lacks_is_one_line_with_pip_s_reason(tmp_path: Path) -> None:
    with pytest.raises(tm.MatrixError) as caught:
        tm.ensure_venv("2.99.0", cache=tmp_path, log=lambda _: None, min_free=0)
    message = str(caught.value)
    assert message.startswith("torch 2.99.0: cannot be installed (pip: ") and "\n" not in message, message
    assert "torch==2.99.0" in message.split("(pip: ", 1)[1]  # pip's own words name the release it could not find
    assert not (tmp_path / "v2.99.0").exists()


def test_the_command_line_says_a_bad_release_in_one_line(capsys) -> None:
    assert tm.main(["venv", "2.x"]) == 2
    assert capsys.readouterr().err == "torch matrix: torch '2.x': not a version (give releases such as 2.14.1)\n"


# ------------------------------------------------------------------------------------------------ dedupe
def test_dedupe_links_identical_large_files_only(tmp_path: Path) -> None:
    big = os.urandom(tm.MIN_DEDUPE_SIZE)
    a, b, c = (tmp_path / n for n in ("v2.14.0", "v2.14.1", "v2.15.0"))
    for venv in (a, b, c):
        (venv / "lib").mkdir(parents=True)
        (venv / "lib" / "libcublas.so").write_bytes(big)  # the same in all three
        (venv / "lib" / "small.py").write_bytes(b"x = 1\n")  # under the size limit
    (c / "lib" / "libcublas.so").write_bytes(big[:-1] + bytes([big[-1] ^ 1]))  # same size, other bytes
    (b / "lib" / "tool").write_bytes(big)
    (b / "lib" / "tool").chmod(0o755)  # same bytes, other mode: left alone
    (a / "lib" / "link.so").symlink_to(a / "lib" / "libcublas.so")
    result = tm.dedupe([a, b, c], log=lambda _: None)
    assert result.linked == 1
    assert (a / "lib" / "libcublas.so").stat().st_ino == (b / "lib" / "libcublas.so").stat().st_ino
    assert (c / "lib" / "libcublas.so").stat().st_ino != (a / "lib" / "libcublas.so").stat().st_ino
    assert (b / "lib" / "tool").stat().st_nlink == 1 and (a / "lib" / "small.py").stat().st_nlink == 1
    assert (a / "lib" / "link.so").is_symlink()
    assert (b / "lib" / "libcublas.so").read_bytes() == big
    assert result.before - result.after >= tm.MIN_DEDUPE_SIZE and result.after == tm.disk_use([a, b, c])
    assert tm.dedupe([a, b, c], log=lambda _: None).linked == 0  # done once
    assert not list(tmp_path.rglob("*.fp4patch-link"))


def test_dedupe_reads_a_file_once_across_runs(monkeypatch, tmp_path: Path) -> None:
    big = os.urandom(tm.MIN_DEDUPE_SIZE)
    venvs = [tmp_path / "v2.14.0", tmp_path / "v2.14.1"]
    for venv in venvs:
        venv.mkdir()
        (venv / "libcudnn.so").write_bytes(big)
        (venv / "libtorch.so").write_bytes(os.urandom(tm.MIN_DEDUPE_SIZE))  # same size, other bytes: read each time without the file
    digests = tmp_path / tm.DIGESTS
    assert tm.dedupe(venvs, log=lambda _: None, digests_file=digests).linked == 1
    monkeypatch.setattr(tm, "_sha256", lambda path: pytest.fail(f"read {path} again"))
    assert tm.dedupe(venvs, log=lambda _: None, digests_file=digests).linked == 0


def test_dedupe_leaves_a_venv_being_built_alone(tmp_path: Path) -> None:
    done = fake_venv(tmp_path / "v2.14.0", "2.14.0")
    building = fake_venv(tmp_path / "v2.14.1", "2.14.1")
    (tmp_path / "v2.10.0").mkdir()  # pip has not installed torch yet
    with tm.FileLock(str(tmp_path / "v2.14.1.lock")):
        if os.fork() == 0:  # another process asks, as another run of the script would
            os._exit(0 if tm.ready_venvs(tmp_path) == [done] else 1)
        _pid, status = os.wait()
    assert os.waitstatus_to_exitcode(status) == 0
    assert tm.ready_venvs(tmp_path) == [done, building]


# ------------------------------------------------------------------------------------------------ junit, table
JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.test_torch_matrix" name="test_every_present_function_compiles_after_apply[0.7.4-direct-mm_fp4[auto]]" time="1.0">
  <properties><property name="matrix_cell" value="0.7.4"/></properties></testcase>
<testcase classname="tests.test_torch_matrix" name="test_every_present_function_compiles_after_apply[0.7.4-nested-trtllm_fp4_block_scale_moe]" time="2.0">
  <properties><property name="matrix_cell" value="0.7.4"/><property name="root_cause" value="trtllm_fp4_block_scale_moe called from a compiled function: IndexError: tuple index out of range (torch/_library/custom_ops.py:700 in adinplaceorview_impl)"/></properties>
  <failure message="long">trace</failure></testcase>
<testcase classname="tests.test_torch_matrix" name="test_every_present_function_compiles_after_apply[0.7.2-direct-mm_fp4[auto]]" time="1.0">
  <properties><property name="matrix_cell" value="0.7.2"/><property name="order" value="1020"/><property name="root_cause" value="mm_fp4[auto] handed to torch.compile: Unsupported"/></properties>
  <failure message="x">trace</failure></testcase>
<testcase classname="tests.test_torch_matrix" name="test_verify_trace_passes_after_apply[0.7.2]" time="1.0">
  <properties><property name="matrix_cell" value="0.7.2"/><property name="order" value="0"/><property name="root_cause" value="verify --trace: mxfp8_grouped_quantize: ValueError"/></properties>
  <failure message="x">trace</failure></testcase>
<testcase classname="tests.test_torch_matrix" name="test_every_present_function_compiles_after_apply[0.6.0-direct-mxfp8_grouped_quantize]" time="0.1">
  <properties><property name="matrix_cell" value="0.6.0"/></properties><skipped message="FlashInfer 0.6.0 has no mxfp8_grouped_quantize"/></testcase>
<testcase classname="tests.test_torch_matrix" name="test_docker_recipe_on_the_engine_pin[SGLang 0.5.23]" time="40">
  <properties><property name="engine" value="SGLang 0.5.23"/></properties></testcase>
<testcase classname="tests.test_trace_fullgraph" name="test_default_specs_pass_every_trace_case[0.6.0]" time="14">
  <failure message="AssertionError: 2 cases failed&#10;more">trace</failure></testcase>
<testcase classname="tests.test_eager_stays_eager" name="test_with_flashinfer_api_logging_on" time="9"/>
<testcase classname="tests.test_op_moe" name="test_patched_is_one_graph_with_one_op_and_no_recompile[cutlass_fused_moe-0.6.0]" time="9">
  <failure message="AssertionError: child exited 1&#10;Traceback (most recent call last):">E       AssertionError: child exited 1
E         File "tests/moe_op_child.py", line 577, in &lt;module&gt;
E       torch._dynamo.exc.TorchRuntimeError: Dynamo failed to run FX node with fake tensors
E       IndexError: tuple index out of range

tests/python_forkserver.py:238: AssertionError</failure></testcase>
</testsuite></testsuites>
"""


def test_the_junit_report_is_read_into_cells(tmp_path: Path) -> None:
    (tmp_path / "junit.xml").write_text(JUNIT)
    cases = tm.read_junit(tmp_path / "junit.xml")
    summary = tm.summarize(cases)
    cell = summary["cells"]["0.7.4"]
    assert (cell["passed"], cell["failed"], cell["skipped"]) == (1, 1, 0)
    assert cell["first_failure"]["cause"].startswith("trtllm_fp4_block_scale_moe called from a compiled function: IndexError")
    assert cell["first_failure"]["id"] == "tests/test_torch_matrix.py::test_every_present_function_compiles_after_apply[0.7.4-nested-trtllm_fp4_block_scale_moe]"
    assert summary["cells"]["0.6.0"]["skipped"] == 1 and summary["cells"]["0.6.0"]["passed"] == 0
    assert summary["tests"]["passed"] == 1 and summary["tests"]["first_failure"]["cause"] == "AssertionError: child exited 1: IndexError: tuple index out of range"
    assert summary["tests"]["causes"]["AssertionError: 2 cases failed"] == 1
    assert summary["engines"] == {"SGLang 0.5.23": {"passed": 1, "failed": 0, "skipped": 0, "first_failure": None, "failures": [], "causes": {}}}
    # the first failure in the tests' own order (verify --trace first), not in the order the workers reported them
    assert summary["cells"]["0.7.2"]["first_failure"]["cause"] == "verify --trace: mxfp8_grouped_quantize: ValueError"
    assert summary["cells"]["0.7.2"]["causes"] == {"verify --trace: mxfp8_grouped_quantize: ValueError": 1, "mm_fp4[auto] handed to torch.compile: Unsupported": 1}


def test_the_section_is_the_table_and_its_root_causes(tmp_path: Path) -> None:
    (tmp_path / "junit.xml").write_text(JUNIT)
    summary = tm.summarize(tm.read_junit(tmp_path / "junit.xml"))
    row = {"installed": "2.14.1+cu128", "measured": "2026-12-02 01:00", "fp4patch": "abc1234", "python": "3.11.7",
           "seconds": {"venv": 0, "venv_built": False, "tests": 420}, "summary": summary}
    below = {**row, "installed": "2.6.0+cu124", "summary": {**summary, "engines": {}}}
    section = tm.render_section({"releases": {"2.14.1": row, "2.6.0": below}})
    lines = section.splitlines()
    assert lines[0] == tm.BEGIN and lines[-1] == tm.END
    rows = [line for line in lines if line.startswith("| 2.")]
    assert rows[0] == "| 2.6.0 (below the range) | 2.6.0+cu124 | — | — | 0/2 [c1] | — | 1/2 [c2] | 1/3 [c3] | 2026-12-02 01:00 (420 s) |"
    assert rows[1].startswith("| 2.14.1 — SGLang 0.5.23's torch | 2.14.1+cu128 |")
    assert "| SGLang 0.5.23 | 0.7.2 | 2.14.1 | 1/1 |" in lines and "| vLLM 0.33.0 | 0.7.2.post1 | 2.14.0 | not run |" in lines
    assert "- [c1] verify --trace: mxfp8_grouped_quantize: ValueError" in lines
    assert "- [c2] trtllm_fp4_block_scale_moe called from a compiled function: IndexError: tuple index out of range " \
           "(torch/_library/custom_ops.py:700 in adinplaceorview_impl)" in lines


def test_the_section_replaces_its_own_and_keeps_the_rest(tmp_path: Path) -> None:
    page = tmp_path / "compatibility.md"
    page.write_text(f"# sweep\n\ntable\n\n{tm.REPLAY_BEGIN}\nreplay\n<!-- end of replay -->\n")
    tm.write_section(page, f"{tm.BEGIN}\nfirst\n{tm.END}\n")
    assert page.read_text() == f"# sweep\n\ntable\n\n{tm.BEGIN}\nfirst\n{tm.END}\n\n{tm.REPLAY_BEGIN}\nreplay\n<!-- end of replay -->\n"
    tm.write_section(page, f"{tm.BEGIN}\nsecond\n{tm.END}\n")
    assert page.read_text().count(tm.BEGIN) == 1 and "second" in page.read_text() and "first" not in page.read_text()
    assert page.read_text().startswith("# sweep\n\ntable\n\n") and page.read_text().endswith("replay\n<!-- end of replay -->\n")


def test_make_compat_keeps_the_torch_section() -> None:
    assert (compat_report.TORCH_BEGIN, compat_report.TORCH_END, compat_report.REPLAY_BEGIN) == (tm.BEGIN, tm.END, tm.REPLAY_BEGIN)
    old = f"# old sweep\n\n{tm.BEGIN}\ntorch rows\n{tm.END}\n\n{compat_report.REPLAY_BEGIN}\nreplay rows\n{compat_report.REPLAY_END}\n"
    text = compat_report.keep_sections("# new sweep\n", old)
    assert text == f"# new sweep\n\n{tm.BEGIN}\ntorch rows\n{tm.END}\n\n{compat_report.REPLAY_BEGIN}\nreplay rows\n{compat_report.REPLAY_END}\n"
    assert compat_report.keep_sections("# new sweep\n", "# no sections\n") == "# new sweep\n"


def test_the_committed_section_is_the_committed_results() -> None:
    """docs/compatibility.md's torch section is what ``scripts/torch_matrix.py report`` makes of docs/torch-matrix.json."""
    page = (REPO / "docs" / "compatibility.md").read_text()
    if not tm.RESULTS.is_file():
        pytest.skip("no torch matrix results yet")
    section = page[page.index(tm.BEGIN): page.index(tm.END) + len(tm.END)] + "\n"
    assert section == tm.render_section(tm.load_results())


def test_the_script_runs_every_file_with_torch_matrix_tests() -> None:
    """The script names its test files to pytest: every file with a ``torch_matrix`` test is among them, and each
    named file has one."""
    marked = {f"tests/{p.name}" for p in (REPO / "tests").glob("test_*.py") if "pytest.mark." + "torch_matrix" in p.read_text()}  # (split: not this file)
    assert marked == set(tm.TEST_FILES)
