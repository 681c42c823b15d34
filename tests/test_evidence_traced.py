"""The catalog's evidence says what each release was traced with, and that is still what fp4patch renders and runs.

``make compat`` applies the default specs to every wheel release, compiles every function they cover (the trace
probe's cases, and the scan's call of each function called from a compiled function and handed directly, its
release-dependent arguments from the release data) and records, per spec and release, the rendered ops'
identities and the digest of what the probes compiled (``traced``; ``fp4patch/checks/trace.py``, ``probe_digest``).
A change to an op source, a spec's release data, the renderer or the probes' calls changes one of them: this
test then names every release whose evidence is stale, until ``make compat`` has traced it again. No wheel is
needed: both are computed from the specs and the probes, for each release the evidence lists.
"""

from __future__ import annotations

import importlib.util

import pytest

from fp4patch.catalog.catalog_file import load_catalog
from fp4patch.catalog.spec import load_specs
from fp4patch.checks.trace import listed_release_data, probe_digest

from .conftest import SPECS_DIR

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the probes' argument pools name torch dtypes")

CATALOG = load_catalog("flashinfer-python", SPECS_DIR)
SPECS = [s for s in load_specs(SPECS_DIR) if s.distribution == CATALOG.distribution]
DEFAULT = {s.id: s for s in SPECS if s.default}
WHEELS = {r.version for r in CATALOG.releases if r.archive == "wheel"}


def _stale(spec_id: str) -> list[str]:
    """One line per evidence entry of ``spec_id`` whose ``traced`` is missing or no longer current."""
    spec = DEFAULT[spec_id]
    found = []
    for entry in CATALOG.evidence.get(spec_id, []):
        wheels = [v for v in entry.releases if v in WHEELS]
        if not wheels:
            continue  # sdists are not traced
        targets = [t for t in spec.targets if str(t.versions) == entry.target]
        where = f"{spec_id} {entry.target} ({', '.join(str(v) for v in wheels)})"
        if not targets:
            found.append(f"{where}: the spec has no such target any more")
            continue
        if entry.traced is None:
            found.append(f"{where}: never traced")
            continue
        ops = [op.op_name for op in targets[0].custom_ops]
        if entry.traced["ops"] != ops:
            found.append(f"{where}: traced with {entry.traced['ops']}, renders {ops}")
        for version in wheels:
            digest = probe_digest(spec_id, listed_release_data(SPECS, version))
            if entry.traced["probe"] != digest:
                found.append(f"{where}: {version} traced with probe inputs {entry.traced['probe']}, now {digest}")
                break
    return found


@pytest.mark.parametrize("spec_id", sorted(DEFAULT))
def test_every_release_was_traced_with_the_ops_and_inputs_of_today(spec_id: str) -> None:
    stale = _stale(spec_id)
    assert not stale, "evidence is stale, run make compat:\n" + "\n".join(stale)


def test_a_changed_op_makes_the_evidence_stale(monkeypatch) -> None:
    """The check can fail: another release data (a backend list) changes the probe digest of the releases it
    covers, and the rendered op's name, which the recorded evidence then does not match."""
    spec_id = "mxfp8-grouped-quantize-fullgraph"
    version = max(v for e in CATALOG.evidence[spec_id] for v in e.releases if v in WHEELS)
    release = listed_release_data(SPECS, version)
    before = probe_digest(spec_id, release)
    changed = {**release, spec_id: {**release[spec_id], "backends": ["cuda"]}}
    assert probe_digest(spec_id, changed) != before
