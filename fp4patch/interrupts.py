"""Ctrl-C (SIGINT) and SIGTERM and fp4patch's writes: never half-written, always said.

``apply`` and ``revert`` write through a journal (:mod:`fp4patch.engine.manifest`): once the journal is on
disk, a killed run is finished by the next one. An interrupt that arrives while the journal is
being carried out is held until every file of it is written (:func:`held`), then raised; the
command line (:mod:`fp4patch.cli`, :mod:`fp4patch.cli.entry`) turns it into one line saying what state
the files are in (:func:`message`) and exit status 128 + the signal's number, as shells report it:
130 for SIGINT, 143 for SIGTERM.

SIGTERM is what ``docker build`` cancellation, ``docker stop``, CI timeouts and ``timeout(1)`` send.
Its default action ends the process where it stands (a journal and a ``*.fp4patch-tmp`` file left
for the next run); :func:`on_terminate` makes it raise :class:`Terminated` instead, which the places that
handle Ctrl-C handle the same way (:data:`INTERRUPTS`). It is not a :class:`KeyboardInterrupt`: typer turns one
that escapes a command's parsing into a silent exit 130; the console script reports both (:data:`reported`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM
#: What this process has done to installed files: ``nothing`` yet, ``writing`` (a journal being
#: carried out), ``written`` (every file of the last journal written).
phase = "nothing"
#: Whether the interrupt's line was printed already (by the command's own handler).
reported = False


class Terminated(BaseException):
    """SIGTERM, raised where the process stands (or, during the write phase, when the journal is done)."""


#: What ``except`` catches for "the user or the system stopped fp4patch".
INTERRUPTS = (KeyboardInterrupt, Terminated)


def _raise_terminated(number, frame) -> None:
    raise Terminated


def on_terminate() -> None:
    """Make SIGTERM raise :class:`Terminated` in the main thread (a no-op elsewhere, and where SIGTERM is
    ignored: a parent that ignores it means it). Call it first in the console script."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, _raise_terminated)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Carry out the block with SIGINT and SIGTERM held: one that arrives during it is raised as
    :class:`KeyboardInterrupt` (:class:`Terminated` for SIGTERM) when it ends (after its writes), not in
    the middle. Sets :data:`phase`. Outside the main thread (where no handler can be set) the block runs as is."""
    global phase
    if threading.current_thread() is not threading.main_thread():
        phase = "writing"
        yield
        phase = "written"
        return
    caught: list[int] = []
    numbers = (signal.SIGINT, signal.SIGTERM)
    previous = {n: signal.signal(n, lambda number, frame: caught.append(number)) for n in numbers}
    phase = "writing"
    try:
        yield
        phase = "written"
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if signal.SIGTERM in caught:
        raise Terminated
    if caught:
        raise KeyboardInterrupt


def settle() -> None:
    """After an interrupt has been reported: ignore any further SIGINT or SIGTERM while the process exits
    (a second one must not turn the reported exit status into a traceback or a death by signal)."""
    global reported
    reported = True
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def exit_code(interrupt: BaseException) -> int:
    """128 + the signal's number: 143 for :class:`Terminated` (SIGTERM), 130 for Ctrl-C."""
    return EXIT_TERMINATED if isinstance(interrupt, Terminated) else EXIT_INTERRUPTED


def message(command: str = "", interrupt: BaseException | None = None) -> str:
    """One line for an interrupt (``interrupt``: the :class:`KeyboardInterrupt` or :class:`Terminated` raised),
    by :data:`phase`: what state the installed files are in."""
    what = f"`fp4patch {command}`" if command else "fp4patch"
    how = "terminated (SIGTERM)" if isinstance(interrupt, Terminated) else "interrupted (Ctrl-C)"
    if phase == "written":
        return (f"{how}; {what} had written every file of its journal first, so the operation is complete "
                "and nothing is half-written (`fp4patch verify` checks it)")
    if phase == "writing":
        return (f"{how} while {what} wrote its journal; the next `fp4patch apply` or `fp4patch revert` "
                "finishes it (each file is either original or fully patched)")
    return f"{how} before {what} wrote anything; no file changed"
