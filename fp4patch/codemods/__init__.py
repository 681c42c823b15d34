"""The codemods: one small libcst transformer per patch operation, by their spec ``kind``.

What it owns: the transformers (visit, match, return new nodes) and each operation's check of whether its pattern
is present, applied or absent. What it may import: the base modules only (``docs/architecture.md``)."""

from __future__ import annotations

from .add_decorator import AddDecorator
from .append_to_module import AppendToModule
from .base import OpCheck, Operation, OperationError, OpState
from .insert_at_function_start import InsertAtFunctionStart
from .replace_function_body import ReplaceFunctionBody
from .rewrite_call_arguments import RewriteCallArguments

OPERATIONS: dict[str, type[Operation]] = {
    cls.kind: cls
    for cls in (AddDecorator, InsertAtFunctionStart, ReplaceFunctionBody, AppendToModule, RewriteCallArguments)
}

__all__ = [
    "OPERATIONS",
    "AddDecorator",
    "AppendToModule",
    "InsertAtFunctionStart",
    "OpCheck",
    "OpState",
    "Operation",
    "OperationError",
    "ReplaceFunctionBody",
    "RewriteCallArguments",
]
