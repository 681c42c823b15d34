"""Run the CPU trace probe (``trace_probe.py``) in the target interpreter for ``verify --trace``.

The probe is a standalone script run by path, so the target environment needs torch and
flashinfer but not fp4patch. Each case result is a dict with at least ``name``, ``passed``,
``graphs``, ``graph_breaks``, ``custom_ops``, ``layout_ok`` and ``error`` (the first line of a
Dynamo error, verbatim).
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


def run_probe(env: TargetEnvironment, site_packages: Path | None = None, timeout: float = 1800.0, case_filter: str = "") -> list[dict[str, Any]]:
    """Run the probe with ``env.python``; ``site_packages`` (for ``--site-packages``) goes first on PYTHONPATH.

    Returns the case results (see module docstring); time in seconds for ``timeout``.

    Raises:
        EnvironmentProblem: the interpreter cannot import torch or flashinfer, times out, or the
            probe prints no result.
    """
    environ = dict(os.environ)
    if site_packages is not None:
        environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site_packages), environ.get("PYTHONPATH", "")]))
    command = [env.python, str(PROBE), "--json"] + (["--filter", case_filter] if case_filter else [])
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=environ, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"{PROBE}: trace probe ran over {timeout:.0f} s in {env.python}; rerun with fewer cases") from None
    except OSError as exc:
        raise EnvironmentProblem(f"{env.python}: cannot run the trace probe ({exc.strerror})") from None
    if done.returncode == 2 or not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvironmentProblem(
            f"{env.python}: trace probe could not run ({last}); --trace needs torch and flashinfer's import-time dependencies there"
        )
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise EnvironmentProblem(f"{PROBE}: trace probe printed no JSON; run it by hand: {env.python} {PROBE}") from None
