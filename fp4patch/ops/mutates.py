"""``MUTATES_ARGS = ...``: the op's ``mutates_args`` (``docs/op-source.md``, MUTATES_ARGS).

Owns what ``MUTATES_ARGS`` means beyond its line in the block (which stays as written, or is
``MUTATES_ARGS = ()`` when absent, :mod:`fp4patch.ops.register`): the names it holds for a release, computed
from constants and ``RELEASE`` (:func:`_mutated_params`), and the parameters the rendered ``op`` therefore
declares without a default (:func:`_required_params`: the mutated ones and every one before the last of them;
torch before 2.13 reads a mutated argument by its position after leaving trailing defaults out).

May import: the standard library, :mod:`fp4patch.ops.source`, :mod:`fp4patch.ops.release` (``RELEASE`` for a
release) and :mod:`fp4patch.ops.splice` (``op``'s spliced signature).
"""

from __future__ import annotations

import ast

from .release import release_data
from .source import CustomOpTarget, Example, OpSourceError, _parse_source
from .splice import _spliced_op_of


def _mutated_params(target: CustomOpTarget) -> tuple[str, ...]:
    """The names the rendered ``MUTATES_ARGS`` holds for ``target``: the op source's expression (a tuple
    literal, or ``tuple(RELEASE["mutates"])``) evaluated with the release's ``RELEASE``; ``()`` when absent.

    Raises:
        OpSourceError: ``MUTATES_ARGS`` is not a tuple of names computed from constants and ``RELEASE``.
    """
    for node in _parse_source(target.source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "MUTATES_ARGS":
            try:
                value = eval(compile(ast.Expression(node.value), target.source_label or "<op source>", "eval"),
                             {"__builtins__": {}, "RELEASE": release_data(target), "tuple": tuple, "list": list})
            except Exception as exc:  # noqa: BLE001 - any failure of the expression is the op source's error
                raise OpSourceError(f"line {node.lineno}: MUTATES_ARGS must be computed from constants and RELEASE ({exc})") from None
            if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
                raise OpSourceError(f"line {node.lineno}: MUTATES_ARGS must be a tuple of parameter names")
            return tuple(value)
    return ()


def _required_params(target: CustomOpTarget, absent: dict[str, str]) -> frozenset[str]:
    """op's parameters up to its last mutated one (``MUTATES_ARGS``), which the rendered ``op`` (the schema's source;
    ``entry`` and ``fake`` keep them) declares without a default: torch before 2.13 hands a custom op's mutation
    bookkeeping (``ADInplaceOrView``) its arguments with trailing ones equal to their default left out, then reads the
    mutated ones by position (``torch/_library/custom_ops.py``, ``adinplaceorview_impl``: ``IndexError`` for
    ``output=None``). A mutated parameter without a default is never left out, nor any before it. Empty for an op
    that mutates nothing, whose rendering is unchanged.

    Args:
        target: the target.
        absent: op's parameters absent in this release (:func:`fp4patch.ops.trim._absent_params`), skipped.

    Raises:
        OpSourceError: as :func:`_mutated_params`.
    """
    mutated = set(_mutated_params(target))
    if not mutated:
        return frozenset()
    op_fn = _spliced_op_of(target)
    positional = [a.arg for a in (*op_fn.args.posonlyargs, *op_fn.args.args) if a.arg not in absent]
    last = max((i for i, name in enumerate(positional) if name in mutated), default=-1)
    return frozenset(positional[: last + 1])


_WRITTEN = '''\
from typing import Optional

import torch

RELEASE = {"mutates": ["out"]}
MUTATES_ARGS = tuple(RELEASE["mutates"])


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS)


def op(input: torch.Tensor, alpha: float = 1.0, out: Optional[torch.Tensor] = None, mode: int = 0) -> None:
    WRAPPER(**OP_PARAMS)


def fake(**OP_PARAMS):
    return None
'''

EXAMPLES = [
    Example(
        name="the mutated parameter and those before it lose their defaults in op only",
        written=_WRITTEN,
        target={"params": ("input", "alpha", "out", "mode")},
        rendered=(
            '''\
    RELEASE = {
        'mutates': ['out'],
    }
    MUTATES_ARGS = tuple(RELEASE["mutates"])
''',
            '''\
    def entry(input, alpha=1.0, out=None, mode=0):
''',
            '''\
    @torch.library.custom_op("fp4patch::quantize_07c6c277", mutates_args=MUTATES_ARGS)
    def op(input: torch.Tensor, alpha: float, out: Optional[torch.Tensor], mode: int = 0) -> None:
''',
        ),
    ),
    Example(
        name="MUTATES_ARGS read from the release's RELEASE",
        written=_WRITTEN,
        target={"params": ("input", "alpha", "out", "mode"), "release": {"mutates": []}},
        rendered=('''\
    def op(input: torch.Tensor, alpha: float = 1.0, out: Optional[torch.Tensor] = None, mode: int = 0) -> None:
''',),
    ),
    Example(
        name="MUTATES_ARGS computed from anything else",
        written=_WRITTEN.replace('tuple(RELEASE["mutates"])', "tuple(mutated_names())"),
        target={"params": ("input", "alpha", "out", "mode")},
        refused="line 6: MUTATES_ARGS must be computed from constants and RELEASE (name 'mutated_names' is not defined)",
    ),
    Example(
        name="MUTATES_ARGS that is not a tuple of names",
        written=_WRITTEN.replace('tuple(RELEASE["mutates"])', "3"),
        target={"params": ("input", "alpha", "out", "mode")},
        refused="line 6: MUTATES_ARGS must be a tuple of parameter names",
    ),
]
