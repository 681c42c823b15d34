#!/usr/bin/env python3
"""What a patched FlashInfer costs at import: ``import flashinfer``, patched against pristine (``make bench``).

For each release (default 0.6.0 and 0.7.4, from the release cache of ``fp4patch.catalog.releases``), two
site-packages with the same sources: one pristine, one after ``fp4patch apply`` (the default specs).
Both hold their bytecode, as after ``pip install`` (``compileall``, then ``apply`` recompiles the pyc of
each file it writes). Each round runs ``python -c "import flashinfer"`` once in a fresh process per copy,
the order alternating round by round, and reads from ``os.wait4``:

* CPU time: user + system seconds of the child;
* peak memory: its maximum resident set size (``ru_maxrss``, MiB);
* wall time (seconds), and whether the import left ``torch._dynamo`` in ``sys.modules``.

Reported per release: the median and minimum of each over the rounds; the CPU ratio patched / pristine as
the median of the per-round ratios (``cpu_ratio``: paired, a round's two processes meet the same machine
load, so drifting load cancels), and as the ratio of the medians and of the minimums; patched - pristine
peak memory (medians); and FlashInfer's own import work: the sum of the ``-X importtime`` self times of
the ``flashinfer`` modules (their bodies, torch's import left out), minimum over runs, pristine and
patched. Targets (issue 17): ``cpu_ratio`` <= 1.05, peak memory <= +8 MiB, no
``torch._dynamo`` imported by the patched import. Exit status 1 when a target is missed.

Usage::

    python benchmarks/import_bench.py [--rounds N] [--versions 0.6.0 0.7.4] [--out FILE]
    python benchmarks/import_bench.py --sites PRISTINE PATCHED [--pythonpath EXTRA] [--label NAME] --out FILE

The second form measures two existing site-packages (the GPU machine: ``benchmarks/gpu_run.sh``), with
``EXTRA`` (FlashInfer's dependencies) after each on ``PYTHONPATH``. Results: ``benchmarks/results/import.json``.
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
CHILD = "import sys, flashinfer; print('torch._dynamo' in sys.modules)"
TARGET_RATIO = 1.05
TARGET_MIB = 8.0


def measure(site: Path, extra: str = "") -> dict:
    """One fresh ``import flashinfer`` from ``site``: {"cpu_s", "rss_mib", "wall_s", "dynamo"}, the
    rusage from ``os.wait4`` on the child (reaped here, not by ``subprocess``).

    Raises:
        RuntimeError: the import failed (its stderr's tail in the message).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_", "PYTHONDONTWRITEBYTECODE"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), extra) if p)
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-c", CHILD], cwd=site, env=env, stdout=subprocess.PIPE, stderr=err)
        out = process.stdout.read()
        process.stdout.close()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode:
            err.seek(0)
            raise RuntimeError(f"import flashinfer from {site} exited {process.returncode}: {err.read().decode()[-1500:]}")
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024.0, "wall_s": wall, "dynamo": out.decode().strip() == "True"}


