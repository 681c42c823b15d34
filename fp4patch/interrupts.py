"""Ctrl-C (SIGINT) and fp4patch's writes: never half-written, always said.

``apply`` and ``revert`` write through a journal (:mod:`fp4patch.manifest`): once the journal is on
disk, a killed run is finished by the next one. An interrupt that arrives while the journal is
being carried out is held until every file of it is written (:func:`held`), then raised; the
command line (:mod:`fp4patch.cli`, :mod:`fp4patch.entry`) turns it into one line saying what state
the files are in (:func:`message`) and exit status 130 (128 + SIGINT, as shells report it).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

EXIT_INTERRUPTED = 130
#: What this process has done to installed files: ``nothing`` yet, ``writing`` (a journal being
#: carried out), ``written`` (every file of the last journal written).
phase = "nothing"


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Carry out the block with SIGINT held: an interrupt during it is raised as
    :class:`KeyboardInterrupt` when it ends (after its writes), not in the middle. Sets
    :data:`phase`. Outside the main thread (where no handler can be set) the block runs as is."""
    global phase
    if threading.current_thread() is not threading.main_thread():
        phase = "writing"
        yield
        phase = "written"
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: caught.append(number))
    phase = "writing"
    try:
        yield
        phase = "written"
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def settle() -> None:
    """After an interrupt has been reported: ignore any further SIGINT while the process exits (a
    second Ctrl-C must not turn the reported exit status into a traceback or a death by signal)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def message(command: str = "") -> str:
    """One line for an interrupt, by :data:`phase`: what state the installed files are in."""
    what = f"`fp4patch {command}`" if command else "fp4patch"
    if phase == "written":
        return (f"interrupted (Ctrl-C); {what} had written every file of its journal first, so the operation is complete "
                "and nothing is half-written (`fp4patch verify` checks it)")
    if phase == "writing":
        return (f"interrupted (Ctrl-C) while {what} wrote its journal; the next `fp4patch apply` or `fp4patch revert` "
                "finishes it (each file is either original or fully patched)")
    return f"interrupted (Ctrl-C) before {what} wrote anything; no file changed"
