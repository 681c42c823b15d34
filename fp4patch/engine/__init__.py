"""The engine: one command (status, apply, verify, revert, clean) on one installed distribution.

What it owns: everything that touches site-packages. The coordinator (:mod:`.coordinator`, :class:`Engine`) orders
the parts: which specs take part (:mod:`.selection`), the installed files read once (:mod:`.sources`), the state
of each spec (:mod:`.report`), the commands a message advises (:mod:`.advice`), new bytes in memory and the
preflight (:mod:`.plan`), the journal of writes (:mod:`.journal`) and its recovery after a killed run
(:mod:`.recovery`), the one-writer lock (:mod:`.lock`), fp4patch's record in ``.fp4patch/`` (:mod:`.manifest`,
:mod:`.set_stamp`, :mod:`.leftovers`), the installer's RECORD (:mod:`.install_record`), bytecode
(:mod:`.bytecode`) and the write primitives (:mod:`.files`): no module outside this package and :mod:`fp4patch.tools` writes files.

What it may import: :mod:`fp4patch.checks`, :mod:`fp4patch.catalog`, :mod:`fp4patch.target`, :mod:`fp4patch.ops`,
:mod:`fp4patch.codemods` and the base modules (``docs/architecture.md``, kept true by
``make lint``). Nothing below imports it.
"""
