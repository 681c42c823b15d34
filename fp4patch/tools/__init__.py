"""The tools: commands that build fp4patch's own data rather than patch an install.

What it owns: ``verify --against`` (a release fetched from the registry into a temporary site-packages,
:mod:`.against`) and ``fp4patch new`` (writes spec files, :mod:`.scaffold`). They write in the specs folder, never
in a user's site-packages except through the engine. ``make compat``'s sweep is a maintainer tool outside the
package (``tools/`` at the repository root).

What it may import: :mod:`fp4patch.engine`, :mod:`fp4patch.checks`, :mod:`fp4patch.catalog`,
:mod:`fp4patch.target`, :mod:`fp4patch.ops`, :mod:`fp4patch.codemods` and the base modules
(``docs/architecture.md``).
"""
