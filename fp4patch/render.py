"""Kept for the old import path: the output of the commands is :mod:`fp4patch.cli.render` (terminal text, JSON,
GitHub annotations). Every name it offers is offered here (``from fp4patch.render import wrap``), ``out`` and ``err``
(the rich consoles, made on first use) included."""

from __future__ import annotations

from typing import Any

from .cli import render as _render

__all__ = list(_render.__all__)


def __getattr__(name: str) -> Any:
    """The attribute ``name`` of :mod:`fp4patch.cli.render` (PEP 562).

    Raises:
        AttributeError: a name :mod:`fp4patch.cli.render` does not offer.
    """
    return getattr(_render, name)
