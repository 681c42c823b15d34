#!/usr/bin/env python3
"""Rewrite the ``after`` of every applied ``[[case]]`` of a spec from its ``before`` and the spec's operations.

Usage: ``python scripts/regen_case_after.py SPEC_ID [SPEC_ID ...]`` (run from the repository root, with
fp4patch importable). For each case with ``expect = "applied"``, the operations of the spec's targets for
the case's version are applied to ``before`` (as ``tests/test_spec_cases.py`` does) and the result
replaces the case's ``after`` text in the spec file; other cases and the rest of the file are left as
they are. Review the diff: an ``after`` is a snapshot of what lands in site-packages.

Exit status: 0 (each case is reported as rewritten or unchanged), 1 when an ``after`` cannot be
located in the file or the new text holds ``'''``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import libcst as cst

from fp4patch.catalog.spec import load_specs

SPECS_DIR = Path(__file__).resolve().parent.parent / "patches"


def regenerate(spec_id: str) -> int:
    """Rewrite ``spec_id``'s applied cases; 0 on success, 1 when a case cannot be rewritten."""
    spec = next((s for s in load_specs(SPECS_DIR) if s.id == spec_id), None)
    if spec is None:
        print(f"regen_case_after: {spec_id}: no such spec in {SPECS_DIR}", file=sys.stderr)
        return 1
    text = spec.path.read_text()
    for case in spec.cases:
        if case.expect != "applied":
            continue
        module = cst.parse_module(case.before)
        for target in spec.targets_for(case.version):
            for operation in [] if target.status else target.operations:
                module = operation.apply(module)
        new = module.code
        if new == case.after:
            print(f"unchanged: {case.name}")
            continue
        if "'''" in new:
            print(f"regen_case_after: {case.name}: the new 'after' holds ''' and cannot be written as a literal string", file=sys.stderr)
            return 1
        for prefix in ("after = '''", "after = '''\n"):
            old_block = prefix + case.after + "'''"
            if text.count(old_block) == 1:
                text = text.replace(old_block, prefix + new + "'''")
                break
        else:
            print(f"regen_case_after: {case.name}: its 'after' is not found exactly once in {spec.path}", file=sys.stderr)
            return 1
        print(f"rewritten: {case.name}")
    spec.path.write_text(text)
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        sys.exit(2)
    sys.exit(max(regenerate(spec_id) for spec_id in sys.argv[1:]))
