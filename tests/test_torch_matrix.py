"""The cells of the torch × FlashInfer table (``make test-torch``, ``scripts/torch_matrix.py``): under the torch this
interpreter runs, on each FlashInfer release of the table, after ``fp4patch apply``:

* ``verify --trace`` passes;
* every function ``fp4patch scan`` finds in the release compiles with ``fullgraph=True`` as one graph, called from a
  compiled function (``nested``) and handed to ``torch.compile`` directly (``direct``), both from one ``fp4patch
  scan``, the MoE ops included; a function the release lacks, or that its spec declares not
  needed (``e2m1_and_ufp8sf_scale_to_float``, a host op), is skipped;
* on an engine's pinned torch, the README's Docker recipe on its pinned FlashInfer (fp4patch in its own venv:
  ``apply --python``, ``verify --trace --python``), then ``revert``, byte-identical;
* below the supported torch range, ``apply`` and ``verify`` refuse in one line and write nothing.

Each test records the FlashInfer release (``matrix_cell``) or the engine (``engine``) and, when it fails, the
failure's root cause (``root_cause``) as junit properties, which the script reads into the table. Marked ``matrix``:
``make test`` leaves them out, ``make test-heavy`` runs them on the checkout's torch (2.13), ``make test-torch`` on
each torch of the matrix.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

from fp4patch.checks.trace import scan_entries

from .conftest import REPO, applied_site, run_cli

pytestmark = [
    pytest.mark.torch,
    pytest.mark.torch_matrix,
    pytest.mark.matrix,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (make test installs the CPU build)"),
]


def _script():
    spec = importlib.util.spec_from_file_location("torch_matrix_script", REPO / "scripts" / "torch_matrix.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


MATRIX = _script()
RELEASES = MATRIX.FLASHINFER_RELEASES
ENTRIES = [e["name"] for e in scan_entries()]


def torch_version() -> Version:
    """This interpreter's torch release (``2.13.0+cpu`` -> 2.13.0), read from its metadata without importing it."""
    try:
        return Version(Version(metadata.version("torch")).public)
    except metadata.PackageNotFoundError:
        return Version("0")


TORCH = torch_version()
SUPPORTED = TORCH in MATRIX.SUPPORTED
in_range = pytest.mark.skipif(not SUPPORTED, reason=f"torch {TORCH} is outside the supported range {MATRIX.SUPPORTED}: "
                              "test_below_the_range_apply_and_verify_refuse_in_one_line checks the refusal")


def cell(record_property, version: str) -> None:
    record_property("matrix_cell", version)


def fail_with(record_property, cause: str, detail: str = "") -> None:
    """Fail the test with ``cause`` (one line, recorded as its root cause) and ``detail`` below it."""
    record_property("root_cause", cause)
    pytest.fail(f"{cause}\n{detail}".rstrip(), pytrace=False)


def _cause(result: dict) -> str:
    """One line for a failing scan result: the root cause when the scan found one, else the error and where it stopped."""
    text = result.get("root_cause") or result.get("error") or result["status"]
    if not result.get("root_cause") and result.get("raised"):
        text += f" ({result['raised']})"
    if not result.get("root_cause") and result.get("location"):
        text += f" at {result['location']}"
    return text


# ------------------------------------------------------------------------------------ the scan, nested and direct
def scan_results(version: str, mode: str, tmp_path_factory) -> dict[str, dict]:
    """Entry name -> scan result on ``version`` after ``fp4patch apply`` (default specs) in ``mode`` (``nested``: each
    function called from a compiled function; ``direct``: handed to ``torch.compile`` itself). One ``fp4patch scan
    --json`` per release compiles each call in both forms (its ``forms``); it is made once per test run and shared by
    the xdist workers (a JSON file under a lock, as :func:`conftest.applied_site` makes its site)."""
    from filelock import FileLock

    from .conftest import run_root

    site = applied_site(version, tmp_path_factory)
    folder = run_root(tmp_path_factory) / "matrix"
    folder.mkdir(exist_ok=True)
    stored = folder / f"{version}.json"
    with FileLock(str(folder / f"{version}.lock")):
        if not stored.is_file():
            done = run_cli("scan", "--site-packages", str(site), "--json")
            assert done.stdout.strip(), f"fp4patch scan printed no JSON (exit {done.returncode})\n{done.stderr[-3000:]}"
            stored.write_text(json.dumps({r["name"]: r for r in json.loads(done.stdout)["functions"]}))
    return {name: in_form(result, mode) for name, result in json.loads(stored.read_text()).items()}


