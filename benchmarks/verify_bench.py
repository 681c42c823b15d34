#!/usr/bin/env python3
"""``fp4patch verify`` on a patched flashinfer-python 0.7.4 against a one-command typer app (``make bench``).

The speed target of ``verify``: within 1.5x of the CLI framework's own cost, a one-command typer app that parses one
option and prints it with rich. Both run as fresh processes, alternating round by round (so a change in the machine's
load reaches both alike); the medians, every sample and their ratio go to ``benchmarks/results/verify.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fp4patch.catalog.releases import fetch, unpack  # noqa: E402

VERSION = "0.7.4"
TARGET = 1.5
#: the baseline: the same framework (typer, rich) doing nothing but parse one option and print it
TYPER_APP = (
    "import typer, rich\n"
    "app = typer.Typer()\n"
    "@app.command()\n"
    "def main(site_packages: str = typer.Option(...)):\n"
    "    rich.print(site_packages)\n"
    "app()"
)


def timed(command: list[str], env: dict[str, str]) -> float:
    """Wall-clock milliseconds of ``command`` in a fresh process; raises when it fails."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, env=env)
    elapsed = (time.perf_counter() - start) * 1000.0
    if done.returncode != 0:
        raise RuntimeError(f"{command} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed


def main() -> int:
    """Measure, write the JSON, print one line per command and the ratio; exit 0 (a measurement, not a test)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "verify.json")
    args = parser.parse_args()

    # as after `pip install`: bytecode compiled, the console script next to this interpreter when installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update({"NO_COLOR": "1", "PYTHONPATH": str(REPO)})
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "fp4patch")], env=env, check=True)
    script = Path(sys.executable).with_name("fp4patch")
    fp4 = [str(script)] if script.is_file() else [sys.executable, "-m", "fp4patch"]
    work = Path(tempfile.mkdtemp(prefix="fp4patch-bench-"))
    try:
        patched = unpack(fetch("flashinfer-python", VERSION), work / "site")
        subprocess.run([*fp4, "apply", "--site-packages", str(patched)], env=env, check=True, capture_output=True)
        commands = {
            "baseline: a one-command typer app": [sys.executable, "-c", TYPER_APP, "--site-packages", str(patched)],
            "fp4patch verify --site-packages (patched 0.7.4)": [*fp4, "verify", "--site-packages", str(patched)],
        }
        for command in commands.values():  # warm the page cache and the bytecode once, unmeasured
            timed(command, env)
        samples: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(args.rounds):
            for key, command in commands.items():
                samples[key].append(timed(command, env))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    medians = {k: statistics.median(v) for k, v in samples.items()}
    baseline, verify = medians.values()
    ratio = verify / baseline
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average": os.getloadavg(),
        "flashinfer": VERSION,
        "rounds": args.rounds,
        "median_ms": medians,
        "samples_ms": samples,
        "ratio": ratio,
        "target": TARGET,
        "within_target": ratio <= TARGET,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for key, value in medians.items():
        print(f"{key}: {value:.0f} ms (median of {args.rounds})")
    print(f"verify / baseline: {ratio:.2f} (target: within {TARGET}x) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
