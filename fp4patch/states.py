"""The states a spec (or one of its targets) is reported in by ``status`` and ``verify``.

A base module: the engine reports them, the CLI's renderers and the tools read them.
"""

from __future__ import annotations

APPLIED, APPLICABLE, DRIFTED = "applied", "applicable", "drifted"
NOT_TARGETED, NOT_NEEDED, UNSUPPORTED = "not-targeted", "not-needed", "unsupported"
OBSOLETE = "obsolete"
#: A release the catalog does not list whose code differs from every release the spec was verified
#: on, with the same signature: ``apply`` checks it on CPU before patching (:mod:`fp4patch.catalog.evidence`).
NEEDS_CHECK = "needs-check"
#: States in which a spec needs nothing more on this release.
SATISFIED = frozenset({APPLIED, NOT_NEEDED, OBSOLETE})


def accepted(state: str, required: bool) -> bool:
    """Whether a spec in ``state`` lets ``apply``/``verify`` succeed (the policy for partly covered
    releases, the README's exit codes): satisfied, or declared ``unsupported`` on this release while
    not ``required``. A spec is required when it was named with ``--spec`` or ``--strict`` is given;
    a default spec declared unsupported is then left out, its reason listed, and the others apply."""
    return state in SATISFIED or (state == UNSUPPORTED and not required)
