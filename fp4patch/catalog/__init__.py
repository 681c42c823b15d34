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

from typing import Any


def __getattr__(name: str) -> Any:
    """A name of :mod:`fp4patch.catalog.catalog_file` (``load_catalog``, ``Catalog``, ...), imported on first use
    (PEP 562).

    Raises:
        AttributeError: a name that module does not define.
    """
    import importlib

    if name == "__all__":  # ``from fp4patch.catalog import *``: what the single-file module offered
        module = importlib.import_module(".catalog_file", __name__)
        return [n for n, v in vars(module).items() if not n.startswith("_") and n != "annotations" and not isinstance(v, type(importlib))]
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(".catalog_file", __name__), name)
