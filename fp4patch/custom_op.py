"""Render an op source (``patches/<distribution>/ops/<function>.py``) for one release target.

One source per op, release differences as data: an op source holds the *superset* of a FlashInfer
wrapper's parameters over every release it supports, and three functions — ``entry`` (called while
Dynamo traces), ``op`` (the custom op's eager body) and ``fake`` (its fake implementation). A spec
target of kind ``custom-op`` names the release's own parameters (``params``), per-release defaults
(``defaults``) and release data (``release``, merged into the source's ``RELEASE`` dict). This module
turns that into the two blocks that land in site-packages:

* the *redirect*, inserted first in the wrapper (after its docstring)::

      if _fp4patch_<function>_is_compiling():
          return _fp4patch_<function>_entry(p1=p1, p2=p2, ...)

* the *op block*, appended to the module: a registration function holding the op source's code, the
  custom op registered as ``fp4patch::<function>_<fingerprint>``, and the bypass of FlashInfer's
  ``@flashinfer_api`` logging wrappers while compiling.

The fingerprint is 8 hex digits of the sha256 of the rendered code with the op name left out, so the
op's identity changes exactly when its schema, fake or release data change: PyTorch's FX-graph and
inductor caches key on the graph's code, which names the op, so an upgrade never meets a cached
graph compiled against another fake (issue: FlashInfer 0.6.0 → 0.7.4 changed the scale factors'
padded layout at 0.6.8).

Validation (:func:`check_op_source`) uses only :mod:`ast`, so that loading specs stays light;
rendering (:func:`render`) uses libcst and runs when a target's operations are built.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from typing import Any

#: The three functions an op source defines, in the order they are rendered.
FUNCTIONS = ("entry", "op", "fake")
#: Placeholders an op source uses for the registered op and the installed wrapper.
OP_PLACEHOLDER = "OP"
WRAPPER_PLACEHOLDER = "WRAPPER"
#: Module-level assignments an op source may hold besides its functions.
DATA_NAMES = ("RELEASE", "MUTATES_ARGS")
_NAME_SENTINEL = "__fp4patch_op_name__"


class OpSourceError(ValueError):
    """An op source or a ``custom-op`` target that cannot be rendered; the message says why."""


@dataclass(frozen=True)
class Rendered:
    """What :func:`render` produces for one target.

    Attributes:
        op_name: qualified custom-op name, ``fp4patch::<function>_<8 hex>``.
        redirect: statements inserted first in the wrapper (after its docstring).
        block: module-level code appended to the wrapper's module.
    """

    op_name: str
    redirect: str
    block: str


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
    """

    function: str
    source: str
    source_label: str
    params: tuple[str, ...]
    defaults: dict[str, str] = field(default_factory=dict)
    release: dict[str, Any] = field(default_factory=dict)
    spec_id: str = ""
    versions: str = ""


# --------------------------------------------------------------------------- #
# Validation with ast (cheap; run when specs are loaded)
# --------------------------------------------------------------------------- #
def _signature(fn: ast.FunctionDef) -> tuple[list[str], dict[str, ast.expr]]:
    args = fn.args
    if args.vararg or args.kwarg:
        raise OpSourceError(f"{fn.name}() takes *args/**kwargs; list every parameter by name")
    positional = [*args.posonlyargs, *args.args]
    defaults: dict[str, ast.expr] = {}
    for arg, default in zip(positional[len(positional) - len(args.defaults) :], args.defaults):
        defaults[arg.arg] = default
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if default is not None:
            defaults[arg.arg] = default
    return [a.arg for a in (*positional, *args.kwonlyargs)], defaults


def _release_dict(node: ast.stmt) -> dict[str, Any]:
    try:
        value = ast.literal_eval(node.value)  # type: ignore[attr-defined]
    except ValueError:
        raise OpSourceError("RELEASE must be a dict literal of constants") from None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise OpSourceError("RELEASE must be a dict literal with string keys")
    return value


