"""Run fp4patch's standalone probes in the target interpreter.

The probes are scripts run by path, so the target environment needs torch and flashinfer but not
fp4patch:

* ``trace_probe.py`` for ``verify --trace`` (CPU is enough): each case result is a dict with at least
  ``name``, ``passed``, ``graphs``, ``graph_breaks``, ``custom_ops``, ``layout_ok`` and ``error`` (the
  first line of a Dynamo error, verbatim);
* ``scan_probe.py`` for ``fp4patch scan`` and the patched functions of ``verify --trace`` (CPU): each
  result is described in ``scan_probe.py``;
* ``fake_check_probe.py`` for :mod:`fp4patch.checks.fake_check` (CPU): each op's fake against the wrapper's own
  allocation over the op's case grid, described in ``fake_check_probe.py``;
* ``opcheck_probe.py`` for ``verify --opcheck`` (needs a CUDA GPU): each result is a dict with
  ``function``, ``op``, ``case``, ``status`` (``passed``/``failed``/``skipped``), ``detail`` and the
  ``real`` and ``fake`` output metadata (``[shape, stride, dtype]`` per output).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from ..errors import EnvironmentProblem
from ..locations import PROBES_DIR
from ..target.environment import TargetEnvironment

PROBE = PROBES_DIR / "trace_probe.py"
SCAN = PROBES_DIR / "scan_probe.py"
OPCHECK_PROBE = PROBES_DIR / "opcheck_probe.py"


def _run_script(
    script: Path, args: list[str], env: TargetEnvironment, site_packages: Path | None, timeout: float, what: str,
    needs: str = "it needs torch and flashinfer's import-time dependencies there", label: str = "fp4patch verify --trace",
    expect: Path | None = None,
) -> Any:
    """Run ``script --json ARGS`` with ``env.python``; its JSON output.

    ``site_packages`` (``--site-packages``, ``--against``) goes first on the probe's ``sys.path``
    through its ``--path`` option (unlike ``PYTHONPATH``, also under ``python -I``), and the probe
    refuses a flashinfer imported from anywhere else. ``expect`` (``--python``: the site-packages fp4patch
    read) is not put on the path, but a flashinfer imported from anywhere else is refused all the same
    (``--expect``; the probes of :mod:`fp4patch.probes` that take it), naming the file imported. The probe is
    started with ``--python`` as given, so a wrapper script's flags and environment apply.

    Raises:
        EnvironmentProblem: the probe cannot start, times out, exits 2 (torch or flashinfer missing,
            ``needs`` says what it needs), exits 3 (the environment disables torch.compile: the
            probe's message names the variable), or prints no JSON.
    """
    command = [env.python, str(script), "--json", *args]
    if site_packages is not None:
        command += ["--path", str(site_packages)]
    elif expect is not None:
        command += ["--expect", str(expect)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"{script}: {what} ran over {timeout:.0f} s in {env.python}; rerun with fewer cases") from None
    except OSError as exc:
        raise EnvironmentProblem(f"{env.python}: cannot run the {what} ({exc.strerror})") from None
    if done.returncode == 3:  # the environment disables torch.compile: the probe names how
        last = (done.stderr.strip().splitlines() or ["torch.compile is disabled"])[-1]
        raise EnvironmentProblem(f"{env.python}: {last}; `{label}` needs torch.compile")
    if done.returncode == 2 or not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        if done.returncode == 2 and last.startswith("flashinfer was imported from "):  # names the file and what to do
            raise EnvironmentProblem(f"{env.python}: {what} could not run: {last}")
        if done.returncode == 2 and _missing_module(last):
            # an environment made for the static commands only (make demo's .demo/target: flashinfer with --no-deps)
            raise EnvironmentProblem(
                f"{env.python}: {what} could not run ({last}); `{label}` compiles on CPU in that interpreter, which needs torch "
                f"(the CPU build is enough) and FlashInfer's import-time dependencies: `{install_line(env.python)}`"
            )
        raise EnvironmentProblem(f"{env.python}: {what} could not run ({last}); {needs}")
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise EnvironmentProblem(f"{script}: {what} printed no JSON; run it by hand: {env.python} {script}") from None


#: What a probe imports besides FlashInfer itself: torch and FlashInfer's import-time dependencies (its CUDA-only
#: requirements are not imported on CPU). requirements-test.txt installs the same for the suite's trace tests.
TRACE_REQUIREMENTS = ("torch", "apache-tvm-ffi<0.2", "numpy", "packaging", "nvidia-ml-py", "requests", "tqdm", "jsonschema", "pyyaml")
#: PyTorch's index of CPU builds: a few hundred MB instead of the registry's CUDA build (several GB) on Linux.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def install_line(python: str) -> str:
    """The one command that lets ``verify --trace`` and ``scan`` run in ``python`` (str, an interpreter path):
    ``pip install`` of :data:`TRACE_REQUIREMENTS` there, torch's CPU build from :data:`TORCH_CPU_INDEX` (an
    extra index: the rest comes from the usual one). Shell-quoted."""
    import shlex

    return shlex.join([python, "-m", "pip", "install", "--extra-index-url", TORCH_CPU_INDEX, *TRACE_REQUIREMENTS])


def _missing_module(line: str) -> bool:
    """Whether a probe's last line says torch or a module FlashInfer imports is not installed."""
    return line.startswith(("cannot import torch:", "cannot import flashinfer: ModuleNotFoundError"))


