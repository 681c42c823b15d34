#!/usr/bin/env python3
"""CLI speed and memory of fp4patch against what Dockerfiles do today (``make bench``).

On flashinfer-python 0.7.4 (the newest release; its fp4_quantization.py is the largest target),
each command runs in a fresh process, all variants interleaved round by round, median of
``--rounds`` (default 7) wall-clock times in milliseconds:

- floor: ``python -c "import typer, rich"`` (the CLI framework alone);
- ``fp4patch --help``, ``status``, ``verify`` (patched: as a console script with ``--site-packages`` and with
  ``--python`` of a venv, as ``python -m``, in each output format; unpatched),
  ``diff``, ``apply``, ``revert``;
- text tools on the same files: a ``grep -q`` check (what verify replaces), ``patch --dry-run``
  and ``patch`` with the equivalent unified diff (what apply replaces).

Peak memory (max RSS, MiB) of ``apply`` is read with ``resource.getrusage(RUSAGE_CHILDREN)`` in a
wrapper process. Results: ``benchmarks/results/cli.json`` and a Markdown table on stdout.
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
# The framework's own cost for a command that parses one option (typer >= 0.2x coerces
# parameters through pydantic, imported on the first parse).
TYPER_APP = (
    "import typer, rich\n"
    "app = typer.Typer()\n"
    "@app.command()\n"
    "def main(path: str = typer.Option(...)):\n"
    "    rich.print(path)\n"
    "app()"
)


def timed(command: list[str] | str, cwd: Path | None = None, shell: bool = False, env: dict | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, shell=shell, capture_output=True, env=env)
    elapsed = (time.perf_counter() - start) * 1000.0
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{command} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed


def peak_rss_mib(command: list[str], env: dict) -> float:
    probe = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", probe, *command], capture_output=True, text=True, env=env, check=True)
    return int(out.stdout.strip()) / 1024.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "cli.json")
    args = parser.parse_args()

    # As after `pip install`: fp4patch's bytecode compiled, like typer's and rich's (a checkout run
    # with PYTHONDONTWRITEBYTECODE would recompile every module on every command).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update({"NO_COLOR": "1", "PYTHONPATH": str(REPO)})
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "fp4patch")], env=env, check=True)
    fp4 = [sys.executable, "-m", "fp4patch"]
    # What users type: the console script next to this interpreter, when installed (`pip install -e .`).
    script = Path(sys.executable).with_name("fp4patch")
    fp4_script = [str(script)] if script.is_file() else fp4
    work = Path(tempfile.mkdtemp(prefix="fp4patch-bench-"))
    try:
        pristine = unpack(fetch("flashinfer-python", VERSION), work / "pristine")
        patched = work / "patched"
        shutil.copytree(pristine, patched)
        subprocess.run([*fp4, "apply", "--site-packages", str(patched)], env=env, check=True, capture_output=True)
        # The recipes' form: --python names the target venv's interpreter (its sys.path is probed).
        venv = work / "target-venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        target_python = venv / "bin" / "python"
        purelib = subprocess.run(
            [str(target_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
        ).stdout.strip()
        shutil.copytree(pristine, purelib, dirs_exist_ok=True)
        subprocess.run([*fp4, "apply", "--python", str(target_python)], env=env, check=True, capture_output=True)
        diff = subprocess.run([*fp4, "diff", "--site-packages", str(pristine)], env=env, check=True, capture_output=True).stdout
        (work / "fp4patch.diff").write_bytes(diff)
        targets = sorted({line[6:].strip() for line in diff.decode().splitlines() if line.startswith("+++ b/")})
        grep = " && ".join(f"grep -q _fp4patch {patched / t}" if "fp4" in t else f"grep -q 'torch.version.cuda is not None' {patched / t}" for t in targets)
        scratch = work / "scratch"

        def fresh() -> Path:
            if scratch.exists():
                shutil.rmtree(scratch)
            shutil.copytree(pristine, scratch)
            return scratch

        variants = {
            "floor: python -c 'import typer, rich'": lambda: timed([sys.executable, "-c", "import typer, rich"], env=env),
            "floor: a one-option typer app": lambda: timed([sys.executable, "-c", TYPER_APP, "--path", str(patched)], env=env),
            "fp4patch --help": lambda: timed([*fp4, "--help"], env=env),
            "fp4patch status": lambda: timed([*fp4, "status", "--site-packages", str(patched)], env=env),
            "fp4patch verify (patched)": lambda: timed([*fp4_script, "verify", "--site-packages", str(patched)], env=env),
            "fp4patch verify --python (patched venv)": lambda: timed([*fp4_script, "verify", "--python", str(target_python)], env=env),
            "python -m fp4patch verify (patched)": lambda: timed([*fp4, "verify", "--site-packages", str(patched)], env=env),
            "fp4patch verify (patched, coloured as on a terminal: FORCE_COLOR=1)": lambda: timed(
                [*fp4_script, "verify", "--site-packages", str(patched)], env={**env, "FORCE_COLOR": "1", "NO_COLOR": ""}
            ),
            "fp4patch verify --format github (patched)": lambda: timed([*fp4_script, "verify", "--format", "github", "--site-packages", str(patched)], env=env),
            "fp4patch verify --json (patched)": lambda: timed([*fp4_script, "verify", "--json", "--site-packages", str(patched)], env=env),
            "fp4patch verify (unpatched)": lambda: timed([*fp4, "verify", "--site-packages", str(pristine)], env=env),
            "fp4patch diff": lambda: timed([*fp4, "diff", "--site-packages", str(pristine)], env=env),
            "fp4patch apply": lambda: (fresh(), timed([*fp4, "apply", "--site-packages", str(scratch)], env=env))[1],
            "fp4patch revert": lambda: (
                fresh(),
                subprocess.run([*fp4, "apply", "--site-packages", str(scratch)], env=env, capture_output=True),
                timed([*fp4, "revert", "--site-packages", str(scratch)], env=env),
            )[2],
            "grep -q (check patched files)": lambda: timed(grep, shell=True),
            "patch --dry-run -p1": lambda: timed(f"patch --dry-run -s -p1 -d {pristine} < {work / 'fp4patch.diff'}", shell=True),
            "patch -p1 (apply)": lambda: (fresh(), timed(f"patch -s -p1 -d {scratch} < {work / 'fp4patch.diff'}", shell=True))[1],
        }
        samples: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.rounds):
            for key, run in variants.items():
                samples[key].append(run())
        fresh()
        rss = peak_rss_mib([*fp4, "apply", "--site-packages", str(scratch)], env)
        target_lines = sum((pristine / t).read_text().count("\n") for t in targets)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    medians = {k: statistics.median(v) for k, v in samples.items()}
    floor = medians["floor: python -c 'import typer, rich'"]
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "flashinfer": VERSION,
        "target_files": targets,
        "target_lines": target_lines,
        "rounds": args.rounds,
        "console_script": str(script) if script.is_file() else None,
        "median_ms": medians,
        "samples_ms": samples,
        "ratio_to_floor": {k: v / floor for k, v in medians.items()},
        "apply_peak_rss_mib": rss,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"flashinfer-python {VERSION}, {len(targets)} files, {target_lines} lines; {result['machine']}; median of {args.rounds}")
    print("| command | median ms | × floor |\n|---|---|---|")
    for key, value in medians.items():
        print(f"| {key} | {value:.0f} | {value / floor:.2f} |")
    print(f"| peak RSS of `fp4patch apply` | {rss:.0f} MiB | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
