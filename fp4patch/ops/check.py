"""Checks first: whether a target can be rendered, with :mod:`ast` only (``docs/op-source.md``, the order).

Owns the op source's shape (a docstring, imports, ``RELEASE``, ``MUTATES_ARGS``, private ``_helpers`` and
``entry``/``op``/``fake``, nothing else at module level) and :func:`check_op_source`, which runs every
construct's check in the renderer's order: the shape, ``op``'s signature once spliced, ``entry``/``fake``
against it, where each placeholder stands, the helper modules, the target's ``params`` and ``defaults``,
its ``release`` keys. Every refusal of the renderer but ``MUTATES_ARGS``'s and a string's happens here, before
any code is produced; loading specs runs it, so it stays light (no libcst).

May import: the standard library and the construct modules :mod:`fp4patch.ops.source`, ``helpers``, ``splice``,
``params``, ``release`` and ``trim``.
"""

from __future__ import annotations

import ast
from typing import Any

from .helpers import _check_helpers
from .params import _check_placeholders, _check_signatures, _signature
from .release import _check_release_keys, _release_dict
from .source import DATA_NAMES, FUNCTIONS, CustomOpTarget, Example, OpSourceError, _parse_or_refuse
from .splice import _splice_names, _spliced_op
from .trim import _check_release_params


def _shape(tree: ast.Module) -> tuple[dict[str, ast.FunctionDef], dict[str, Any]]:
    """The op source's top-level functions by name, and its ``RELEASE`` (``{}`` when it has none).

    Raises:
        OpSourceError: something else stands at module level, ``RELEASE`` is not a dict literal of constants,
            or ``entry``, ``op`` or ``fake`` is missing.
    """
    functions: dict[str, ast.FunctionDef] = {}
    release: dict[str, Any] = {}
    for index, node in enumerate(tree.body):
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.FunctionDef) and (node.name in FUNCTIONS or node.name.startswith("_")):
            functions[node.name] = node
            continue
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in DATA_NAMES:
                if name == "RELEASE":
                    release = _release_dict(node)
                continue
        raise OpSourceError(
            f"line {node.lineno}: only imports, RELEASE, MUTATES_ARGS, private _helpers and entry/op/fake may stand at module level"
        )
    missing = [name for name in FUNCTIONS if name not in functions]
    if missing:
        raise OpSourceError(f"defines no {', '.join(missing)}(); an op source needs entry, op and fake")
    return functions, release


def check_op_source(target: CustomOpTarget) -> None:
    """Check that ``target`` can be rendered, with :mod:`ast` only.

    Args:
        target: a :class:`~fp4patch.ops.source.CustomOpTarget`.

    Raises:
        OpSourceError: the source does not parse, lacks ``entry``/``op``/``fake``, holds other
            module-level code, ``entry``/``fake`` neither take ``**OP_PARAMS`` nor op's parameters
            and defaults, ``OP_PARAMS``/``OMIT`` stand elsewhere than where they expand, a shared
            helper is missing (module not in ``target.helpers``, name not a function of it) or clashes
            with a function of the source, a release parameter is unknown to the source, an absent
            parameter has no default to bind, a ``defaults`` entry is not an expression or names no
            parameter, a ``release`` key is not in ``RELEASE``, or a ``_shared_params: SPLICE``
            parameter cannot be spliced (see :func:`fp4patch.ops.splice._spliced_op`) or ``SPLICE`` stands elsewhere.
    """
    functions, release = _shape(_parse_or_refuse(target.source))
    names, defaults = _signature(_spliced_op(functions["op"], target.source, target.helpers))
    _check_signatures(functions, names, defaults)
    _check_placeholders(target.source, tuple(names), target.function)
    _check_helpers(target, functions, _splice_names(target.source))
    _check_release_params(target, names, defaults)
    _check_release_keys(target, release)


_OP = '''\


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS)


def op(input: torch.Tensor) -> torch.Tensor:
    return WRAPPER(**OP_PARAMS)


def fake(**OP_PARAMS):
    return input.new_empty(input.shape)
'''

EXAMPLES = [
    Example(
        name="a docstring, imports, data, private helpers and the three functions",
        written='"""An op source."""\nimport torch\n\nRELEASE = {}\nMUTATES_ARGS = ()\n\n\ndef _helper():\n    return 0\n' + _OP,
        plain='''\
"""An op source."""
import torch

RELEASE = {}
MUTATES_ARGS = ()


def _helper():
    return 0


def entry(input):
    return OP(input=input)


def op(input: torch.Tensor) -> torch.Tensor:
    return WRAPPER(input=input)


def fake(input):
    return input.new_empty(input.shape)
''',
    ),
    Example(
        name="other code at module level",
        written='import torch\n\nprint("loaded")\n' + _OP,
        refused="line 3: only imports, RELEASE, MUTATES_ARGS, private _helpers and entry/op/fake may stand at module level",
    ),
    Example(
        name="a public helper",
        written="import torch\n\n\ndef helper():\n    return 0\n" + _OP,
        refused="line 4: only imports, RELEASE, MUTATES_ARGS, private _helpers and entry/op/fake may stand at module level",
    ),
    Example(
        name="a missing function",
        written="import torch" + _OP.split("\n\n\ndef fake")[0] + "\n",
        refused="defines no fake(); an op source needs entry, op and fake",
    ),
    Example(
        name="a source that does not parse",
        written="import torch\n\n\ndef entry(:\n    pass\n",
        refused="line 4: does not parse: invalid syntax",
    ),
]