def run_probe(
    env: TargetEnvironment, site_packages: Path | None = None, timeout: float = 1800.0, case_filter: str = "", expect: Path | None = None,
) -> list[dict[str, Any]]:
    """Run the trace probe with ``env.python``; flashinfer is imported from ``site_packages`` when given, and must
    come from ``expect`` when that is given instead (see :func:`_run_script`).

    Returns the case results (see module docstring); time in seconds for ``timeout``.

    Raises:
        EnvironmentProblem: the interpreter cannot import torch or flashinfer (or imports it from
            elsewhere than ``site_packages``), the environment disables torch.compile
            (``TORCH_COMPILE_DISABLE=1``, named), the probe times out or prints no result.
    """
    return _run_script(PROBE, ["--filter", case_filter] if case_filter else [], env, site_packages, timeout, "trace probe",
                       "--trace needs torch and flashinfer's import-time dependencies there", expect=expect)


def scan_entries() -> list[dict[str, str]]:
    """The scan's entries as ``[{name, function, spec, fallback_spec, variant}]``, read from ``scan_probe.py`` without torch.

    ``spec`` is the fp4patch spec id that makes the entry compile (``<function-kebab>-fullgraph``
    unless the entry names another, e.g. ``mxfp4_quantize`` -> ``fp4-quantize-fullgraph``);
    ``fallback_spec`` (or None) the one whose op the call reaches where ``spec`` is not applied
    (``nvfp4_quantize``: ``nvfp4-quantize-fullgraph`` from 0.6.11, before it ``fp4-quantize-fullgraph``).
    """
    import importlib.util

    spec = importlib.util.spec_from_file_location("_fp4patch_scan_probe", SCAN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.catalog()


def entries_for_specs(spec_ids: set[str]) -> list[str]:
    """Names of the scan entries that the specs ``spec_ids`` make traceable (in scan order): each
    function's default call, not its variants (``name[variant]``, reported by ``scan`` only), whose
    ``spec`` or ``fallback_spec`` is among them."""
    return [e["name"] for e in scan_entries() if (e["spec"] in spec_ids or e.get("fallback_spec") in spec_ids) and not e.get("variant")]


def run_scan(
    env: TargetEnvironment, site_packages: Path | None = None, only: list[str] | None = None, timeout: float = 1800.0,
    release: dict[str, dict[str, Any]] | None = None, forms: tuple[str, ...] | None = None, expect: Path | None = None,
) -> dict[str, Any]:
    """Run ``scan_probe.py`` in ``env.python``, one child interpreter for the whole scan.

    Returns ``{flashinfer, flashinfer_file, torch, results}``; ``results`` holds one dict per
    entry (``name``, ``function``, ``spec``, ``status`` = compiles / fails / not-present / no-call,
    ``passed``, ``graphs``, ``graph_breaks``, ``ops``, ``error``, ``explanation``, ``root_cause`` and
    ``root_location`` (the exception behind the error), ``location`` = ``flashinfer/FILE.py:LINE`` where
    tracing stopped, ``source``, ``defined_at``, ``form`` (the form that failed: ``nested`` or ``direct``),
    ``forms``, ``call``, ``release_args``). ``only`` restricts the scan to those entry names; ``release`` is
    the release data of the installed release (:func:`probe_release_data`), from which calls take the
    arguments that depend on the release; ``forms`` how each call is compiled (default: the function called
    from a compiled function, and handed to ``torch.compile`` directly); ``expect``: the directory flashinfer must
    be imported from, when ``site_packages`` is not given (:func:`_run_script`); time in seconds for ``timeout``.

    Raises:
        EnvironmentProblem: the interpreter cannot import torch or flashinfer, times out, or the
            scan prints no result.
    """
    if only is not None and not only:
        return {"results": []}
    args = ["--only", *only] if only is not None else []
    if release is not None:
        args += ["--release-data", json.dumps(release, sort_keys=True)]
    if forms is not None:
        args += ["--forms", ",".join(forms)]
    return _run_script(SCAN, args, env, site_packages, timeout, "scan", label="fp4patch scan", expect=expect)


def probe_release_data(targets: dict[str, list]) -> dict[str, dict[str, Any]]:
    """spec id → the ``RELEASE`` dict its custom op is rendered with on the installed release
    (:func:`fp4patch.ops.release.release_data` of the first custom-op operation of the spec's targets there: the
    spec's ``[target.operation.release]`` over the op source's own). ``targets``: spec id → the
    :class:`fp4patch.catalog.spec.Target` list the installed release resolves to (``Engine.resolve(spec).targets``). The
    scan and ``verify --trace`` take a release's call arguments from it (a backend that release accepts). Specs
    without a custom-op target on that release are left out.
    """
    out: dict[str, dict[str, Any]] = {}
    for spec_id, resolved in targets.items():
        for target in resolved:
            data = target_release_data(target)
            if data is not None and spec_id not in out:
                out[spec_id] = data
    return out


def target_release_data(target: Any) -> dict[str, Any] | None:
    """The ``RELEASE`` dict of the first custom-op operation of ``target`` (a :class:`fp4patch.catalog.spec.Target`), or
    None when it has none (:func:`fp4patch.ops.release.release_data`)."""
    from ..ops.release import release_data

    for kind, fields in target.operation_specs:
        if kind == "custom-op":
            return release_data(fields["target"])
    return None


def listed_release_data(specs: list, version: Any) -> dict[str, dict[str, Any]]:
    """:func:`probe_release_data` for a release the specs' targets name by their version specifiers (a catalog
    release), without an installed copy: what a release's evidence is checked against."""
    out: dict[str, dict[str, Any]] = {}
    for spec in specs:
        for target in spec.targets_for(version):
            data = None if target.status else target_release_data(target)
            if data is not None and spec.id not in out:
                out[spec.id] = data
    return out


def declare_not_needed(results: list[dict[str, Any]], version: Any, specs: list | None = None) -> list[dict[str, Any]]:
    """``results`` (the scan's, :func:`run_scan`) with each function that its spec declares ``not-needed`` on
    ``version`` reported as such: ``status`` ``"not-needed"`` and ``declared`` the spec's reason (what the scan
    saw, e.g. ``fails``, kept as ``scanned``). A function the installed release lacks stays ``not-present``.

    ``e2m1_and_ufp8sf_scale_to_float`` is one: a host op (a CPU output, a device sync) that fp4patch does not
    patch (``patches/flashinfer-python/e2m1-and-ufp8sf-scale-to-float-fullgraph.toml``). ``specs``: the loaded
    specs (:func:`fp4patch.catalog.spec.load_specs` of the built-in ones when None). The summary counts these apart
    (:func:`fp4patch.cli.render.text.scan_summary`).
    """
    from ..catalog.spec import load_specs

    by_id = {s.id: s for s in (load_specs(None) if specs is None else specs)}
    fallback = {e["name"]: e.get("fallback_spec") for e in scan_entries()}

    def declared(spec_id: str | None) -> str | None:
        spec = by_id.get(spec_id or "")
        targets = spec.targets_for(version) if spec is not None else []
        return targets[0].reason if targets and all(t.status == "not-needed" for t in targets) else None

    out = []
    for r in results:
        reason = declared(r.get("spec"))
        # a call another spec's op carries where its own spec is not needed (nvfp4_quantize before 0.6.11, through
        # fp4_quantize's op) is reported as the scan saw it, unless that spec is declared not-needed too
        if reason is not None and fallback.get(r["name"]) and declared(fallback[r["name"]]) is None:
            reason = None
        if r["status"] != "not-present" and reason is not None:
            r = {**r, "scanned": r["status"], "status": "not-needed", "passed": False, "declared": reason}
        out.append(r)
    return out


def leave_out(results: list[dict[str, Any]], skip: list[str] | None) -> list[dict[str, Any]]:
    """``results`` (the scan's, :func:`run_scan`) with each function that does not compile and whose spec
    (``spec``) is left out with ``--skip`` reported as ``left-out``: ``scanned`` keeps what the scan saw,
    ``declared`` says ``left out with --skip <id>``. One that compiles all the same (another spec's op carries the
    call) stays ``compiles``; one the installed release lacks stays ``not-present``. The summary counts them
    apart (:func:`fp4patch.cli.render.text.scan_summary`)."""
    skipped = set(skip or ())
    out = []
    for r in results:
        if r.get("spec") in skipped and r["status"] not in ("compiles", "not-present", "not-needed"):
            r = {**r, "scanned": r["status"], "status": "left-out", "passed": False, "declared": f"left out with --skip {r['spec']}"}
        out.append(r)
    return out


def run_opcheck(env: TargetEnvironment, site_packages: Path | None = None, timeout: float = 3600.0, case_filter: str = "") -> list[dict[str, Any]]:
    """Run the GPU opcheck probe with ``env.python`` (see module docstring); time in seconds for ``timeout``.

    Raises:
        EnvironmentProblem: no CUDA device or no flashinfer in that interpreter, no patched op, a
            timeout, or no result.
    """
    args = ["--filter", case_filter] if case_filter else []
    return _run_script(OPCHECK_PROBE, args, env, site_packages, timeout, "opcheck probe", "--opcheck needs a CUDA GPU, torch and the patched flashinfer there")


#: The spec whose function ``trace_probe.py``'s cases compile (``fp4_quantize``), besides the scan's calls.
TRACE_SPEC = "fp4-quantize-fullgraph"


def probe_plan(spec_id: str, release: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What ``verify --trace`` compiles for spec ``spec_id`` on a release whose release data is ``release``
    (``{spec id: RELEASE}``, :func:`probe_release_data`), as plain data: each scan entry the spec covers (its
    default calls, the variants aside) with the argument pool it draws the call from and the release data's
    choices (``scan_calls.planned_pool``, offered by ``scan_probe``), the forms each call is compiled in, and for
    ``fp4-quantize-fullgraph`` the trace probe's cases. Needs torch (the pools name dtypes), not FlashInfer. The catalog's evidence records
    its digest (:func:`probe_digest`) as part of what a release was traced with.
    """
    import torch

    scan = _load_probe(SCAN, "_fp4patch_scan_probe_plan")
    names = set(entries_for_specs({spec_id}))
    plan: dict[str, Any] = {
        "forms": list(scan.FORMS),
        "entries": {e["name"]: scan.planned_pool(e, release, torch) for e in scan.FUNCTIONS if e["name"] in names},
    }
    if spec_id == TRACE_SPEC:
        plan["trace_cases"] = _load_probe(PROBE, "_fp4patch_trace_probe_plan").build_cases()
    return plan


def probe_digest(spec_id: str, release: dict[str, dict[str, Any]]) -> str:
    """12 hex digits of the sha256 of :func:`probe_plan` (canonical JSON): changes exactly when what the probe
    compiles for that spec on that release does (a shape, a dtype, a value, a backend choice, a form, a case)."""
    import hashlib

    text = json.dumps(probe_plan(spec_id, release), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _load_probe(path: Path, name: str) -> Any:
    """The probe script at ``path`` as a module (loaded by path, once per process)."""
    import importlib.util
    import sys

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
