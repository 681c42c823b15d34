#!/usr/bin/env python3
"""Write ``tests/heavy.txt``, the tests ``make test`` leaves to ``make test-heavy``, from a junit XML report.

Usage: ``python scripts/heavy_tests.py REPORT.xml [--threshold SECONDS] [--keep SECONDS]`` after a full run
(``pytest ... -m "not property_long and not eras and not exhaustive and not recipe" --junitxml=REPORT.xml tests``).

A test whose call took ``threshold`` seconds (6) or more is heavy, except where every instance of a parametrized
test is: then its cheapest 0.7.4 instance under ``keep`` seconds (12; else its cheapest under ``keep``) stays in
``make test``, so the quick suite still runs that test once. A hypothesis test that failed and shrank reports
its shrinking time: rerun it green first. Exit status 0; 2 when the report cannot be read.
"""

from __future__ import annotations

import argparse
import collections
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "heavy.txt"
HEADER = """\
# The heavy tests: {threshold:.0f} s or more each on the 2-core development machine ({when}, --durations; the seconds
# order them, they are not targets). tests/conftest.py marks each listed test `heavy`: `make test` leaves them
# out, `make test-heavy` runs them, and CI (.ci/run) runs both. Where every instance of a parametrized test was
# this heavy, its cheapest 0.7.4 instance (under {keep:.0f} s) stays in `make test`.
# One node id per line, then its seconds. Regenerate: python scripts/heavy_tests.py REPORT.xml (see its docstring).
"""


def heavy(durations: dict[str, float], threshold: float, keep: float) -> set[str]:
    """The node ids of ``durations`` (node id -> seconds) that are heavy by the rule of the module docstring."""
    chosen = {n for n, s in durations.items() if s >= threshold}
    by_function = collections.defaultdict(list)
    for n, s in durations.items():
        by_function[n.split("[")[0]].append((s, n))
    for instances in by_function.values():
        if len(instances) > 1 and all(n in chosen for _, n in instances):
            cheap = sorted(i for i in instances if "0.7.4" in i[1] and i[0] < keep) or sorted(i for i in instances if i[0] < keep)
            if cheap:
                chosen.discard(cheap[0][1])
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write tests/heavy.txt from a junit XML report")
    parser.add_argument("report")
    parser.add_argument("--threshold", type=float, default=6.0)
    parser.add_argument("--keep", type=float, default=12.0)
    parser.add_argument("--when", default="measured")
    args = parser.parse_args(argv)
    try:
        root = ET.parse(args.report).getroot()
    except (OSError, ET.ParseError) as exc:
        print(f"heavy_tests: {args.report}: cannot read the report ({exc}); run pytest with --junitxml", file=sys.stderr)
        return 2
    durations = {}
    for case in root.iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        durations[f"{path}::{case.get('name')}"] = float(case.get("time") or 0)
    chosen = heavy(durations, args.threshold, args.keep)
    lines = [HEADER.format(threshold=args.threshold, keep=args.keep, when=args.when)]
    lines += [f"{n}  # {durations[n]:.0f} s" for n in sorted(chosen)]
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}: {len(chosen)} of {len(durations)} tests, {sum(durations[n] for n in chosen):.0f} of {sum(durations.values()):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