def in_form(result: dict, mode: str) -> dict:
    """A scan result as compiled in ``mode`` alone: its ``forms[mode]`` fragment over the top-level fields (which
    are the first failing form's); a result that did not compile or fail (not present, no call, or one its spec
    declares not needed, whose forms the scan kept) as it is."""
    fragment = (result.get("forms") or {}).get(mode)
    if fragment is None or result["status"] not in ("compiles", "fails"):  # not-needed keeps its forms, declared
        return result
    return {**result, **fragment, "status": "compiles" if fragment["passed"] else "fails"}


@in_range
@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("mode", ["nested", "direct"])
@pytest.mark.parametrize("version", RELEASES)
def test_every_present_function_compiles_after_apply(tmp_path_factory, record_property, version: str, mode: str, entry: str) -> None:
    cell(record_property, version)
    record_property("order", str(1 + 1000 * ["nested", "direct"].index(mode) + ENTRIES.index(entry)))  # verify --trace is 0
    result = scan_results(version, mode, tmp_path_factory)[entry]
    if result["status"] == "not-present":
        pytest.skip(f"FlashInfer {version} has no {entry}" + (f" ({result['error']})" if result.get("error") else ""))
    if result["status"] == "not-needed":
        pytest.skip(f"{entry}: declared not needed by its spec ({result.get('declared', '')[:120]})")
    if result["status"] != "compiles":
        how = "called from a compiled function" if mode == "nested" else "handed to torch.compile"
        fail_with(record_property, f"{entry} {how}: {_cause(result)}", json.dumps(result, indent=1))
    assert result["graphs"] == 1 and not result["graph_breaks"], result
    assert any(op.startswith("fp4patch::") for op in result["ops"]), f"{entry}: no fp4patch op in the graph: {result['ops']}"


# ------------------------------------------------------------------------------------ verify --trace
@in_range
@pytest.mark.parametrize("version", RELEASES)
def test_verify_trace_passes_after_apply(tmp_path_factory, record_property, version: str) -> None:
    cell(record_property, version)
    record_property("order", "0")
    done = run_cli("verify", "--trace", "--site-packages", str(applied_site(version, tmp_path_factory)), "--json")
    if not done.stdout.strip():
        fail_with(record_property, f"verify --trace: {(done.stderr.strip().splitlines() or ['no output'])[-1]}", done.stderr[-3000:])
    report = json.loads(done.stdout)
    if done.returncode != 0 or not report["ok"]:
        fail_with(record_property, "verify --trace: " + trace_failure(report), json.dumps(report.get("trace_functions"), indent=1)[-4000:])


def trace_failure(report: dict) -> str:
    """The first reason a ``verify --trace --json`` report is not ok: a spec not applied, a failing trace case, a
    function that does not compile."""
    for spec in report.get("specs", []):
        if spec.get("default") and spec.get("state") not in ("applied", "not-needed", "unsupported", "obsolete"):
            return f"{spec['id']} {spec['state']}"
    for case in report.get("trace") or []:
        if not case.get("passed"):
            return f"trace case {case['name']}: {case.get('error') or 'layout or op node differs'}"
    for function in report.get("trace_functions") or []:
        if not function.get("passed"):
            return f"{function['name']}: {_cause(function)}"
    return "not ok (no failing case named)"


