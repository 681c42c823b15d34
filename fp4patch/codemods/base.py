"""Shared pieces of the patch operations: states, code comparison and function lookup.

Every operation is a small libcst transformer plus a ``check`` that tells whether its anchor
(``applicable``) or its result (``applied``) is in a module, or neither (``drifted``).
Code is compared structurally, by its Python AST, never by text: a reformatted but
equivalent body still counts as applied.
"""

from __future__ import annotations

import ast
import enum
import functools
import textwrap
from dataclasses import dataclass, field
from typing import ClassVar, Iterator, Sequence

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node


class OpState(str, enum.Enum):
    """Where a module stands with respect to one operation."""

    APPLIED = "applied"
    APPLICABLE = "applicable"
    DRIFTED = "drifted"


@dataclass(frozen=True)
class OpCheck:
    """The result of :meth:`Operation.check`: a state and, for ``drifted``, what is missing."""

    state: OpState
    detail: str = ""


class OperationError(ValueError):
    """An operation's fields are invalid (raised while a spec is loaded)."""


def parse_statements(code: str) -> list[cst.BaseStatement]:
    """Parse ``code`` (a block of statements, any indentation) into libcst statements.

    Raises:
        libcst.ParserSyntaxError: the code does not parse.
    """
    module = cst.parse_module(textwrap.dedent(code).strip("\n") + "\n")
    body = list(module.body)
    if body and module.header:
        # comments above the first statement belong to the block, not to a module header
        body[0] = body[0].with_changes(leading_lines=(*module.header, *body[0].leading_lines))
    return body


def ast_key(code: str) -> str:
    """Structural identity of a block of code: the dump of its AST (formatting ignored)."""
    return ast.dump(ast.parse(textwrap.dedent(code)))


def statements_key(statements: Sequence[cst.BaseStatement]) -> str:
    """Structural identity of libcst statements (see :func:`ast_key`)."""
    return ast_key(cst.Module(body=list(statements)).code)


#: statement_key's results by node identity; the node is kept with its key, so an id is never reused
_STATEMENT_KEYS: dict[int, tuple[cst.BaseStatement, str]] = {}


def statement_key(statement: cst.BaseStatement) -> str:
    """:func:`statements_key` of one module-level statement, computed once per node.

    libcst trees are immutable and a transform keeps the nodes it does not change, so the
    statements of a module keep their identity from one operation to the next within a command.
    """
    cached = _STATEMENT_KEYS.get(id(statement))
    if cached is None or cached[0] is not statement:
        cached = _STATEMENT_KEYS[id(statement)] = (statement, statements_key([statement]))
    return cached[1]


def expression_key(expression: cst.BaseExpression) -> str:
    """Structural identity of one expression."""
    return ast.dump(ast.parse(cst.Module(body=[]).code_for_node(expression), mode="eval"))


def is_docstring(statement: cst.BaseStatement) -> bool:
    """True for a statement that is a bare string literal (a docstring)."""
    return m.matches(statement, _DOCSTRING)


_DOCSTRING = m.SimpleStatementLine(body=[m.Expr(value=m.SimpleString() | m.ConcatenatedString())])


def body_statements(function: cst.FunctionDef) -> list[cst.BaseStatement]:
    """The statements of a function body, also for a one-line ``def f(): return x``."""
    if isinstance(function.body, cst.IndentedBlock):
        return list(function.body.body)
    suite = function.body
    return [cst.SimpleStatementLine(body=list(suite.body), trailing_whitespace=suite.trailing_whitespace)]


def with_body(function: cst.FunctionDef, statements: Sequence[cst.BaseStatement]) -> cst.FunctionDef:
    """Return ``function`` with its body replaced by ``statements`` (an indented block)."""
    if isinstance(function.body, cst.IndentedBlock):
        return function.with_changes(body=function.body.with_changes(body=list(statements)))
    return function.with_changes(body=cst.IndentedBlock(body=list(statements)))


def docstring_count(function: cst.FunctionDef) -> int:
    """1 when the function body starts with a docstring, else 0."""
    statements = body_statements(function)
    return 1 if statements and is_docstring(statements[0]) else 0


def parameter_names(function: cst.FunctionDef) -> set[str]:
    """Names of every parameter of ``function`` (positional-only, keyword-only, * and **)."""
    params = function.params
    names = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            names.add(star.name.value)
    return names


