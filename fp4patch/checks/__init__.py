"""The checks: fp4patch's claims tested in the target interpreter.

What it owns: running the probes of :mod:`fp4patch.probes` as child processes of the target's Python and reading
their answers: ``verify --trace`` and ``scan`` (:mod:`.trace`), the fake check of every op against the wrapper it
replaces (:mod:`.fake_check`), and the CPU check of a release fp4patch was not verified on (:mod:`.cpu_check`,
on values handed to it: it never writes site-packages; the engine applies the copy it checks).

What it may import: :mod:`fp4patch.catalog`, :mod:`fp4patch.probes` (by path, as scripts, and :mod:`oracle`'s
grid loader), :mod:`fp4patch.target`, :mod:`fp4patch.ops` and the base modules (``docs/architecture.md``).
"""
