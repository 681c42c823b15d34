"""Run the before/after cases that each spec in patches/ carries (Fixit's VALID/INVALID style).

A case names a version; the operations of the spec's targets for that version run on the
case's ``before`` module. ``expect = "applied"``: the result must equal ``after`` exactly,
applying again must change nothing, and every operation must then report ``applied``.
``expect = "drifted"``: some operation must report ``drifted``.
"""

from __future__ import annotations

import libcst as cst
import pytest

from fp4patch.codemods import OpState
from fp4patch.catalog.spec import Case, Spec, load_specs

from .conftest import SPECS_DIR

SPECS = load_specs(SPECS_DIR)
CASES = [pytest.param(spec, case, id=f"{spec.id}::{case.name}") for spec in SPECS for case in spec.cases]


def operations(spec: Spec, case: Case):
    targets = [t for t in spec.targets_for(case.version) if not t.status]
    assert targets, f"{spec.path}:{case.line}: case version {case.version} matches no patching target"
    return [op for t in targets for op in t.operations]


def test_every_spec_has_cases() -> None:
    for spec in SPECS:
        applied = [c for c in spec.cases if c.expect == "applied"]
        if all(t.status for t in spec.targets):  # declarations only (e2m1-and-ufp8sf-scale-to-float-fullgraph): nothing to apply
            assert not spec.cases, f"{spec.path}: a spec that only declares has no case to run"
            continue
        assert applied, f"{spec.path}: a spec needs at least one before/after case"


@pytest.mark.parametrize(("spec", "case"), CASES)
def test_case(spec: Spec, case: Case) -> None:
    module = cst.parse_module(case.before)
    ops = operations(spec, case)
    states = [op.check(module).state for op in ops]
    if case.expect == "drifted":
        assert OpState.DRIFTED in states, f"{spec.path}:{case.line}: expected drift, got {states}"
        return
    assert OpState.DRIFTED not in states, f"{spec.path}:{case.line}: " + "; ".join(op.check(module).detail for op in ops)
    for op in ops:
        module = op.apply(module)
    assert module.code == case.after, f"{spec.path}:{case.line}: result differs from 'after'"
    for op in ops:
        assert op.check(module).state is OpState.APPLIED, f"{spec.path}:{case.line}: {op.describe()} not applied after apply"
        assert op.apply(module).code == module.code, f"{spec.path}:{case.line}: {op.describe()} is not idempotent"
    compile(module.code, f"{spec.id}:{case.name}", "exec")
