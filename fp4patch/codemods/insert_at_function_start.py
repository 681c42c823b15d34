"""``insert-at-function-start``: put statements first in a function, after its docstring."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import libcst as cst

from .base import (
    FunctionTransformer,
    Operation,
    body_statements,
    docstring_count,
    parse_statements,
    statements_key,
    with_body,
)


@dataclass
class InsertAtFunctionStart(Operation):
    """Insert ``code`` (one or more statements) at the start of ``function``'s body.

    The statements go after the docstring, if any. Applied when the first statements after the
    docstring are structurally equal to ``code``.
    """

    kind: ClassVar[str] = "insert-at-function-start"
    code: str = ""

    def __post_init__(self) -> None:
        self._statements = parse_statements(self.code)
        self._key = statements_key(self._statements)

    def is_applied_to(self, function: cst.FunctionDef, module: cst.Module) -> bool:
        start = docstring_count(function)
        present = body_statements(function)[start : start + len(self._statements)]
        return len(present) == len(self._statements) and statements_key(present) == self._key

    def transformer(self) -> cst.CSTTransformer:
        return _InsertTransformer(self)


class _InsertTransformer(FunctionTransformer):
    def __init__(self, op: InsertAtFunctionStart) -> None:
        super().__init__(op.function)
        self.op = op

    def edit(self, function: cst.FunctionDef) -> cst.FunctionDef:
        if self.op.is_applied_to(function, cst.Module(body=[])):
            return function
        statements = body_statements(function)
        start = docstring_count(function)
        return with_body(function, statements[:start] + self.op._statements + statements[start:])