# ------------------------------------------------------------------------------------ the Docker recipe, engines' pins
def server_venv(root: Path, flashinfer: str) -> Path:
    """A server venv as the README's Docker recipe has one: this interpreter's environment (torch and FlashInfer's
    import-time dependencies, through a ``.pth`` file adding its site-packages: nothing copied) with
    flashinfer-python ``flashinfer`` installed ``--no-deps`` into a site-packages of its own. Returns its python."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True)
    (own,) = root.glob("lib/python3*/site-packages")
    # every site-packages of this interpreter, with its own .pth files (the matrix's venv is one over the cached torch venv)
    sites = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (own / "fp4patch_matrix_base.pth").write_text("import site; " + "; ".join(f"site.addsitedir({p!r})" for p in sites) + "\n")
    from fp4patch.catalog.releases import fetch

    python = root / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", str(fetch("flashinfer-python", flashinfer))]
    done = subprocess.run(install, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, f"pip install flashinfer-python=={flashinfer} --no-deps: {done.stderr[-2000:]}"
    return python


def tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def tool() -> list[str]:
    """fp4patch in its own venv (``FP4PATCH_TOOL``: the checkout's ``.venv/bin/fp4patch``, set by make test-torch)."""
    path = os.environ.get("FP4PATCH_TOOL") or str(REPO / ".venv" / "bin" / "fp4patch")
    if not Path(path).exists():
        pytest.skip(f"no fp4patch in a venv of its own at {path} (make test-torch sets FP4PATCH_TOOL)")
    return [path]


def run_tool(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([*tool(), *args], capture_output=True, text=True, env={**env, "NO_COLOR": "1", "COLUMNS": "200"}, check=False)


@pytest.mark.parametrize("engine", list(MATRIX.ENGINE_PINS))
def test_docker_recipe_on_the_engine_pin(tmp_path: Path, record_property, engine: str) -> None:
    flashinfer, pinned_torch = MATRIX.ENGINE_PINS[engine]
    if TORCH != Version(pinned_torch):
        pytest.skip(f"{engine} pins torch {pinned_torch}; this is torch {TORCH} (make test-torch runs it there)")
    record_property("engine", engine)
    python = server_venv(tmp_path / "server", flashinfer)
    (site,) = (tmp_path / "server").glob("lib/python3*/site-packages")
    before = tree_digest(site / "flashinfer")
    problems = []  # every step runs, whatever the one before did: revert is checked after a failed verify too
    applied = run_tool("apply", "--python", str(python))
    if applied.returncode != 0:
        problems.append(f"apply exited {applied.returncode}: {(applied.stderr.strip().splitlines() or [''])[-1]}")
    verified = run_tool("verify", "--trace", "--python", str(python), "--json")
    if verified.returncode != 0:
        cause = trace_failure(json.loads(verified.stdout)) if verified.stdout.strip() else (verified.stderr.strip().splitlines() or [""])[-1]
        problems.append(f"verify --trace exited {verified.returncode}: {cause}")
    reverted = run_tool("revert", "--python", str(python))
    after = tree_digest(site / "flashinfer")
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if reverted.returncode != 0 or changed:
        problems.append(f"revert exited {reverted.returncode}, {len(changed)} files unlike the install" + (f": {', '.join(changed[:3])}" if changed else ""))
    if problems:
        fail_with(record_property, "; ".join(problems), applied.stdout + applied.stderr + verified.stderr[-3000:] + reverted.stdout + reverted.stderr)


# ------------------------------------------------------------------------------------ below the range
@pytest.mark.skipif(SUPPORTED or TORCH == Version("0"), reason=f"torch {TORCH} is in the supported range {MATRIX.SUPPORTED}")
def test_below_the_range_apply_and_verify_refuse_in_one_line(tmp_path: Path, record_property) -> None:
    """Below the range fp4patch refuses, in one line naming torch, and writes nothing (0.6.0: it imports on 2.6)."""
    cell(record_property, "0.6.0")
    python = server_venv(tmp_path / "server", "0.6.0")
    (site,) = (tmp_path / "server").glob("lib/python3*/site-packages")
    before = tree_digest(site)
    for command in (["apply"], ["verify"]):
        done = run_tool(*command, "--python", str(python))
        lines = done.stderr.strip().splitlines()
        if done.returncode == 0 or len(lines) != 1 or "torch" not in lines[0]:
            fail_with(record_property, f"fp4patch {command[0]} on torch {TORCH} exited {done.returncode} "
                      f"({len(lines)} lines on stderr; the first: {lines[0] if lines else ''!r}); a refusal naming torch was expected",
                      done.stdout[-2000:] + done.stderr[-2000:])
    assert tree_digest(site) == before, "fp4patch wrote into the environment it refused"
