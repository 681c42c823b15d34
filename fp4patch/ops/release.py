"""``RELEASE = {...}``: data that differs between releases (``docs/op-source.md``, RELEASE).

Owns the op source's ``RELEASE`` dict literal (its defaults) and a target's ``[target.operation.release]``
over it: reading it (:func:`_release_dict`), the merged dict a fake reads and a case grid is given
(:func:`release_data`), its keys' check (:func:`_check_release_keys`), and the statement the block holds,
one key a line (:func:`_release_statement`).

May import: the standard library, libcst (inside functions) and :mod:`fp4patch.ops.source`.
"""

from __future__ import annotations

import ast
from typing import Any

from .source import CustomOpTarget, Example, OpSourceError, _parse_or_refuse


def _release_dict(node: ast.stmt) -> dict[str, Any]:
    """The value of ``RELEASE = {...}`` (``node``, an :class:`ast.Assign`).

    Raises:
        OpSourceError: not a dict literal of constants, or a key is not a string.
    """
    try:
        value = ast.literal_eval(node.value)  # type: ignore[attr-defined]
    except ValueError:
        raise OpSourceError("RELEASE must be a dict literal of constants") from None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise OpSourceError("RELEASE must be a dict literal with string keys")
    return value


def release_data(target: CustomOpTarget) -> dict[str, Any]:
    """The ``RELEASE`` dict the block rendered for ``target`` holds: the op source's own ``RELEASE``
    (its defaults) updated by the target's ``[target.operation.release]`` (``target.release``).

    What a fake reads as ``RELEASE[...]`` for that release, and what a case grid is given (see
    ``docs/spec-format.md``, case grids). ``{}`` when the source defines no ``RELEASE``.

    Args:
        target: a :class:`~fp4patch.ops.source.CustomOpTarget` (its ``source`` and ``release``).

    Raises:
        OpSourceError: the source does not parse, or its ``RELEASE`` is not a dict literal of constants.
    """
    tree = _parse_or_refuse(target.source)
    own: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "RELEASE":
            own = _release_dict(node)
    return {**own, **target.release}


def _check_release_keys(target: CustomOpTarget, release: dict[str, Any]) -> None:
    """Every key of ``target.release`` is one of the op source's ``RELEASE`` (``release``).

    Raises:
        OpSourceError: a key the source's ``RELEASE`` does not have.
    """
    for key in target.release:
        if key not in release:
            raise OpSourceError(f"release key {key!r} is not in the op source's RELEASE ({', '.join(sorted(release)) or 'empty'})")


def _release_statement(statement, target: CustomOpTarget):
    """The block's ``RELEASE = {...}`` (libcst) in place of the source's ``statement``: the merged dict, one key a line."""
    import libcst as cst

    merged = release_data(target)
    entries = "".join(f"    {key!r}: {value!r},\n" for key, value in merged.items())
    return cst.parse_statement(f"RELEASE = {{\n{entries}}}\n" if merged else "RELEASE = {}\n")


_WRITTEN = '''\
import torch

RELEASE = {"backends": ["auto", "cuda"], "sf_vec_size": 16}


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS)


def op(input: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    return WRAPPER(**OP_PARAMS)


def fake(**OP_PARAMS):
    if RELEASE["backends"] and backend not in RELEASE["backends"]:
        raise AssertionError(f"backend {backend} is not supported")
    return input.new_empty(input.shape)
'''

EXAMPLES = [
    Example(
        name="the target's values over the source's, one key a line",
        written=_WRITTEN,
        target={"params": ("input", "backend"), "release": {"backends": ["cuda"]}},
        rendered=('''\
    RELEASE = {
        'backends': ['cuda'],
        'sf_vec_size': 16,
    }
    MUTATES_ARGS = ()
''',),
    ),
    Example(
        name="no release values: the source's own",
        written=_WRITTEN,
        target={"params": ("input", "backend")},
        rendered=('''\
    RELEASE = {
        'backends': ['auto', 'cuda'],
        'sf_vec_size': 16,
    }
''',),
    ),
    Example(
        name="an empty RELEASE",
        written=_WRITTEN.replace('{"backends": ["auto", "cuda"], "sf_vec_size": 16}', "{}").replace(
            '    if RELEASE["backends"] and backend not in RELEASE["backends"]:\n        raise AssertionError(f"backend {backend} is not supported")\n', ""),
        target={"params": ("input", "backend")},
        rendered=("    RELEASE = {}\n    MUTATES_ARGS = ()\n",),
    ),
    Example(
        name="a RELEASE that is not a dict literal",
        written=_WRITTEN.replace('{"backends": ["auto", "cuda"], "sf_vec_size": 16}', 'dict(backends=["cuda"])'),
        refused="RELEASE must be a dict literal of constants",
    ),
    Example(
        name="a RELEASE with a key that is not a string",
        written=_WRITTEN.replace('"sf_vec_size": 16', "16: 16"),
        refused="RELEASE must be a dict literal with string keys",
    ),
    Example(
        name="a target's key the source's RELEASE does not have",
        written=_WRITTEN,
        target={"params": ("input", "backend"), "release": {"backend": ["cuda"]}},
        refused="release key 'backend' is not in the op source's RELEASE (backends, sf_vec_size)",
    ),
]
