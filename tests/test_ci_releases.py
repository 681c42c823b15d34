"""scripts/ci_releases.py: the wheel releases one CI run traces (the engines' pins and one shard of the rest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fp4patch.catalog.catalog_file import load_catalog

from .conftest import SPECS_DIR

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "ci_releases.py"
WHEELS = [str(r.version) for r in load_catalog("flashinfer-python", SPECS_DIR).releases if r.archive == "wheel"]


def picked(*args: str) -> list[str]:
    """What the script prints for ``args``, run in-process (its ``main``)."""
    import contextlib
    import io

    sys.path.insert(0, str(REPO / "scripts"))
    import ci_releases

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ci_releases.main(list(args)) == 0
    return out.getvalue().split()


def test_the_shards_cover_every_wheel_release_and_each_holds_the_engines_pins() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    from torch_matrix import ENGINE_PINS

    pins = {flashinfer for flashinfer, _torch in ENGINE_PINS.values()}
    commits = subprocess.run(["git", "-C", str(REPO), "rev-list", "--max-count=24", "HEAD"], capture_output=True, text=True, check=True).stdout.split()
    runs = [picked("--commit", c) for c in commits]
    assert runs, "no git history to pick shards from"
    covered = set().union(*runs)
    for run in runs:
        assert pins <= set(run), run
        assert set(run) <= set(WHEELS) and run == [v for v in WHEELS if v in run], run  # catalog order, no strays
        assert len(run) <= len(WHEELS) // 3 + 1 + len(pins), len(run)
    if len(commits) >= 20:  # 20 hashes reach all three shards (p > 0.999)
        assert covered == set(WHEELS), sorted(set(WHEELS) - covered)


def test_one_commit_always_traces_the_same_releases_and_the_script_runs_as_ci_calls_it() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0 and done.stdout.split() == picked("--commit", "HEAD") == picked(), done.stderr
