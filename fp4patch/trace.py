"""Run fp4patch's standalone probes in the target interpreter.

The probes are scripts run by path, so the target environment needs torch and flashinfer but not
fp4patch:

* ``trace_probe.py`` for ``verify --trace`` (CPU is enough): each case result is a dict with at least
  ``name``, ``passed``, ``graphs``, ``graph_breaks``, ``custom_ops``, ``layout_ok`` and ``error`` (the
  first line of a Dynamo error, verbatim);
* ``scan_probe.py`` for ``fp4patch scan`` and the patched functions of ``verify --trace`` (CPU): each
  result is described in ``scan_probe.py``;
* ``fake_check_probe.py`` for :mod:`fp4patch.fake_check` (CPU): each op's fake against the wrapper's own
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

from .environment import TargetEnvironment
from .errors import EnvironmentProblem

PROBE = Path(__file__).with_name("trace_probe.py")
SCAN = Path(__file__).with_name("scan_probe.py")
OPCHECK_PROBE = Path(__file__).with_name("opcheck_probe.py")


def _run_script(
    script: Path, args: list[str], env: TargetEnvironment, site_packages: Path | None, timeout: float, what: str,
    needs: str = "it needs torch and flashinfer's import-time dependencies there", label: str = "fp4patch verify --trace",
) -> Any:
    """Run ``script --json ARGS`` with ``env.python``; its JSON output.

    ``site_packages`` (``--site-packages``, ``--against``) goes first on the probe's ``sys.path``
    through its ``--path`` option (unlike ``PYTHONPATH``, also under ``python -I``), and the probe
    refuses a flashinfer imported from anywhere else. The probe is started with ``--python`` as
    given, so a wrapper script's flags and environment apply.

    Raises:
        EnvironmentProblem: the probe cannot start, times out, exits 2 (torch or flashinfer missing,
            ``needs`` says what it needs), exits 3 (the environment disables torch.compile: the
            probe's message names the variable), or prints no JSON.
    """
    command = [env.python, str(script), "--json", *args]
    if site_packages is not None:
        command += ["--path", str(site_packages)]
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
        raise EnvironmentProblem(f"{env.python}: {what} could not run ({last}); {needs}")
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise EnvironmentProblem(f"{script}: {what} printed no JSON; run it by hand: {env.python} {script}") from None


def run_probe(env: TargetEnvironment, site_packages: Path | None = None, timeout: float = 1800.0, case_filter: str = "") -> list[dict[str, Any]]:
    """Run the trace probe with ``env.python``; flashinfer is imported from ``site_packages`` when given
    (see :func:`_run_script`).

    Returns the case results (see module docstring); time in seconds for ``timeout``.

    Raises:
        EnvironmentProblem: the interpreter cannot import torch or flashinfer (or imports it from
            elsewhere than ``site_packages``), the environment disables torch.compile
            (``TORCH_COMPILE_DISABLE=1``, named), the probe times out or prints no result.
    """
    return _run_script(PROBE, ["--filter", case_filter] if case_filter else [], env, site_packages, timeout, "trace probe",
                       "--trace needs torch and flashinfer's import-time dependencies there")


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


def run_scan(env: TargetEnvironment, site_packages: Path | None = None, only: list[str] | None = None, timeout: float = 1800.0) -> dict[str, Any]:
    """Run ``scan_probe.py`` in ``env.python``, one child interpreter for the whole scan.

    Returns ``{flashinfer, flashinfer_file, torch, results}``; ``results`` holds one dict per
    entry (``name``, ``function``, ``spec``, ``status`` = compiles / fails / not-present / no-call,
    ``passed``, ``graphs``, ``graph_breaks``, ``ops``, ``error``, ``explanation``, ``location`` =
    ``flashinfer/FILE.py:LINE`` where tracing stopped, ``source``, ``defined_at``). ``only``
    restricts the scan to those entry names; time in seconds for ``timeout``.

    Raises:
        EnvironmentProblem: the interpreter cannot import torch or flashinfer, times out, or the
            scan prints no result.
    """
    if only is not None and not only:
        return {"results": []}
    return _run_script(SCAN, ["--only", *only] if only is not None else [], env, site_packages, timeout, "scan", label="fp4patch scan")


def declare_not_needed(results: list[dict[str, Any]], version: Any, specs: list | None = None) -> list[dict[str, Any]]:
    """``results`` (the scan's, :func:`run_scan`) with each function that its spec declares ``not-needed`` on
    ``version`` reported as such: ``status`` ``"not-needed"`` and ``declared`` the spec's reason (what the scan
    saw, e.g. ``fails``, kept as ``scanned``). A function the installed release lacks stays ``not-present``.

    ``e2m1_and_ufp8sf_scale_to_float`` is one: a host op (a CPU output, a device sync) that fp4patch does not
    patch (``patches/flashinfer-python/e2m1-and-ufp8sf-scale-to-float-fullgraph.toml``). ``specs``: the loaded
    specs (:func:`fp4patch.spec.load_specs` of the built-in ones when None). The summary counts these apart
    (:func:`fp4patch.render.scan_summary`).
    """
    from .spec import load_specs

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
    apart (:func:`fp4patch.render.scan_summary`)."""
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