def check_op_source(target: CustomOpTarget) -> None:
    """Check that ``target`` can be rendered, with :mod:`ast` only.

    Raises:
        OpSourceError: the source does not parse, lacks ``entry``/``op``/``fake``, holds other
            module-level code, the three signatures differ, a release parameter is unknown to the
            source, an absent parameter has no default to bind, a ``defaults`` entry is not an
            expression or names no parameter, or a ``release`` key is not in ``RELEASE``.
    """
    try:
        tree = ast.parse(target.source)
    except SyntaxError as exc:
        raise OpSourceError(f"line {exc.lineno}: does not parse: {exc.msg}") from None
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
    signatures = {name: _signature(functions[name]) for name in FUNCTIONS}
    names, defaults = signatures["op"]
    for name in ("entry", "fake"):
        if signatures[name][0] != names:
            raise OpSourceError(f"{name}() and op() must take the same parameters in the same order")
    unknown = [p for p in target.params if p not in names]
    if unknown:
        raise OpSourceError(f"release parameter(s) {', '.join(unknown)} of {target.function}() unknown to the op source; add them to entry/op/fake")
    for name in names:
        if name not in target.params and name not in defaults:
            raise OpSourceError(f"parameter {name!r} is absent in this release but has no default in the op source to bind it to")
    for name, expression in target.defaults.items():
        if name not in target.params:
            raise OpSourceError(f"defaults names {name!r}, not a parameter of this release")
        try:
            ast.parse(expression, mode="eval")
        except SyntaxError:
            raise OpSourceError(f"default for {name!r} is not a Python expression: {expression!r}") from None
    for key in target.release:
        if key not in release:
            raise OpSourceError(f"release key {key!r} is not in the op source's RELEASE ({', '.join(sorted(release)) or 'empty'})")


# --------------------------------------------------------------------------- #
# Rendering with libcst
# --------------------------------------------------------------------------- #
def render(target: CustomOpTarget) -> Rendered:
    """Render ``target``'s redirect and op block (see the module docstring).

    Raises:
        OpSourceError: as :func:`check_op_source`.
    """
    check_op_source(target)
    import libcst as cst

    module = cst.parse_module(target.source)
    absent = _absent_params(target)
    body: list[cst.BaseStatement] = []
    imports: list[cst.BaseStatement] = []
    functions: dict[str, cst.FunctionDef] = {}
    helpers: list[cst.BaseStatement] = []
    data: list[cst.BaseStatement] = []
    for index, statement in enumerate(module.body):
        if index == 0 and _is_docstring(statement):
            continue
        if isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], (cst.Import, cst.ImportFrom)):
            imports.append(statement)
        elif isinstance(statement, cst.FunctionDef) and statement.name.value in FUNCTIONS:
            functions[statement.name.value] = statement
        elif isinstance(statement, cst.FunctionDef):
            helpers.append(statement)
        else:
            data.append(_release_statement(statement, target) if _assigns(statement, "RELEASE") else statement)
    trimmer = _Trim(absent, target.defaults, target.function)
    edited = {name: _bind_absent(functions[name].visit(trimmer), absent) for name in FUNCTIONS}
    op_def = edited["op"].with_changes(
        decorators=[_decorator(f'torch.library.custom_op("fp4patch::{_NAME_SENTINEL}", mutates_args=MUTATES_ARGS)')]
    )
    fake_def = edited["fake"].with_changes(decorators=[_decorator("op.register_fake")])
    has_mutates = any(_assigns(s, "MUTATES_ARGS") for s in data)
    if not has_mutates:
        data.append(cst.parse_statement("MUTATES_ARGS = ()\n"))
    body.append(
        cst.parse_statement(
            'if getattr(getattr(torch, "library", None), "custom_op", None) is None or getattr(\n'
            '    getattr(torch, "compiler", None), "is_compiling", None\n'
            ") is None:\n"
            "    return None  # no torch.library.custom_op: the wrapper stays as it was\n"
        )
    )
    body.extend(data)
    body.extend(helpers)
    body.append(edited["entry"])
    body.append(
        cst.parse_statement(
            "try:  # already registered in this process (a module reload, a second copy): reuse it\n"
            f"    OP = torch.ops.fp4patch.{_NAME_SENTINEL}.default\n"
            "    return entry\n"
            "except (AttributeError, RuntimeError):\n"
            "    pass\n"
        )
    )
    body.extend([op_def, fake_def])
    body.append(cst.parse_statement(f"OP = torch.ops.fp4patch.{_NAME_SENTINEL}.default\n"))
    body.append(cst.parse_statement("return entry\n"))
    fn = target.function
    register = cst.FunctionDef(
        name=cst.Name(f"_fp4patch_register_{fn}"),
        params=cst.Parameters(),
        body=cst.IndentedBlock(body=body),
        leading_lines=[
            cst.EmptyLine(comment=cst.Comment(f"# fp4patch {target.spec_id}: {fn} traces as the custom op fp4patch::{_NAME_SENTINEL}")),
            cst.EmptyLine(comment=cst.Comment(f"# under torch.compile; rendered from {target.source_label} for FlashInfer {target.versions}.")),
            cst.EmptyLine(comment=cst.Comment("# Only the registration runs at import; eager calls run the original code after one check.")),
        ],
    )
    tail = cst.parse_module(_TAIL.format(fn=fn))
    # The op source's imports stand at module level: custom_op resolves string annotations (a module
    # with `from __future__ import annotations`) in the module's globals, not in the function's scope.
    redirect = _redirect(target)
    # The fingerprint covers the code, not the provenance comments: same schema, fake and data, same name.
    code = cst.Module(body=[*imports, register.with_changes(leading_lines=[]), *tail.body]).code
    fingerprint = hashlib.sha256((redirect + "\n" + code).encode()).hexdigest()[:8]
    if imports:
        imports[0] = imports[0].with_changes(leading_lines=register.leading_lines)
        register = register.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    block_module = cst.Module(body=[*imports, register, *tail.body])
    block = "".join(line.rstrip() + "\n" for line in block_module.code.splitlines())  # no indented blank lines
    op_name = f"{fn}_{fingerprint}"
    return Rendered(f"fp4patch::{op_name}", redirect, block.replace(_NAME_SENTINEL, op_name))


