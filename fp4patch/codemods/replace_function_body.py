"""``replace-function-body``: swap a function's body for new statements, keeping its docstring."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import libcst as cst

from .base import (
    FunctionTransformer,
    Operation,
    body_statements,
    docstring_count,
    is_docstring,
    parse_statements,
    statements_key,
    with_body,
)


@dataclass
class ReplaceFunctionBody(Operation):
    """Replace the body of ``function`` by ``code``.

    The original docstring stays unless ``code`` starts with one of its own. Applied when the
    body (after the docstring) is structurally equal to ``code``. Use ``anchor-calls`` /
    ``anchor-params`` so that an upstream rewrite of the function reports ``drifted`` instead
    of being silently replaced.
    """

    kind: ClassVar[str] = "replace-function-body"
    code: str = ""

    def __post_init__(self) -> None:
        self._statements = parse_statements(self.code)
        self._own_docstring = bool(self._statements) and is_docstring(self._statements[0])
        self._key = statements_key(self._statements[1:] if self._own_docstring else self._statements)

    def is_applied_to(self, function: cst.FunctionDef, module: cst.Module) -> bool:
        statements = body_statements(function)
        return statements_key(statements[docstring_count(function) :]) == self._key

    def transformer(self) -> cst.CSTTransformer:
        return _ReplaceBodyTransformer(self)


class _ReplaceBodyTransformer(FunctionTransformer):
    def __init__(self, op: ReplaceFunctionBody) -> None:
        super().__init__(op.function)
        self.op = op

    def edit(self, function: cst.FunctionDef) -> cst.FunctionDef:
        if self.op.is_applied_to(function, cst.Module(body=[])):
            return function
        keep = [] if self.op._own_docstring else body_statements(function)[: docstring_count(function)]
        return with_body(function, keep + self.op._statements)
