"""``rewrite-call-arguments``: change the argument list of a call, e.g. positional to keyword."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import ClassVar, Sequence

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node

from .base import OpCheck, Operation, OpState, find_functions, import_aliases


def _arguments(text: str) -> list[cst.Arg]:
    call = cst.parse_expression(f"_({text})")
    assert isinstance(call, cst.Call)
    return list(call.args)


def _arguments_key(args: Sequence[cst.Arg]) -> str:
    code = cst.Module(body=[]).code_for_node(cst.Call(func=cst.Name("_"), args=list(args)))
    node = ast.parse(code, mode="eval").body
    assert isinstance(node, ast.Call)
    return ast.dump(ast.Call(func=ast.Name("_"), args=node.args, keywords=node.keywords))


@dataclass
class RewriteCallArguments(Operation):
    """In ``function`` (or the whole module when empty), rewrite calls to ``call``.

    ``call`` is the callee's dotted name as written or its imported qualified name. A call
    whose arguments equal ``from`` (structurally) gets the argument list ``to``. Applicable
    when such a call exists; applied when a call with ``to`` exists and none with ``from``.

    Example (FlashInfer 0.6.12–0.7.0.post1, ``flashinfer/quantization/fp4_quantization.py``,
    ``_fp4_quantize_custom_op``): ``from = "input, global_scale, ..., enable_pdl"``,
    ``to = "input, global_scale, ..., enable_pdl=enable_pdl"``.
    """

    kind: ClassVar[str] = "rewrite-call-arguments"
    call: str = ""
    from_: str = ""
    to: str = ""

    def __post_init__(self) -> None:
        self._from = _arguments(self.from_)
        self._to = _arguments(self.to)
        self._from_key = _arguments_key(self._from)
        self._to_key = _arguments_key(self._to)

    def describe(self) -> str:
        scope = f" in {self.function}" if self.function else ""
        return f"rewrite-call-arguments {self.call}(...){scope}"

    def _scopes(self, module: cst.Module) -> list[cst.CSTNode]:
        return list(find_functions(module, self.function)) if self.function else [module]

    def _calls(self, module: cst.Module, scopes: Sequence[cst.CSTNode]) -> list[cst.Call]:
        aliases = import_aliases(module)
        found = []
        for scope in scopes:
            for call in m.findall(scope, m.Call()):
                assert isinstance(call, cst.Call)
                if self.matches_callee(call, aliases):
                    found.append(call)
        return found

    def matches_callee(self, call: cst.Call, aliases: dict[str, str]) -> bool:
        """True when ``call`` calls ``self.call`` (as written or through an import alias)."""
        name = get_full_name_for_node(call.func) or ""
        head, _, rest = name.partition(".")
        qualified = aliases.get(head, head) + ("." + rest if rest else "")
        return self.call in (name, qualified)

    def check(self, module: cst.Module) -> OpCheck:
        scopes = self._scopes(module)
        if not scopes:
            return OpCheck(OpState.DRIFTED, f"function {self.function!r} not found")
        keys = [_arguments_key(c.args) for c in self._calls(module, scopes)]
        if self._from_key in keys:
            return OpCheck(OpState.APPLICABLE)
        if self._to_key in keys:
            return OpCheck(OpState.APPLIED)
        where = f" in {self.function}()" if self.function else ""
        return OpCheck(OpState.DRIFTED, f"call {self.call}({self.from_}){where} not found")

    def transformer(self) -> cst.CSTTransformer:
        return _RewriteTransformer(self)

    def apply(self, module: cst.Module) -> cst.Module:
        if self.cached_check(module).state is not OpState.APPLICABLE:
            return module
        return module.visit(_RewriteTransformer(self, import_aliases(module)))


class _RewriteTransformer(cst.CSTTransformer):
    def __init__(self, op: RewriteCallArguments, aliases: dict[str, str] | None = None) -> None:
        super().__init__()
        self.op = op
        self.aliases = aliases or {}
        self.targets: set[int] = set()

    def visit_Module(self, node: cst.Module) -> None:
        scopes = self.op._scopes(node)
        self.targets = {id(c) for c in self.op._calls(node, scopes)}

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if id(original_node) in self.targets and _arguments_key(original_node.args) == self.op._from_key:
            return updated_node.with_changes(args=_formatted_like(original_node.args, self.op._to))
        return updated_node


def _formatted_like(old: Sequence[cst.Arg], new: Sequence[cst.Arg]) -> list[cst.Arg]:
    """Give ``new`` arguments the commas (and so line breaks) of ``old``, position by position."""
    result = []
    for i, arg in enumerate(new):
        if i < len(old):
            arg = arg.with_changes(comma=old[i].comma)
        elif result:
            arg = arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        result.append(arg)
    if len(new) < len(old) and result:
        result[-1] = result[-1].with_changes(comma=old[-1].comma)
    return result
