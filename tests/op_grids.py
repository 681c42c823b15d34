"""The product's case grids (``patches/flashinfer-python/grids/<function>.py``) for a release under test.

A test takes the spec target fp4patch would apply to that release (``<function-kebab>-fullgraph``,
loaded with :func:`fp4patch.catalog.spec.load_specs`), and from it the grid's input: the wrapper's ``params`` and
the target's release data (the op source's ``RELEASE`` updated by the target's). The same request is
what ``fp4patch.checks.fake_check.run_fake_check`` sends, so the tests and the product check one grid.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from types import ModuleType

from fp4patch.checks.fake_check import FakeCheckRequest, requests_for
from fp4patch.catalog.spec import Spec, Target, load_specs

from .conftest import REPO, SPECS_DIR

#: the fake check's probe and the kernel oracle, as the product runs them (by path)
PROBE = REPO / "fp4patch" / "probes" / "fake_check_probe.py"
ORACLE = REPO / "fp4patch" / "probes" / "oracle.py"


@cache
def specs() -> dict[str, Spec]:
    return {s.id: s for s in load_specs(SPECS_DIR)}


def spec_id(function: str) -> str:
    return function.replace("_", "-") + "-fullgraph"


def target(function: str, version: str) -> Target:
    """The one patching target of ``function``'s fullgraph spec for ``version`` (AssertionError otherwise)."""
    spec = specs()[spec_id(function)]
    found = [t for t in spec.targets_for(version) if not t.status]
    assert len(found) == 1, f"{spec.id}: {len(found)} patching targets for {version}"
    return found[0]


def request(function: str, version: str) -> FakeCheckRequest:
    """The fake check's request for ``function`` on ``version`` (its grid, params and release data)."""
    (found,) = [r for r in requests_for(specs()[spec_id(function)], target(function, version)) if r.function == function]
    return found


def as_json(req: FakeCheckRequest) -> dict:
    """The request as the probe's JSON takes it."""
    return {"function": req.function, "grid": str(req.grid), "params": list(req.params), "release": req.release}


def grid_module(path: Path) -> ModuleType:
    """A grid module, loaded by path as the probe loads it (:func:`fp4patch.probes.oracle.load_grid`)."""
    from fp4patch.probes.oracle import load_grid

    return load_grid(str(path), f"_test_grid_{path.stem}")


def cases(function: str, version: str) -> list[dict]:
    """``function``'s grid cases for ``version``, as the probe computes them."""
    req = request(function, version)
    return list(grid_module(req.grid).cases(frozenset(req.params), dict(req.release)))
