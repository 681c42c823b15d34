#!/usr/bin/env python3
"""Commands where nothing is to be done, a refusal, and a first apply, against baselines in the same run (``make bench``).

Issue 25 measured, on a loaded 2-core machine, ``status`` on a patched environment at 22-38 s, ``diff`` at 36 s, an
``apply`` that changes nothing at 10-54 s while ``verify`` answered from the recorded verdict in 0.2 s, ``apply`` on a
read-only site-packages at 21 s before it refused, and a first ``apply`` on 0.7.4 at 4.2x the time libcst takes to
parse the files it touches. Targets:

* ``apply``, ``status`` (and ``diff``, ``diff --stat``) on a patched environment within 1.5x of ``verify`` answering
  from the recorded verdict;
* the refusal of ``apply`` on a read-only site-packages before any file is parsed: below 1x of parsing them;
* a first ``apply`` on flashinfer-python 0.7.4 (a pristine copy, fp4patch's op cache warm, as on the second
  environment of a machine) within 2x of parsing, with libcst in a fresh interpreter, the files it writes; the same
  with an empty op cache (rendering every op) is reported beside it.

Each round runs every variant once, each in a fresh process, the order rotated round by round; a variant's ratio is
the median over rounds of its time divided by its baseline's in the same round (drifting load cancels, as in
``import_bench.py``). Times are the child's CPU time (user + system, from ``os.wait4``) and its wall time; the targets
are read on CPU time, which the machine's load (four other developers on two cores) disturbs least. A read-only
site-packages is a copy whose directory mode is 0555; run as root, ``chattr +i`` makes it read-only for root too
(else the refusal variant is left out and said so).

Usage: ``python benchmarks/answer_bench.py [--rounds N] [--out FILE]``; results in
``benchmarks/results/answers.json`` and a Markdown table on stdout. Exit status 1 when a target is missed.
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
PARSE = "import sys, libcst\nfor path in sys.argv[1:]:\n    libcst.parse_module(open(path, 'rb').read())\n"
TARGETS = {"answer": 1.5, "refusal": 1.0, "first apply": 2.0}


def run(command: list[str], env: dict[str, str], ok: tuple[int, ...] = (0,)) -> tuple[float, float]:
    """``command`` in a fresh process: ``(cpu seconds, wall seconds)``, reaped with ``os.wait4``.

    Raises:
        RuntimeError: it exited with a status not in ``ok`` (its stderr's tail in the message).
    """
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode not in ok:
            err.seek(0)
            raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}: {err.read().decode()[-800:]}")
    return usage.ru_utime + usage.ru_stime, wall


def read_only(directory: Path) -> bool:
    """Make ``directory`` refuse new files (mode 0555; for root also ``chattr +i``); whether that holds."""
    directory.chmod(0o555)
    if os.geteuid() == 0:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode != 0:
            directory.chmod(0o755)
            return False
    return True


def writable(directory: Path) -> None:
    if os.geteuid() == 0 and shutil.which("chattr"):
        subprocess.run(["chattr", "-i", str(directory)], capture_output=True)
    directory.chmod(0o755)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "answers.json")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "FP4PATCH_NO_VERDICT")}
    env.update({"NO_COLOR": "1", "PYTHONPATH": str(REPO)})
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "fp4patch")], env=env, check=True)
    script = Path(sys.executable).with_name("fp4patch")
    fp4 = [str(script)] if script.is_file() else [sys.executable, "-m", "fp4patch"]
    work = Path(tempfile.mkdtemp(prefix="fp4patch-answers-"))
    locked = None
    try:
        pristine = unpack(fetch("flashinfer-python", VERSION), work / "pristine", sources_only=True)
        patched = work / "patched"
        shutil.copytree(pristine, patched)
        subprocess.run([*fp4, "apply", "--site-packages", str(patched)], env=env, check=True, capture_output=True)
        manifest = json.loads((patched / ".fp4patch" / "flashinfer-python" / "manifest.json").read_text())
        touched = sorted(manifest["files"])
        locked = work / "read-only"
        shutil.copytree(pristine, locked)
        refusal = read_only(locked)
        scratch = work / "scratch"
        empty_cache = work / "op-cache"

        def first_apply(cache: Path | None) -> tuple[float, float]:
            if scratch.exists():
                shutil.rmtree(scratch)
            shutil.copytree(pristine, scratch)
            if cache is not None:
                shutil.rmtree(cache, ignore_errors=True)
            return run([*fp4, "apply", "--site-packages", str(scratch)], {**env, **({"FP4PATCH_OP_CACHE": str(cache)} if cache else {})})

        site = ["--site-packages", str(patched)]
        variants = {
            "verify, recorded (baseline of the answers)": lambda: run([*fp4, "verify", *site], env),
            "apply, patched": lambda: run([*fp4, "apply", *site], env),
            "status, patched": lambda: run([*fp4, "status", *site], env),
            "diff, patched": lambda: run([*fp4, "diff", *site], env),
            "diff --stat, patched": lambda: run([*fp4, "diff", "--stat", *site], env),
            "libcst parses the files apply writes (baseline of apply)": lambda: run([sys.executable, "-c", PARSE, *(str(pristine / f) for f in touched)], env),
            "apply, first (pristine copy, op cache warm)": lambda: first_apply(None),
            "apply, first (pristine copy, empty op cache)": lambda: first_apply(empty_cache),
        }
        if refusal:
            variants["apply, read-only site-packages (refused)"] = lambda: run([*fp4, "apply", "--site-packages", str(locked)], env, ok=(3,))
        names = list(variants)
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in names}
        first_apply(None)  # the op cache warm, as for every round after
        for round_ in range(args.rounds):
            order = names[round_ % len(names):] + names[: round_ % len(names)]
            for name in order:
                samples[name].append(variants[name]())
    finally:
        if locked is not None and locked.exists():
            writable(locked)
        shutil.rmtree(work, ignore_errors=True)

    answers = "verify, recorded (baseline of the answers)"
    parse = "libcst parses the files apply writes (baseline of apply)"
    baseline = {name: answers if "patched" in name else parse for name in names}
    target = {
        "apply, patched": TARGETS["answer"], "status, patched": TARGETS["answer"], "diff, patched": TARGETS["answer"],
        "diff --stat, patched": TARGETS["answer"], "apply, read-only site-packages (refused)": TARGETS["refusal"],
        "apply, first (pristine copy, op cache warm)": TARGETS["first apply"],
    }
    rows = {}
    for name in names:
        base = baseline[name]
        ratios = [s[0] / b[0] for s, b in zip(samples[name], samples[base])] if name not in (answers, parse) else []
        wall_ratios = [s[1] / b[1] for s, b in zip(samples[name], samples[base])] if ratios else []
        rows[name] = {
            "cpu_s_median": statistics.median(s[0] for s in samples[name]),
            "wall_s_median": statistics.median(s[1] for s in samples[name]),
            "baseline": None if not ratios else base,
            "cpu_ratio": statistics.median(ratios) if ratios else None,
            "cpu_ratio_quartiles": statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else None,
            "wall_ratio": statistics.median(wall_ratios) if wall_ratios else None,
            "target": target.get(name),
            "met": None if name not in target else statistics.median(ratios) <= target[name],
        }
    load = os.getloadavg()
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, load average {load[0]:.1f}",
        "flashinfer": VERSION,
        "files_apply_writes": touched,
        "rounds": args.rounds,
        "refusal_measured": refusal,
        "variants": rows,
        "samples_cpu_wall_s": samples,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"flashinfer-python {VERSION}, apply writes {len(touched)} files; {result['machine']}; {args.rounds} rounds")
    print("| command | CPU s (median) | wall s (median) | CPU × its baseline (median of rounds; quartiles) | target |")
    print("|---|---|---|---|---|")
    for name, row in rows.items():
        ratio = "" if row["cpu_ratio"] is None else f"{row['cpu_ratio']:.2f} ({row['cpu_ratio_quartiles'][0]:.2f}–{row['cpu_ratio_quartiles'][2]:.2f})"
        goal = "" if row["target"] is None else f"≤ {row['target']} {'met' if row['met'] else 'MISSED'}"
        print(f"| {name} | {row['cpu_s_median']:.2f} | {row['wall_s_median']:.2f} | {ratio} | {goal} |")
    if not refusal:
        print("(the read-only refusal was not measured: the copy cannot be made read-only here)")
    return 0 if all(row["met"] is not False for row in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
