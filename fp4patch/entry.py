"""Kept for the old import path: the console script is :mod:`fp4patch.cli.entry` (``main``, the fast path answering
from the recorded verdict, its parsers); every public name of it is offered here."""

from __future__ import annotations

from .cli.entry import (
    FLAGS,
    OTHER_COMMANDS,
    VALUE_OPTIONS,
    CommandArguments,
    VerifyArguments,
    command_recorded,
    main,
    parse_command,
    parse_verify,
    verify_recorded,
)

__all__ = [
    "FLAGS", "OTHER_COMMANDS", "VALUE_OPTIONS", "CommandArguments", "VerifyArguments", "command_recorded", "main", "parse_command",
    "parse_verify", "verify_recorded",
]
