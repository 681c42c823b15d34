"""The target environment: the Python fp4patch patches, read without importing it.

What it owns: finding the target's site-packages and its installed distribution from ``--python`` or
``--site-packages`` (:mod:`.environment`), and the torch it has, against the supported range (:mod:`.torch_support`).

What it may import: :mod:`fp4patch.ops` and the base modules (``docs/architecture.md``).
"""
