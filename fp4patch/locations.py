"""Where fp4patch's own files are: its package directory and the built-in specs."""

from __future__ import annotations

from pathlib import Path

#: fp4patch's own directory in a site-packages: ``<site-packages>/.fp4patch/<distribution>/`` holds
#: the manifest, backups and journal (:mod:`fp4patch.engine.manifest`).
STATE_DIR = ".fp4patch"

#: The directory of the ``fp4patch`` package (its ``*.py`` sources and, in a wheel, ``patches/``).
PACKAGE_DIR = Path(__file__).resolve().parent

#: The probes: scripts fp4patch runs by path in the target interpreter (:mod:`fp4patch.probes`).
PROBES_DIR = PACKAGE_DIR / "probes"


def builtin_specs_dir() -> Path:
    """The specs shipped with fp4patch: ``fp4patch/patches`` in a wheel, ``patches/`` in a checkout."""
    packaged = PACKAGE_DIR / "patches"
    if packaged.is_dir():
        return packaged
    return PACKAGE_DIR.parent / "patches"
