"""``p=OMIT`` after ``**OP_PARAMS``: leave ``p`` out of that call (``docs/op-source.md``, OMIT).

Owns what an ``OMIT`` keyword becomes when :mod:`fp4patch.ops.params` expands a call: nothing (``p`` is not
passed), or, in an ``OP(...)`` call, ``p``'s default where the rendered op declares ``p`` without one
(:func:`fp4patch.ops.mutates._required_params`: the value is the release's constant, never the caller's).
Where ``OMIT`` may stand is checked with the other placeholders (:func:`fp4patch.ops.params._check_placeholders`).

May import: the standard library, libcst (inside functions) and :mod:`fp4patch.ops.source`.
"""

from __future__ import annotations

from .source import OMIT_PLACEHOLDER, OP_PLACEHOLDER, Example


def _is_omit(arg) -> bool:
    """``p=OMIT``: a libcst ``Arg`` whose value is the name ``OMIT``."""
    import libcst as cst

    return isinstance(arg.value, cst.Name) and arg.value.value == OMIT_PLACEHOLDER


def _omit_values(defaults: dict[str, str], required: frozenset[str]) -> dict[str, str]:
    """Code an ``OP(..., p=OMIT)`` passes for ``p`` instead of leaving it out: ``p``'s op default (``defaults``,
    by name), for the parameters the rendered op declares without a default (``required``)."""
    return {name: defaults[name] for name in required if name in defaults}


def _omitted(arg, name: str, callee: str, omit_values: dict[str, str]) -> list:
    """What ``name=OMIT`` (``arg``) becomes in the expansion of a call to ``callee``: ``[]`` (left out), or,
    in a call to ``OP`` where ``omit_values`` holds ``name``, ``[name=<that code>]``."""
    import libcst as cst

    if callee == OP_PLACEHOLDER and name in omit_values:
        return [arg.with_changes(value=cst.parse_expression(omit_values[name]))]
    return []


EXAMPLES = [
    Example(
        name="OMIT leaves the parameter out of that call only",
        written='''\
import torch


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS)


def op(input: torch.Tensor, alignment: int = 32, tune_max_num_tokens: int = 8192) -> torch.Tensor:
    return WRAPPER(**OP_PARAMS, tune_max_num_tokens=OMIT)


def fake(**OP_PARAMS):
    return input.new_empty(input.shape)
''',
        plain='''\
import torch


def entry(input, alignment=32, tune_max_num_tokens=8192):
    return OP(input=input, alignment=alignment, tune_max_num_tokens=tune_max_num_tokens)


def op(input: torch.Tensor, alignment: int = 32, tune_max_num_tokens: int = 8192) -> torch.Tensor:
    return WRAPPER(input=input, alignment=alignment)


def fake(input, alignment=32, tune_max_num_tokens=8192):
    return input.new_empty(input.shape)
''',
    ),
    Example(
        name="OMIT in the wrapper's call, rendered for a release",
        written='''\
import torch


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS)


def op(input: torch.Tensor, alignment: int = 32, tune_max_num_tokens: int = 8192) -> torch.Tensor:
    return WRAPPER(**OP_PARAMS, tune_max_num_tokens=OMIT)


def fake(**OP_PARAMS):
    return input.new_empty(input.shape)
''',
        target={"params": ("input", "alignment", "tune_max_num_tokens")},
        rendered=('''\
    def op(input: torch.Tensor, alignment: int = 32, tune_max_num_tokens: int = 8192) -> torch.Tensor:
        _fp4patch_outer = _fp4patch_quantize_thread.inside_op  # the wrapper called below runs its own code
        _fp4patch_quantize_thread.inside_op = True
        try:
            return quantize(input=input, alignment=alignment)
''',),
    ),
    Example(
        name="OMIT in OP(...) passes the default of a parameter the op declares without one (MUTATES_ARGS)",
        written='''\
from typing import Optional

import torch

MUTATES_ARGS = ("workspace",)


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS, tune_max_num_tokens=OMIT)


def op(input: torch.Tensor, tune_max_num_tokens: int = 8192, workspace: Optional[torch.Tensor] = None) -> None:
    WRAPPER(**OP_PARAMS, tune_max_num_tokens=OMIT)


def fake(**OP_PARAMS):
    return None
''',
        target={"params": ("input", "tune_max_num_tokens", "workspace")},
        rendered=(
            '''\
    def entry(input, tune_max_num_tokens=8192, workspace=None):
        return OP(input=input, tune_max_num_tokens=8192, workspace=workspace)
''',
            '''\
            quantize(input=input, workspace=workspace)
''',
        ),
    ),
    Example(
        name="OMIT outside a call's keywords",
        written='''\
import torch


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS)


def op(input: torch.Tensor, alignment: int = 32) -> torch.Tensor:
    return WRAPPER(**OP_PARAMS)


def fake(**OP_PARAMS):
    if alignment is OMIT:
        alignment = 32
    return input.new_empty(input.shape)
''',
        refused="line 13: OMIT stands only in 'def entry(**OP_PARAMS):', 'def fake(**OP_PARAMS):' and calls "
        "'OP(**OP_PARAMS, p=OMIT)' / 'WRAPPER(**OP_PARAMS, ...)'",
    ),
    Example(
        name="OMIT as a positional argument",
        written='''\
import torch


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS)


def op(input: torch.Tensor, alignment: int = 32) -> torch.Tensor:
    return WRAPPER(OMIT, **OP_PARAMS)


def fake(**OP_PARAMS):
    return input.new_empty(input.shape)
''',
        refused="line 9: WRAPPER(**OP_PARAMS, ...) takes no positional argument and no other **mapping",
    ),
]
