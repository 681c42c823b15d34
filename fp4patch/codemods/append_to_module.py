"""``append-to-module``: add a block of module-level code at the end or after the imports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import libcst as cst

from .base import OpCheck, Operation, OpState, is_docstring, parse_statements, statement_key


def _is_import_line(statement: cst.BaseStatement) -> bool:
    """``import x`` or ``from x import y`` alone on its line."""
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(statement.body[0], (cst.Import, cst.ImportFrom))


def block_index(code: str) -> tuple[tuple[str, ...], tuple[str, str]]:
    """What :class:`AppendToModule`'s ``index`` field takes for ``code``: its top-level statements'
    :func:`statement_key` and the first one's ``(type, name)``.

    Raises:
        libcst.ParserSyntaxError: ``code`` does not parse.
    """
    return _index_of(parse_statements(code))


def _index_of(statements: list[cst.BaseStatement]) -> tuple[tuple[str, ...], tuple[str, str]]:
    return tuple(statement_key(s) for s in statements), _shape(statements[0])


def _shape(statement: cst.BaseStatement) -> tuple[str, str]:
    """Type and defined name of a top-level statement (``("FunctionDef", "f")``)."""
    name = statement.name.value if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) else ""
    if isinstance(statement, cst.SimpleStatementLine):
        return ("line", type(statement.body[0]).__name__ if statement.body else "")
    return (type(statement).__name__, name)


@dataclass
class AppendToModule(Operation):
    """Add ``code`` to the module: at the ``end`` or ``after-imports``.

    ``after-imports`` places the block after the last top-level import that comes before the
    first function or class definition. Applied when the block's statements stand, in order,
    as a contiguous run of top-level statements (compared structurally).
    """

    kind: ClassVar[str] = "append-to-module"
    code: str = ""
    position: str = "end"
    #: ``(keys, head)`` from :func:`block_index`, computed beforehand (a rendered custom op's, kept
    #: in the op cache): checking then needs only the index, and ``code`` is parsed when applied.
    #: Not a spec key (spec.py's OPERATION_FIELDS).
    index: tuple | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._parsed: list[cst.BaseStatement] | None = None
        if self.index is None:
            self._parsed = parse_statements(self.code)
            self.index = _index_of(self._parsed)
        self._keys, self._head = list(self.index[0]), tuple(self.index[1])

    @property
    def _statements(self) -> list[cst.BaseStatement]:
        if self._parsed is None:
            self._parsed = parse_statements(self.code)
        return self._parsed

    def describe(self) -> str:
        return f"append-to-module ({self.position})"

    def check(self, module: cst.Module) -> OpCheck:
        if self._find(module) >= 0:
            return OpCheck(OpState.APPLIED)
        return OpCheck(OpState.APPLICABLE)

    def _find(self, module: cst.Module) -> int:
        n = len(self._keys)
        body = list(module.body)
        first = self._head
        for i in range(len(body) - n + 1):
            # cheap structural prefilter (statement type and name) before the AST comparison,
            # statement by statement: a run that differs early costs one statement's key
            if _shape(body[i]) == first and all(statement_key(body[i + j]) == key for j, key in enumerate(self._keys)):
                return i
        return -1

    def insertion_index(self, module: cst.Module) -> int:
        """Index in ``module.body`` where the block goes."""
        if self.position == "end":
            return len(module.body)
        index = 1 if module.body and is_docstring(module.body[0]) else 0
        for i, statement in enumerate(module.body):
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                break
            if _is_import_line(statement):
                index = i + 1
        return index

    def transformer(self) -> cst.CSTTransformer:
        return _AppendTransformer(self)


class _AppendTransformer(cst.CSTTransformer):
    def __init__(self, op: AppendToModule) -> None:
        super().__init__()
        self.op = op

    def visit_Module(self, node: cst.Module) -> bool:
        return False  # the edit is to the module's own statement list: no need to walk the rest

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.op._find(updated_node) >= 0:
            return updated_node
        body = list(updated_node.body)
        index = self.op.insertion_index(updated_node)
        block = list(self.op._statements)
        blank = cst.EmptyLine()
        separation = (blank, blank) if self.op.position == "end" else (blank,) if index else ()
        block[0] = block[0].with_changes(leading_lines=(*separation, *block[0].leading_lines))
        if index < len(body) and self.op.position != "end":
            follower = body[index]
            if not follower.leading_lines:
                body[index] = follower.with_changes(leading_lines=(blank,))
        return updated_node.with_changes(body=body[:index] + block + body[index:])
