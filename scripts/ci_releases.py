#!/usr/bin/env python3
"""The wheel releases CI traces after ``apply`` (``make test-releases RELEASES=...`` in ``.ci/run``).

Usage::

    python scripts/ci_releases.py [--shards N] [--commit REF]

Prints, space-separated in catalog order, the wheel releases of the catalog
(``patches/flashinfer-python/catalog.json``) that one CI run applies, traces (nested and direct) and reverts
(``tests/test_every_release.py``):

- **the engines' pins** (:data:`torch_matrix.ENGINE_PINS`: SGLang 0.5.23's 0.7.2, vLLM 0.33.0's 0.7.2.post1), every run;
- **one shard of the rest**: the wheels are dealt round-robin into ``N`` shards (default 3) and the commit's hash
  (``git rev-parse REF``, default ``HEAD``) picks one: over commits each release is traced in about every third
  run, and a re-run of one commit traces the same releases. Without git history (an exported tree) shard 0.

The whole list, every release, is ``make test-releases`` without ``RELEASES`` (about a CPU-minute a release; CI's
90 minutes do not hold it beside the rest), and ``make compat`` traces every release too and records it in the
catalog's evidence: ``tests/test_evidence_traced.py`` fails CI whenever an op, a spec's release data or a probe
changed and ``make compat`` has not traced every release again. The shard re-traces a third of them on every run.

Exit status: 0; 2 when the catalog cannot be read (one line on stderr says which).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))

from torch_matrix import ENGINE_PINS


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/ci_releases.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--commit", default="HEAD")
    args = parser.parse_args(argv)
    from fp4patch.catalog.catalog_file import load_catalog

    try:
        wheels = [str(r.version) for r in load_catalog("flashinfer-python", REPO / "patches").releases if r.archive == "wheel"]
    except (OSError, ValueError) as exc:
        print(f"scripts/ci_releases.py: cannot read the catalog in {REPO / 'patches'}: {exc}", file=sys.stderr)
        return 2
    try:
        shard = int(_git("rev-parse", args.commit).strip(), 16) % max(args.shards, 1)
    except (OSError, subprocess.CalledProcessError, ValueError):
        shard = 0
    pins = {flashinfer for flashinfer, _torch in ENGINE_PINS.values()}
    picked = [v for i, v in enumerate(wheels) if v in pins or i % max(args.shards, 1) == shard]
    print(" ".join(picked))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
