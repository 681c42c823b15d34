"""Every wheel release of the catalog, patched and compiled: what users run, whichever release they pin.

For each wheel release (0.5.0 on), on its real sources (``~/.cache/fp4patch/releases``): ``fp4patch apply``
with the default specs, then ``fp4patch verify --trace`` — the trace probe's cases where
``fp4-quantize-fullgraph`` applies, and every function an applied spec covers, called from a compiled function
and handed to ``torch.compile`` directly, its release-dependent arguments from that release's data — must exit
0, and ``fp4patch revert`` must leave every file byte-identical to the wheel's. A regression on a release between
the two ends the quick suite checks (0.6.0, 0.7.4) fails here: the engines pin such releases (SGLang 0.5.23:
0.7.2; vLLM 0.33.0: 0.7.2.post1).

Marked ``releases``: ``make test-releases`` runs it, about a CPU-minute a release; ``RELEASES="0.7.2 0.7.2.post1"``
(the environment's ``FP4PATCH_RELEASES``) runs those only. CI runs the engines' pins and a third of the rest, picked
by the commit (``scripts/ci_releases.py``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from fp4patch.catalog.catalog_file import load_catalog

from .conftest import SPECS_DIR, release_site, run_cli, snapshot

pytestmark = [
    pytest.mark.releases,
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="verify --trace needs torch"),
]

WHEELS = [str(r.version) for r in load_catalog("flashinfer-python", SPECS_DIR).releases if r.archive == "wheel"]
#: ``FP4PATCH_RELEASES`` (``make test-releases RELEASES=...``): the wheel releases to run, space-separated; all when unset.
CHOSEN = os.environ.get("FP4PATCH_RELEASES", "").split()
UNKNOWN = [v for v in CHOSEN if v not in WHEELS]
if UNKNOWN:
    raise pytest.UsageError(f"FP4PATCH_RELEASES names {', '.join(UNKNOWN)}, not a wheel release of the catalog (patches/flashinfer-python/catalog.json)")
RUN = [v for v in WHEELS if v in CHOSEN] if CHOSEN else WHEELS


@pytest.mark.parametrize("version", RUN)
def test_apply_verify_trace_revert(tmp_path: Path, tmp_path_factory, version: str) -> None:
    site = tmp_path / "site-packages"
    shutil.copytree(release_site(version, tmp_path_factory, bytecode=True), site, symlinks=True, copy_function=os.link)
    before = snapshot(site)
    applied = run_cli("apply", "--site-packages", str(site), "--json")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    verified = run_cli("verify", "--trace", "--site-packages", str(site), "--json")
    payload = json.loads(verified.stdout)
    failed = [f"{r['name']}: {r.get('form')}: {r.get('error')} {r.get('root_cause') or ''}" for r in payload.get("trace_functions") or [] if not r["passed"]]
    failed += [f"{c['name']}: {c.get('error')}" for c in payload.get("trace") or [] if not c["passed"]]
    assert verified.returncode == 0 and not failed, f"{version}: " + "\n".join(failed or [verified.stderr])
    reverted = run_cli("revert", "--site-packages", str(site))
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    after = snapshot(site)
    assert after == before, f"{version}: revert left {sorted(k for k in after.keys() | before.keys() if after.get(k) != before.get(k))[:5]}"