_TAIL = '''
_fp4patch_{fn}_entry = _fp4patch_register_{fn}()
# The one check an eager {fn} call pays: torch.compiler.is_compiling itself (Dynamo folds it to
# True while tracing), bound once; bool() is False when the op could not be registered.
_fp4patch_{fn}_is_compiling = torch.compiler.is_compiling if _fp4patch_{fn}_entry is not None else bool


def _fp4patch_{fn}_bypass_api_wrappers(fn):
    # Dynamo cannot trace @flashinfer_api's logging wrapper (FLASHINFER_LOGLEVEL > 0) nor the
    # fi_trace dump wrapper (FLASHINFER_TRACE_DUMP=1): while compiling, enter the undecorated
    # function, whose first statement redirects to the custom op. Eager calls keep the wrappers.
    inner = fn
    while getattr(inner, "__wrapped__", None) is not None:
        inner = inner.__wrapped__
    if inner is fn:
        return fn
    import functools

    @functools.wraps(fn)
    def _fp4patch_{fn}_api_entry(*args, **kwargs):
        if torch.compiler.is_compiling():
            return inner(*args, **kwargs)
        return fn(*args, **kwargs)

    # One attribute dict with fn: @backend_requirement sets attributes on its wrapper per call
    # (suitable_auto_backends for backend="auto") that the function body reads back through the
    # module-level name, which is now this function.
    _fp4patch_{fn}_api_entry.__dict__ = fn.__dict__
    return _fp4patch_{fn}_api_entry


if _fp4patch_{fn}_entry is not None:
    {fn} = _fp4patch_{fn}_bypass_api_wrappers({fn})
'''


