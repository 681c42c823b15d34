"""The catalog: what fp4patch knows of FlashInfer's releases, as data.

What it owns: the spec files and their checks (:mod:`.spec`), the catalog of releases and the evidence recorded for
each (:mod:`.catalog_file`, ``patches/<distribution>/catalog.toml``), which target a release takes and why
(:mod:`.evidence`), the fingerprints of a release's Python and C++ code (:mod:`.fingerprint`, :mod:`.native`),
and fetching and unpacking releases from the registry (:mod:`.releases`).

What it may import: :mod:`fp4patch.target`, :mod:`fp4patch.ops`, :mod:`fp4patch.codemods` and the base modules
(``docs/architecture.md``). It never writes site-packages.

Importing this package imports none of its modules: the names of :mod:`.catalog_file` (``load_catalog``,
``Catalog``, ``Release``, ``Evidence``, ``evidence_text``, ...) are loaded on first use, so
``from fp4patch.catalog import load_catalog`` keeps working.
"""

from __future__ import annotations

from ..old_paths import names_of

#: the names of :mod:`.catalog_file` (``load_catalog``, ``Catalog``, ...), imported on first use (PEP 562)
__getattr__ = names_of(__name__, ".catalog_file")
