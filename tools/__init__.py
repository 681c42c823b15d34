"""Maintainer tools, kept out of the wheel users install: ``make compat`` (``python -m tools.compat``), the sweep of
every release that writes the catalog's evidence and docs/compatibility.md (:mod:`.compat`), its Markdown report
(:mod:`.compat_report`) and the replay of each release as if unseen (:mod:`.replay`). Run from the repository root.
"""
