"""``add-decorator``: put a decorator on a function, outermost or innermost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import libcst as cst

from .base import FunctionTransformer, Operation, expression_key


@dataclass
class AddDecorator(Operation):
    """Add ``decorator`` (an expression such as ``torch.compiler.disable``) to ``function``.

    ``position`` is ``"outermost"`` (first line, applied last) or ``"innermost"`` (just above
    the ``def``). Applied when a structurally equal decorator is already there.
    """

    kind: ClassVar[str] = "add-decorator"
    decorator: str = ""
    position: str = "outermost"

    def __post_init__(self) -> None:
        self._expression = cst.parse_expression(self.decorator)
        self._key = expression_key(self._expression)

    def is_applied_to(self, function: cst.FunctionDef, module: cst.Module) -> bool:
        return any(expression_key(d.decorator) == self._key for d in function.decorators)

    def transformer(self) -> cst.CSTTransformer:
        return _AddDecoratorTransformer(self)

    def describe(self) -> str:
        return f"add-decorator @{self.decorator} ({self.position}) on {self.function}"


class _AddDecoratorTransformer(FunctionTransformer):
    def __init__(self, op: AddDecorator) -> None:
        super().__init__(op.function)
        self.op = op

    def edit(self, function: cst.FunctionDef) -> cst.FunctionDef:
        if self.op.is_applied_to(function, cst.Module(body=[])):
            return function
        decorator = cst.Decorator(decorator=self.op._expression)
        decorators = list(function.decorators)
        if self.op.position == "outermost":
            if decorators:
                # Comments and blank lines above the old first decorator stay above the new one.
                decorator = decorator.with_changes(leading_lines=decorators[0].leading_lines)
                decorators[0] = decorators[0].with_changes(leading_lines=())
                decorators.insert(0, decorator)
            else:
                decorator = decorator.with_changes(leading_lines=function.leading_lines)
                function = function.with_changes(leading_lines=())
                decorators = [decorator]
        else:
            decorators.append(decorator)
        return function.with_changes(decorators=decorators)
