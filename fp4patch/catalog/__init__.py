"""The catalog: what fp4patch knows of FlashInfer's releases, as data.

What it owns: the spec files and their checks (:mod:`.spec`), the catalog of releases and the evidence recorded for
each (:mod:`.catalog_file`, ``patches/<distribution>/catalog.json``), which target a release takes and why
(:mod:`.evidence`), the fingerprints of a release's Python and C++ code (:mod:`.fingerprint`, :mod:`.native`),
and fetching and unpacking releases from the registry (:mod:`.releases`).

What it may import: :mod:`fp4patch.target`, :mod:`fp4patch.ops`, :mod:`fp4patch.codemods` and the base modules
(``docs/architecture.md``). It never writes site-packages.
"""
