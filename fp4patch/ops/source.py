"""The op source and its target as data: the bottom of :mod:`fp4patch.ops`.

Owns what every construct module reads: :class:`CustomOpTarget` (one ``custom-op`` operation of a spec
target), :class:`Rendered` (what :func:`fp4patch.ops.render.render` returns), :class:`OpSourceError`
(every refusal of the language), :class:`Example` (the before/after cases each construct module lists
in ``EXAMPLES``), the placeholders' names, and the small shared readers of an op source: the parse
caches (:mod:`ast` for checks, libcst for rendering), the op function, a statement's code.

May import: the standard library only (libcst inside functions, so that loading specs stays light).
Every other module of the package imports this one; it imports none of them.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from typing import Any

#: The three functions an op source defines, in the order they are rendered.
FUNCTIONS = ("entry", "op", "fake")
#: Placeholders an op source uses for the registered op and the installed wrapper.
OP_PLACEHOLDER = "OP"
WRAPPER_PLACEHOLDER = "WRAPPER"
#: ``def entry(**OP_PARAMS):`` / ``def fake(**OP_PARAMS):`` take op's parameters; ``OP(**OP_PARAMS, ...)``
#: / ``WRAPPER(**OP_PARAMS, ...)`` pass each of them by keyword (``p=p``).
PARAMS_PLACEHOLDER = "OP_PARAMS"
#: ``OP(**OP_PARAMS, p=OMIT)``: leave ``p`` out of the expanded call.
OMIT_PLACEHOLDER = "OMIT"
#: ``def op(a: int, _shared_params: SPLICE, b: int = 0):``: the parameters of the signature-only helper
#: ``_shared_params`` (imported from a helper module) in place of that one.
SPLICE_PLACEHOLDER = "SPLICE"
#: Module-level assignments an op source may hold besides its functions.
DATA_NAMES = ("RELEASE", "MUTATES_ARGS")
#: Stands for the op's name (``<function>_<fingerprint>``) until the fingerprint is known.
_NAME_SENTINEL = "__fp4patch_op_name__"

#: What the examples of ``EXAMPLES`` render for when they give a target (as ``docs/op-source.md`` does).
EXAMPLE_FUNCTION = "quantize"
EXAMPLE_LABEL = "ops/quantize.py"
EXAMPLE_SPEC = "quantize-fullgraph"
EXAMPLE_VERSIONS = ">=0.7.4,<0.7.5"


class OpSourceError(ValueError):
    """An op source or a ``custom-op`` target that cannot be rendered; the message says why."""


@dataclass(frozen=True)
class Rendered:
    """What :func:`fp4patch.ops.render.render` produces for one target.

    Attributes:
        op_name: qualified custom-op name, ``fp4patch::<function>_<8 hex>``.
        redirect: statements inserted first in the wrapper (after its docstring).
        block: module-level code appended to the wrapper's module.
        block_index: ``(statement keys, first statement's (type, name))`` of ``block``
            (:func:`fp4patch.codemods.append_to_module.block_index`), filled in by the op cache
            (:mod:`fp4patch.ops.cache`) so that checking an appended block needs no parse; None
            from :func:`~fp4patch.ops.render.render` itself.
    """

    op_name: str
    redirect: str
    block: str
    block_index: tuple | None = None


@dataclass(frozen=True)
class CustomOpTarget:
    """The data of one ``custom-op`` operation (see ``docs/spec-format.md``).

    Attributes:
        function: the wrapper's name in its module (``nvfp4_batched_quantize``).
        source: text of the op source file; ``source_label`` names it in messages and comments.
        params: the installed wrapper's parameter names, in order (FlashInfer release data).
        defaults: per-release default expressions (Python source), by parameter name.
        release: values replacing keys of the op source's ``RELEASE`` dict (TOML scalars/lists).
        spec_id / versions: provenance written in the rendered block's header comment.
        helpers: text of each shared helper module the source imports (``from ._module import _name``),
            by module name (``"_module"``); :func:`fp4patch.ops.helpers.read_helpers` reads them beside
            the op source.
        callers: other functions of the wrapper's module that call it and carry FlashInfer's API
            wrappers (``nvfp4_quantize`` and ``mxfp4_quantize`` call ``fp4_quantize``): while
            compiling, Dynamo enters their undecorated bodies too (``@flashinfer_api`` with
            ``FLASHINFER_LOGLEVEL > 0`` cannot be traced); eager calls keep the wrappers.
        carried: ``(name, default source text)`` of each parameter the installed wrapper added, with
            that default, since the release this target was verified on (``carried_from``), on a
            release fp4patch does not list (``carried_release``): the redirect refuses, while
            compiling, any other value of it (:func:`fp4patch.ops.guard._carried_guard`); nothing else
            changes. Set by :func:`fp4patch.catalog.evidence.carried_target`, never by a spec.
    """

    function: str
    source: str
    source_label: str
    params: tuple[str, ...]
    defaults: dict[str, str] = field(default_factory=dict)
    release: dict[str, Any] = field(default_factory=dict)
    spec_id: str = ""
    versions: str = ""
    helpers: dict[str, str] = field(default_factory=dict)
    callers: tuple[str, ...] = ()
    carried: tuple[tuple[str, str], ...] = ()
    carried_release: str = ""
    carried_from: str = ""


@dataclass(frozen=True)
class Example:
    """One before/after case of a construct (Fixit's VALID/INVALID, pyupgrade's before/after pairs).

    ``tests/test_op_constructs.py`` runs every module's ``EXAMPLES`` through the real renderer. Without a
    ``target``, ``written`` goes through :func:`~fp4patch.ops.render.plain_source`; with one, through
    :func:`~fp4patch.ops.render.render` for a :class:`CustomOpTarget` of function ``quantize`` (label
    ``ops/quantize.py``, spec ``quantize-fullgraph``, versions ``>=0.7.4,<0.7.5``: the op names match
    ``docs/op-source.md``'s) with those fields.

    Attributes:
        name: what the case shows, unique within its module.
        written: the op source, as written (column 0).
        plain: the whole of ``plain_source(written, helpers)``, exactly (no ``target``).
        rendered: excerpts of ``redirect + block`` (with a ``target``), each exactly a run of whole lines.
        refused: the exact message of the :class:`OpSourceError` raised instead.
        helpers: helper modules beside the op source, by module name (``"_helpers"``).
        target: fields of :class:`CustomOpTarget` other than ``function``, ``source``, ``source_label``,
            ``spec_id``, ``versions`` and ``helpers`` (``params`` at least); None: no target.

    Raises:
        ValueError: not exactly one of ``plain``, ``rendered`` and ``refused`` is given, or ``plain``
            with a target or ``rendered`` without one.
    """

    name: str
    written: str
    plain: str | None = None
    rendered: tuple[str, ...] = ()
    refused: str | None = None
    helpers: dict[str, str] = field(default_factory=dict)
    target: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        given = [self.plain is not None, bool(self.rendered), self.refused is not None]
        if sum(given) != 1:
            raise ValueError(f"example {self.name!r}: give exactly one of plain, rendered and refused")
        if self.plain is not None and self.target is not None or self.rendered and self.target is None:
            raise ValueError(f"example {self.name!r}: plain is plain_source's (no target); rendered is render's (a target)")


@functools.lru_cache(maxsize=256)
def _parse_source(source: str) -> ast.Module:
    """``ast.parse(source)``, once per text and process: a spec's targets share their op source, and
    loading the specs checks every target (the trees are only read). Raises SyntaxError."""
    return ast.parse(source)


def _parse_or_refuse(source: str) -> ast.Module:
    """:func:`_parse_source`, with a source that does not parse refused.

    Raises:
        OpSourceError: ``line <n>: does not parse: <why>``.
    """
    try:
        return _parse_source(source)
    except SyntaxError as exc:
        raise OpSourceError(f"line {exc.lineno}: does not parse: {exc.msg}") from None


@functools.lru_cache(maxsize=64)
def _parse_cst(source: str):
    """``libcst.parse_module(source)`` once per helper module text (libcst trees are immutable)."""
    import libcst as cst

    return cst.parse_module(source)


#: _used_names's results by node identity; the node is kept with them, so an id is never reused
_USED_NAMES: dict[int, tuple[ast.AST, frozenset[str]]] = {}


def _used_names(node: ast.AST) -> frozenset[str]:
    """Every name ``node`` uses (one walk per node: loading the specs asks about the same helper functions once per
    target that imports them, about 800 times)."""
    cached = _USED_NAMES.get(id(node))
    if cached is None or cached[0] is not node:
        cached = _USED_NAMES[id(node)] = (node, frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name)))
    return cached[1]


def _op_function(tree: ast.Module) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "op"), None)


def _with_defaults(args: list[ast.arg], defaults: list[ast.expr]) -> list[tuple[ast.arg, ast.expr | None]]:
    """Positional parameters paired with their defaults (``ast.arguments`` aligns defaults to the tail)."""
    return list(zip(args, [None] * (len(args) - len(defaults)) + list(defaults)))


def _code(statement) -> str:
    import libcst as cst

    return cst.Module(body=[statement.with_changes(leading_lines=[])]).code.strip()


def _is_docstring(statement) -> bool:
    import libcst as cst

    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _assigns(statement, name: str) -> bool:
    import libcst as cst

    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.Assign)
        and isinstance(statement.body[0].targets[0].target, cst.Name)
        and statement.body[0].targets[0].target.value == name
    )


#: No construct of its own: the data every construct module reads.
EXAMPLES: list[Example] = []


#: A written op source the construct modules' EXAMPLES share (a quantizer of ``input`` with ``alignment`` and
#: ``mode``), and the same without ``mode``.
EXAMPLE_SOURCE = '''\
import torch


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS)


def op(input: torch.Tensor, alignment: int = 32, mode: int = 0) -> torch.Tensor:
    return WRAPPER(**OP_PARAMS)


def fake(**OP_PARAMS):
    return input.new_empty(input.shape)
'''

EXAMPLE_SOURCE_NO_MODE = '''\
import torch


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS)


def op(input: torch.Tensor, alignment: int = 32) -> torch.Tensor:
    return WRAPPER(**OP_PARAMS)


def fake(**OP_PARAMS):
    return input.new_empty(input.shape)
'''
