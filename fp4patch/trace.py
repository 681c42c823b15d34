"""Run fp4patch's standalone probes in the target interpreter: ``verify --trace`` and ``verify --opcheck``.

The probes are scripts run by path, so the target environment needs torch and flashinfer but not
fp4patch:

* ``trace_probe.py`` (CPU is enough): each case result is a dict with at least ``name``, ``passed``,
  ``graphs``, ``graph_breaks``, ``custom_ops``, ``layout_ok`` and ``error`` (the first line of a
  Dynamo error, verbatim);
* ``opcheck_probe.py`` (needs a CUDA GPU): each result is a dict with ``function``, ``op``, ``case``,
  ``status`` (``passed``/``failed``/``skipped``), ``detail`` and the ``real`` and ``fake`` output
  metadata (``[shape, stride, dtype]`` per output).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from .environment import TargetEnvironment
from .errors import EnvironmentProblem

PROBE = Path(__file__).with_name("trace_probe.py")
OPCHECK_PROBE = Path(__file__).with_name("opcheck_probe.py")


def _run_json_probe(env: TargetEnvironment, probe: Path, args: list[str], site_packages: Path | None, timeout: float, needs: str) -> Any:
    environ = dict(os.environ)
    if site_packages is not None:
        environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site_packages), environ.get("PYTHONPATH", "")]))
    command = [env.python, str(probe), "--json", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=environ, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"{probe}: ran over {timeout:.0f} s in {env.python}; rerun with fewer cases (--filter)") from None
    except OSError as exc:
        raise EnvironmentProblem(f"{env.python}: cannot run {probe.name} ({exc.strerror})") from None
    if done.returncode == 2 or not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvironmentProblem(f"{env.python}: {probe.name} could not run ({last}); {needs}")
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise EnvironmentProblem(f"{probe}: printed no JSON; run it by hand: {env.python} {probe}") from None


def run_probe(env: TargetEnvironment, site_packages: Path | None = None, timeout: float = 1800.0, case_filter: str = "") -> list[dict[str, Any]]:
    """Run the CPU trace probe with ``env.python``; ``site_packages`` (for ``--site-packages``) goes first on PYTHONPATH.

    Returns the case results (see module docstring); time in seconds for ``timeout``.

    Raises:
        EnvironmentProblem: the interpreter cannot import torch or flashinfer, times out, or the
            probe prints no result.
    """
    args = ["--filter", case_filter] if case_filter else []
    return _run_json_probe(env, PROBE, args, site_packages, timeout, "--trace needs torch and flashinfer's import-time dependencies there")


def run_opcheck(env: TargetEnvironment, site_packages: Path | None = None, timeout: float = 3600.0, case_filter: str = "") -> list[dict[str, Any]]:
    """Run the GPU opcheck probe with ``env.python`` (see module docstring); time in seconds for ``timeout``.

    Raises:
        EnvironmentProblem: no CUDA device or no flashinfer in that interpreter, no patched op, a
            timeout, or no result.
    """
    args = ["--filter", case_filter] if case_filter else []
    return _run_json_probe(env, OPCHECK_PROBE, args, site_packages, timeout, "--opcheck needs a CUDA GPU, torch and the patched flashinfer there")
