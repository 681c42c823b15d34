"""Run the CPU trace probe (``trace_probe.py``) in the target interpreter for ``verify --trace``.

The probe is a standalone script run by path, so the target environment needs torch and
flashinfer but not fp4patch. Each case result is a dict with at least ``name``, ``passed``,
``graphs``, ``graph_breaks``, ``custom_ops``, ``layout_ok`` and ``error`` (the first line of a
Dynamo error, verbatim).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from .environment import TargetEnvironment
from .errors import EnvironmentProblem

PROBE = Path(__file__).with_name("trace_probe.py")


def run_probe(env: TargetEnvironment, site_packages: Path | None = None, timeout: float = 1800.0, case_filter: str = "") -> list[dict[str, Any]]:
    """Run the probe with ``env.python``; ``site_packages`` (for ``--site-packages`` and
    ``--against``) goes first on its ``sys.path`` (the probe's ``--path``: unlike ``PYTHONPATH``,
    also under ``python -I``), and flashinfer must be imported from there.

    Returns the case results (see module docstring); time in seconds for ``timeout``.

    Raises:
        EnvironmentProblem: the interpreter cannot import torch or flashinfer (or imports it from
            elsewhere than ``site_packages``), the environment disables torch.compile
            (``TORCH_COMPILE_DISABLE=1``, named), the probe times out or prints no result.
    """
    command = [env.python, str(PROBE), "--json"] + (["--filter", case_filter] if case_filter else [])
    if site_packages is not None:
        command += ["--path", str(site_packages)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"{PROBE}: trace probe ran over {timeout:.0f} s in {env.python}; rerun with fewer cases") from None
    except OSError as exc:
        raise EnvironmentProblem(f"{env.python}: cannot run the trace probe ({exc.strerror})") from None
    if done.returncode == 3:  # the environment disables torch.compile: the probe names how
        last = (done.stderr.strip().splitlines() or ["torch.compile is disabled"])[-1]
        raise EnvironmentProblem(f"{env.python}: {last}; `fp4patch verify --trace` needs torch.compile")
    if done.returncode == 2 or not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvironmentProblem(
            f"{env.python}: trace probe could not run ({last}); --trace needs torch and flashinfer's import-time dependencies there"
        )
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise EnvironmentProblem(f"{PROBE}: trace probe printed no JSON; run it by hand: {env.python} {PROBE}") from None