def _redirect(target: CustomOpTarget) -> str:
    fn = target.function
    arguments = "".join(f"        {p}={p},\n" for p in target.params)
    return f"if _fp4patch_{fn}_is_compiling():\n    return _fp4patch_{fn}_entry(\n{arguments}    )\n"


def _absent_params(target: CustomOpTarget) -> dict[str, str]:
    """Parameters of the op source absent in this release → the source default's code."""
    tree = ast.parse(target.source)
    op_fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "op")
    names, defaults = _signature(op_fn)
    return {name: ast.unparse(defaults[name]) for name in names if name not in target.params}


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


def _release_statement(statement, target: CustomOpTarget):
    import libcst as cst

    merged = {**_release_dict(ast.parse(cst.Module(body=[statement]).code).body[0]), **target.release}
    entries = "".join(f"    {key!r}: {value!r},\n" for key, value in merged.items())
    return cst.parse_statement(f"RELEASE = {{\n{entries}}}\n" if merged else "RELEASE = {}\n")


def _decorator(expression: str):
    import libcst as cst

    return cst.Decorator(decorator=cst.parse_expression(expression))


def _bind_absent(function, absent: dict[str, str]):
    """Bind each parameter absent in this release to its source default, after the docstring."""
    import libcst as cst

    if not absent:
        return function
    statements = list(function.body.body)
    start = 1 if statements and _is_docstring(statements[0]) else 0
    binds = [cst.parse_statement(f"{name} = {code}  # not a parameter of this release\n") for name, code in absent.items()]
    return function.with_changes(body=function.body.with_changes(body=[*statements[:start], *binds, *statements[start:]]))


def _make_trim():
    import libcst as cst

    class Trim(cst.CSTTransformer):
        """Drop absent parameters, apply per-release defaults, bind WRAPPER to the wrapper's name."""

        def __init__(self, absent: dict[str, str], defaults: dict[str, str], wrapper: str) -> None:
            super().__init__()
            self.absent = absent
            self.defaults = defaults
            self.wrapper = wrapper
            self.depth = 0

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            self.depth += 1
            return True

        def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
            self.depth -= 1
            if self.depth:
                return updated_node
            params = updated_node.params

            def keep(seq):
                out = []
                for p in seq:
                    if p.name.value in self.absent:
                        continue
                    if p.name.value in self.defaults:
                        p = p.with_changes(default=cst.parse_expression(self.defaults[p.name.value]))
                    out.append(p)
                return out

            posonly, positional, kwonly = keep(params.posonly_params), keep(params.params), keep(params.kwonly_params)
            star = params.star_arg if kwonly else cst.MaybeSentinel.DEFAULT
            # A removed last parameter hands its comma (and the newline before ")") to the new last one,
            # so a multi-line signature still closes on its own line.
            original = [*params.posonly_params, *params.params, *params.kwonly_params]
            groups = [g for g in (kwonly, positional, posonly) if g]
            if original and groups and original[-1].name.value in self.absent:
                groups[0][-1] = groups[0][-1].with_changes(comma=original[-1].comma)
            new = params.with_changes(posonly_params=posonly, params=positional, kwonly_params=kwonly, star_arg=star)
            return updated_node.with_changes(params=new)

        def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
            called = updated_node.func.value if isinstance(updated_node.func, cst.Name) else ""
            if called not in (OP_PLACEHOLDER, WRAPPER_PLACEHOLDER, self.wrapper):
                return updated_node
            args = [a for a in updated_node.args if not (a.keyword is not None and a.keyword.value in self.absent)]
            if args and args != list(updated_node.args):
                args[-1] = args[-1].with_changes(comma=updated_node.args[-1].comma)
            return updated_node.with_changes(args=args)

        def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
            if updated_node.value == WRAPPER_PLACEHOLDER:
                return updated_node.with_changes(value=self.wrapper)
            return updated_node

    return Trim


def _Trim(absent: dict[str, str], defaults: dict[str, str], wrapper: str):
    """The libcst transformer of :func:`_make_trim` (built on first use: libcst loads lazily)."""
    return _make_trim()(absent, defaults, wrapper)
