"""The fp4patch commands a message advises, worded to act on the same environment with the same specs.

:class:`Advice` is a value: the options that named the environment (``--python P`` or ``--site-packages D``)
and the specs (``--specs-dir D``) as the command was given them. The parts that word a message with a command
in it (:mod:`fp4patch.engine.selection`, :mod:`fp4patch.engine.plan`, :mod:`fp4patch.engine.recovery`, :mod:`fp4patch.engine.leftovers`)
take it from the engine (:attr:`fp4patch.engine.Engine.advice`) rather than a way to call back into the engine.
Imports nothing of fp4patch.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Advice:
    """The options a command was given that an advised command repeats.

    Attributes:
        environment_options: ``("--python", P)`` or ``("--site-packages", D)``; ``()`` for the running interpreter.
        specs_options: ``("--specs-dir", D)``; ``()`` for the built-in specs.
    """

    environment_options: tuple[str, ...] = ()
    specs_options: tuple[str, ...] = ()

    def command(self, subcommand: str, *words: str) -> str:
        """``fp4patch <subcommand> <environment options> <specs options> <words>``, shell-quoted
        (:func:`shlex.join`): a command a message advises, acting on this environment with these
        specs (``clean`` reads no specs, so it gets no ``--specs-dir``)."""
        specs = self.specs_options if subcommand != "clean" else ()
        return shlex.join(["fp4patch", subcommand, *self.environment_options, *specs, *words])