def module_self_us(site: Path, extra: str = "") -> dict[str, int]:
    """``python -X importtime -c "import flashinfer"`` from ``site``: each module's own import time (us)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_", "PYTHONDONTWRITEBYTECODE"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), extra) if p)
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import flashinfer"], cwd=site, env=env, capture_output=True, text=True, check=True)
    out = {}
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            own, _, name = line[len("import time:") :].split("|")
            if own.strip().isdigit():
                out[name.strip()] = int(own)
    return out


def compare(pristine: Path, patched: Path, rounds: int, extra: str = "") -> dict:
    """``rounds`` alternating fresh imports of each copy, after one warm-up import each (page cache, pyc)."""
    for site in (pristine, patched):
        measure(site, extra)
    samples: dict[str, list[dict]] = {"pristine": [], "patched": []}
    for r in range(rounds):
        order = ("pristine", "patched") if r % 2 == 0 else ("patched", "pristine")
        for name in order:
            samples[name].append(measure(pristine if name == "pristine" else patched, extra))
    out: dict = {"rounds": rounds}
    for name, rows in samples.items():
        out[name] = {
            "cpu_s_median": statistics.median(r["cpu_s"] for r in rows),
            "cpu_s_min": min(r["cpu_s"] for r in rows),
            "rss_mib_median": statistics.median(r["rss_mib"] for r in rows),
            "wall_s_median": statistics.median(r["wall_s"] for r in rows),
            "cpu_s": [round(r["cpu_s"], 3) for r in rows],
            "rss_mib": [round(r["rss_mib"], 1) for r in rows],
            "imports_torch_dynamo": any(r["dynamo"] for r in rows),
        }
    p, q = out["pristine"], out["patched"]
    paired = [b["cpu_s"] / a["cpu_s"] for a, b in zip(samples["pristine"], samples["patched"])]
    out["cpu_ratio_of_medians"] = q["cpu_s_median"] / p["cpu_s_median"]
    out["cpu_ratio_of_minimums"] = q["cpu_s_min"] / p["cpu_s_min"]
    out["cpu_ratio"] = out["cpu_ratio_paired_median"] = statistics.median(paired)
    out["cpu_ratio_paired_iqr"] = [sorted(paired)[len(paired) // 4], sorted(paired)[(3 * len(paired)) // 4]]
    out["wall_ratio"] = q["wall_s_median"] / p["wall_s_median"]
    out["rss_delta_mib"] = q["rss_mib_median"] - p["rss_mib_median"]
    # FlashInfer's own import work: the sum of its modules' own times (-X importtime; what a module's
    # body does, not what it imports), per run, minimum over runs: load only adds to it. Summed over
    # the package, since a one-time cost (torch.library.custom_op's first inspect of sys.modules) moves
    # from module to module with the import order.
    own: dict[str, list[int]] = {"pristine": [], "patched": []}
    for r in range(max(3, rounds // 2)):
        for name in ("pristine", "patched") if r % 2 == 0 else ("patched", "pristine"):
            times = module_self_us(pristine if name == "pristine" else patched, extra)
            own[name].append(sum(us for module, us in times.items() if module == "flashinfer" or module.startswith("flashinfer.")))
    out["flashinfer_modules_own_ms_min"] = [min(own["pristine"]) / 1000.0, min(own["patched"]) / 1000.0]
    out["flashinfer_modules_added_ms"] = (min(own["patched"]) - min(own["pristine"])) / 1000.0
    out["meets_targets"] = out["cpu_ratio"] <= TARGET_RATIO and out["rss_delta_mib"] <= TARGET_MIB and not q["imports_torch_dynamo"]
    return out


def prepare(version: str, work: Path) -> tuple[Path, Path]:
    """Pristine and patched site-packages of ``version`` (Python sources, bytecode compiled)."""
    sys.path.insert(0, str(REPO))
    from fp4patch.catalog.releases import fetch, unpack

    pristine = unpack(fetch("flashinfer-python", version), work / f"{version}-pristine", sources_only=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(pristine / "flashinfer")], check=True, capture_output=True)
    patched = work / f"{version}-patched"
    shutil.copytree(pristine, patched)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-m", "fp4patch", "apply", "-q", "--site-packages", str(patched)], env=env, check=True)
    return pristine, patched


def table(results: dict) -> str:
    lines = [
        "| release | rounds | CPU s pristine → patched (median) | CPU ratio: paired median (of medians, of minimums) | FlashInfer's own import work, added ms (min) | peak MiB pristine → patched | Δ MiB | torch._dynamo imported |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, r in results["releases"].items():
        p, q = r["pristine"], r["patched"]
        lines.append(
            f"| {label} | {r['rounds']} | {p['cpu_s_median']:.2f} → {q['cpu_s_median']:.2f} | {r['cpu_ratio']:.3f} ({r['cpu_ratio_of_medians']:.3f}, {r['cpu_ratio_of_minimums']:.3f}) "
            f"| {r['flashinfer_modules_added_ms']:+.1f} of {r['flashinfer_modules_own_ms_min'][0]:.0f} "
            f"| {p['rss_mib_median']:.1f} → {q['rss_mib_median']:.1f} | {r['rss_delta_mib']:+.1f} | {'yes' if q['imports_torch_dynamo'] else 'no'} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--versions", nargs="+", default=["0.6.0", "0.7.4"])
    parser.add_argument("--sites", nargs=2, type=Path, metavar=("PRISTINE", "PATCHED"))
    parser.add_argument("--pythonpath", default="", help="with --sites: FlashInfer's dependencies, after each site on PYTHONPATH")
    parser.add_argument("--label", default="", help="with --sites: the release measured (default: read from the pristine site)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "import.json")
    args = parser.parse_args()

    import torch

    results = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "command": f'python -c "{CHILD}"',
        "targets": {"cpu_ratio_max": TARGET_RATIO, "rss_delta_mib_max": TARGET_MIB},
        "releases": {},
    }
    if args.sites:
        label = args.label or next((p.name[len("flashinfer_python-") : -len(".dist-info")] for p in args.sites[0].glob("flashinfer_python-*.dist-info")), "?")
        results["releases"][label] = compare(*args.sites, args.rounds, args.pythonpath)
    else:
        work = Path(tempfile.mkdtemp(prefix="fp4patch-import-bench-"))
        try:
            for version in args.versions:
                results["releases"][version] = compare(*prepare(version, work), args.rounds)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    results["load_average_at_end"] = round(os.getloadavg()[0], 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    print(f"written: {args.out}")
    return 0 if all(r["meets_targets"] for r in results["releases"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