class _CalleeCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        name = get_full_name_for_node(node.func)
        if name:
            self.names.add(name)
            # ``get_module("100").kernel(...)`` is named ``get_module.kernel`` by libcst;
            # also record every dotted suffix so that ``kernel`` and ``module.kernel`` match.
            parts = name.split(".")
            for i in range(1, len(parts)):
                self.names.add(".".join(parts[i:]))


#: the calls found in a node, by node identity (the node kept with them, so an id is never reused)
_CALLED: dict[int, tuple[cst.CSTNode, frozenset[str]]] = {}


def called_names(node: cst.CSTNode, import_aliases: dict[str, str]) -> set[str]:
    """Names called inside ``node``, each also under its imported qualified name.

    ``import_aliases`` maps a local name to what it was imported as (``{"sp": "subprocess"}``
    for ``import subprocess as sp``), so an anchor ``subprocess.check_output`` matches
    ``sp.check_output(...)``.
    """
    cached = _CALLED.get(id(node))
    if cached is None or cached[0] is not node:  # one walk per node: a transform keeps the nodes it leaves alone
        collector = _CalleeCollector()
        node.visit(collector)
        cached = _CALLED[id(node)] = (node, frozenset(collector.names))
    names = set(cached[1])
    collector_names = cached[1]
    for name in collector_names:
        head, _, rest = name.partition(".")
        if head in import_aliases:
            full = import_aliases[head] + ("." + rest if rest else "")
            names.add(full)
    return names


_BLOCK_FIELDS = ("body", "orelse", "handlers", "finalbody", "cases")


def _suites(node: cst.CSTNode) -> Iterator[cst.BaseSuite]:
    """The blocks of a compound statement (``if``/``elif``/``else``, ``try`` handlers, ``with``,
    loops, ``def``, ``class``, ``match`` cases), in source order."""
    for name in _BLOCK_FIELDS:
        value = getattr(node, name, None)
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, cst.BaseSuite):
                yield item
            elif isinstance(item, cst.CSTNode):  # Else, If (elif), ExceptHandler, Finally, MatchCase
                yield from _suites(item)


def small_statements(body: Sequence[cst.BaseStatement]) -> Iterator[cst.BaseSmallStatement]:
    """Every small statement (``import``, assignment, ``return`` ...) in ``body`` and, at any
    depth, in the blocks of its compound statements, in source order.

    A direct walk over statement lists: no libcst visitor, which would rebuild every expression
    node on the way (on FlashInfer 0.7.4's ``fused_moe/core.py``, seconds per walk instead of
    milliseconds).
    """
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            yield from statement.body
            continue
        for suite in _suites(statement):
            if isinstance(suite, cst.SimpleStatementSuite):
                yield from suite.body
            else:
                yield from small_statements(suite.body)


@functools.lru_cache(maxsize=4)
def import_aliases(module: cst.Module) -> dict[str, str]:
    """Map each name bound by an import statement of ``module`` (at any depth: FlashInfer imports
    inside functions too) to its qualified name."""
    aliases: dict[str, str] = {}
    for imp in small_statements(module.body):
        if isinstance(imp, cst.Import):
            for alias in imp.names:
                full = get_full_name_for_node(alias.name) or ""
                local = alias.asname.name.value if alias.asname else full.split(".")[0]
                aliases[local] = full if alias.asname else local
        elif isinstance(imp, cst.ImportFrom) and not isinstance(imp.names, cst.ImportStar):
            base = ("." * len(imp.relative)) + (get_full_name_for_node(imp.module) or "") if imp.module else "." * len(imp.relative)
            for alias in imp.names:
                name = get_full_name_for_node(alias.name) or ""
                local = alias.asname.name.value if alias.asname else name
                aliases[local] = f"{base}.{name}" if not base.endswith(".") else f"{base}{name}"
    return aliases


