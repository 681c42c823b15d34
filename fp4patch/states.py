"""The states a spec (or one of its targets) is reported in by ``status`` and ``verify``.

Kept apart from :mod:`fp4patch.engine` so that the recorded-verdict fast path
(:mod:`fp4patch.verdict`) can name them without importing the engine.
"""

from __future__ import annotations

APPLIED, APPLICABLE, DRIFTED = "applied", "applicable", "drifted"
NOT_TARGETED, NOT_NEEDED, UNSUPPORTED = "not-targeted", "not-needed", "unsupported"
OBSOLETE = "obsolete"
#: States in which a spec needs nothing more on this release.
SATISFIED = frozenset({APPLIED, NOT_NEEDED, OBSOLETE})