class _FunctionFinder(cst.CSTVisitor):
    """Collect the function definitions whose dotted scope path equals ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.scopes: list[tuple[str, str]] = []
        self.found: list[cst.FunctionDef] = []

    def _dotted(self, name: str) -> str | None:
        if any(kind == "def" for kind, _ in self.scopes):
            return None  # nested functions are out of reach on purpose
        return ".".join([n for _, n in self.scopes] + [name])

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scopes.append(("class", node.name.value))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.scopes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if self._dotted(node.name.value) == self.path:
            self.found.append(node)
        self.scopes.append(("def", node.name.value))
        return False  # a function's body holds no definition within reach

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False  # no definitions in a simple statement: skip its expressions


@functools.lru_cache(maxsize=8)
def find_functions(module: cst.Module, path: str) -> list[cst.FunctionDef]:
    """All definitions of the function at dotted ``path`` ("name" or "Class.method").

    Definitions inside ``if``/``try`` blocks at module or class level count; functions nested
    in other functions do not.
    """
    finder = _FunctionFinder(path)
    module.visit(finder)
    return finder.found


class FunctionTransformer(cst.CSTTransformer):
    """Base transformer: calls :meth:`edit` on every definition of the function at ``path``."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._finder = _FunctionFinder(path)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._finder.visit_ClassDef(node)

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        self._finder.leave_ClassDef(original_node)
        return updated_node

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        before = len(self._finder.found)
        self._finder.visit_FunctionDef(node)
        self._matched = getattr(self, "_matched", [])
        self._matched.append(len(self._finder.found) > before)
        # :meth:`edit` gets the whole definition; nested functions are never matched, so no body
        # needs walking (on FlashInfer 0.7.4 that walk was most of ``apply``'s time)
        return False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef:
        self._finder.leave_FunctionDef(original_node)
        if self._matched.pop():
            return self.edit(updated_node)
        return updated_node

    def edit(self, function: cst.FunctionDef) -> cst.FunctionDef:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass
class Operation:
    """One declarative edit of a module. Subclasses set ``kind`` and implement the hooks.

    Attributes:
        function: dotted path of the function the operation edits ("" for module-level ones).
        anchor_calls: qualified names (``subprocess.check_output``) that must be called in the
            function for the operation to be applicable.
        anchor_params: parameter names the function must have.
        exact_params: when true, the function may have no parameter beyond ``anchor_params``
            (a ``custom-op`` redirect forwards exactly those: a new release parameter is drift).
    """

    kind: ClassVar[str] = ""
    function: str = ""
    anchor_calls: tuple[str, ...] = ()
    anchor_params: tuple[str, ...] = ()
    exact_params: bool = False
    line: int = field(default=0, compare=False)

    # -- hooks -------------------------------------------------------------------------
    def is_applied_to(self, function: cst.FunctionDef, module: cst.Module) -> bool:
        """True when this operation's result is present in ``function``."""
        raise NotImplementedError

    def transformer(self) -> cst.CSTTransformer:
        """A libcst transformer that performs the edit on a module."""
        raise NotImplementedError

    def describe(self) -> str:
        """A short human description, e.g. ``insert-at-function-start get_cuda_version``."""
        return f"{self.kind} {self.function}".strip()

    # -- shared logic --------------------------------------------------------------------
    def check(self, module: cst.Module) -> OpCheck:
        """Tell whether ``module`` has this operation's result, its anchor, or neither."""
        functions = find_functions(module, self.function)
        if not functions:
            return OpCheck(OpState.DRIFTED, f"function {self.function!r} not found")
        if all(self.is_applied_to(fn, module) for fn in functions):
            return OpCheck(OpState.APPLIED)
        for fn in functions:
            missing = self.missing_anchor(fn, module)
            if missing:
                return OpCheck(OpState.DRIFTED, missing)
        return OpCheck(OpState.APPLICABLE)

    def missing_anchor(self, function: cst.FunctionDef, module: cst.Module) -> str:
        """Describe the first anchor missing from ``function``; "" when all are there."""
        params = parameter_names(function)
        for name in self.anchor_params:
            if name not in params:
                return f"parameter {name!r} missing from {self.function}()"
        if self.exact_params:
            extra = sorted(params - set(self.anchor_params))
            if extra:
                return f"parameter {extra[0]!r} of {self.function}() is not in the spec's params (a new release parameter)"
        if self.anchor_calls:
            called = called_names(function, import_aliases(module))
            for name in self.anchor_calls:
                if name not in called:
                    return f"call to {name} missing from {self.function}()"
        return ""

    def cached_check(self, module: cst.Module) -> OpCheck:
        """:meth:`check`, computed once for the last ``module`` given (trees are immutable: the report of a file
        and the first operation planned on it check the same tree)."""
        last = self.__dict__.get("_last_check")
        if last is None or last[0] is not module:
            last = self.__dict__["_last_check"] = (module, self.check(module))
        return last[1]

    def apply(self, module: cst.Module) -> cst.Module:
        """Return ``module`` with the edit made; unchanged when already applied or drifted."""
        if self.cached_check(module).state is not OpState.APPLICABLE:
            return module
        return module.visit(self.transformer())

