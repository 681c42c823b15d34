"""Render an op source (``patches/<distribution>/ops/<function>.py``) for one release target.

The op-source language is documented in ``docs/op-source.md``, construct by construct (``OP_PARAMS``,
``OMIT``, ``SPLICE``, ``WRAPPER``, ``OP``, helper modules, ``RELEASE``, ``MUTATES_ARGS``, absent
parameters, per-release defaults, ``callers``, the imports, the redirect), each with what it renders to
and what is refused, and the order the renderer works in; ``tests/test_op_source_docs.py`` runs every
example of that page through this module.

:func:`render` turns one op source and one ``custom-op`` target (:class:`CustomOpTarget`: the release's
``params``, ``defaults``, ``release`` data and ``callers``) into a :class:`Rendered`: the *redirect*,
inserted first in the wrapper (after its docstring), and the *op block*, appended to its module, which
registers the custom op ``fp4patch::<function>_<fingerprint>`` (8 hex digits of the sha256 of the
rendered code, provenance comments left out). :func:`plain_source` expands the placeholders and inlines
the helpers for every parameter of ``op``, without trimming for a release (what tests execute).

Validation (:func:`check_op_source`) uses only :mod:`ast`, so that loading specs stays light;
rendering (:func:`render`) uses libcst and runs when a target's operations are built.
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
import hashlib
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
_NAME_SENTINEL = "__fp4patch_op_name__"
#: The oldest torch (major, minor) the rendered code supports: below it, or without the torch APIs it relies
#: on, a patched wrapper behaves as unpatched (``docs/eager-stays-eager.md``; ``fp4patch.torch_support``
#: refuses such a target environment before anything is written).
TORCH_FLOOR = (2, 7)


class OpSourceError(ValueError):
    """An op source or a ``custom-op`` target that cannot be rendered; the message says why."""


@dataclass(frozen=True)
class Rendered:
    """What :func:`render` produces for one target.

    Attributes:
        op_name: qualified custom-op name, ``fp4patch::<function>_<8 hex>``.
        redirect: statements inserted first in the wrapper (after its docstring).
        block: module-level code appended to the wrapper's module.
        block_index: ``(statement keys, first statement's (type, name))`` of ``block``
            (:func:`fp4patch.operations.append_to_module.block_index`), filled in by the op cache
            (:mod:`fp4patch.op_cache`) so that checking an appended block needs no parse; None
            from :func:`render` itself.
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
            by module name (``"_module"``); :func:`read_helpers` reads them beside the op source.
        callers: other functions of the wrapper's module that call it and carry FlashInfer's API
            wrappers (``nvfp4_quantize`` and ``mxfp4_quantize`` call ``fp4_quantize``): while
            compiling, Dynamo enters their undecorated bodies too (``@flashinfer_api`` with
            ``FLASHINFER_LOGLEVEL > 0`` cannot be traced); eager calls keep the wrappers.
        carried: ``(name, default source text)`` of each parameter the installed wrapper added, with
            that default, since the release this target was verified on (``carried_from``), on a
            release fp4patch does not list (``carried_release``): the redirect refuses, while
            compiling, any other value of it (:func:`_carried_guard`); nothing else changes. Set by
            :func:`fp4patch.evidence.carried_target`, never by a spec.
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


# --------------------------------------------------------------------------- #
# Validation with ast (cheap; run when specs are loaded)
# --------------------------------------------------------------------------- #
def _takes_op_params(fn: ast.FunctionDef) -> bool:
    """True for ``def entry(**OP_PARAMS):`` (the placeholder alone): op's parameter list."""
    args = fn.args
    return args.kwarg is not None and args.kwarg.arg == PARAMS_PLACEHOLDER and not (args.posonlyargs or args.args or args.vararg or args.kwonlyargs)


def _signature(fn: ast.FunctionDef) -> tuple[list[str], dict[str, ast.expr]]:
    args = fn.args
    if args.kwarg is not None and args.kwarg.arg == PARAMS_PLACEHOLDER:
        if fn.name == "op":
            raise OpSourceError("op() spells out its parameters (with schema annotations); only entry and fake take **OP_PARAMS")
        raise OpSourceError(f"{fn.name}(**OP_PARAMS) stands alone: write def {fn.name}(**OP_PARAMS): for op()'s parameters, or list them all")
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


def release_data(target: CustomOpTarget) -> dict[str, Any]:
    """The ``RELEASE`` dict the block rendered for ``target`` holds: the op source's own ``RELEASE``
    (its defaults) updated by the target's ``[target.operation.release]`` (``target.release``).

    What a fake reads as ``RELEASE[...]`` for that release, and what a case grid is given (see
    ``docs/spec-format.md``, case grids). ``{}`` when the source defines no ``RELEASE``.

    Raises:
        OpSourceError: the source does not parse, or its ``RELEASE`` is not a dict literal of constants.
    """
    try:
        tree = _parse_source(target.source)
    except SyntaxError as exc:
        raise OpSourceError(f"line {exc.lineno}: does not parse: {exc.msg}") from None
    own: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "RELEASE":
            own = _release_dict(node)
    return {**own, **target.release}


@functools.lru_cache(maxsize=256)
def _parse_source(source: str) -> ast.Module:
    """``ast.parse(source)``, once per text and process: a spec's targets share their op source, and
    loading the specs checks every target (the trees are only read). Raises SyntaxError."""
    return ast.parse(source)


def helper_imports(source: str) -> dict[str, tuple[str, ...]]:
    """The shared helpers an op source imports: ``from ._module import _a, _b`` → ``{"_module": ("_a", "_b")}``.

    Only the relative imports at the op source's module level count (one dot, a module name); the
    renderer inlines the named functions. Returns ``{}`` for a source that does not parse
    (:func:`check_op_source` reports it).
    """
    try:
        tree = _parse_source(source)
    except SyntaxError:
        return {}
    found: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.level != 1 or not node.module or any(a.name == "*" or a.asname for a in node.names):
                raise OpSourceError(
                    f"line {node.lineno}: a shared helper is imported as 'from ._module import _name, ...' "
                    "(one dot, no '*', no 'as')"
                )
            found[node.module] = (*found.get(node.module, ()), *(a.name for a in node.names))
    return found


def read_helpers(source: str, directory) -> dict[str, str]:
    """Read the helper modules ``source`` imports from ``directory`` (the op source's folder), by module name.

    Args:
        source: text of an op source.
        directory: a :class:`pathlib.Path`, the folder holding the op source and its helper modules.

    Raises:
        OpSourceError: a helper module cannot be read (the message names the file).
    """
    helpers = {}
    for module in helper_imports(source):
        path = directory / f"{module}.py"
        try:
            helpers[module] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise OpSourceError(
                f"'from .{module} import ...': cannot read the helper module {path}: "
                f"{getattr(exc, 'strerror', None) or exc}; put it beside the op source or drop the import"
            ) from None
    return helpers


def _helper_module(module: str, source: str) -> dict[str, ast.FunctionDef]:
    """A helper module's top-level functions, in order; OpSourceError when it holds anything but those,
    a docstring and absolute imports."""
    label = f"{module}.py"
    try:
        tree = _parse_source(source)
    except SyntaxError as exc:
        raise OpSourceError(f"{label}:{exc.lineno}: helper module does not parse: {exc.msg}") from None
    functions: dict[str, ast.FunctionDef] = {}
    for index, node in enumerate(tree.body):
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
            continue
        elif isinstance(node, ast.FunctionDef) and node.name.startswith("_"):
            functions[node.name] = node
        else:
            raise OpSourceError(f"{label}:{node.lineno}: a helper module holds only absolute imports and private functions (_name)")
    return functions


#: _used_names's results by node identity; the node is kept with them, so an id is never reused
_USED_NAMES: dict[int, tuple[ast.AST, frozenset[str]]] = {}


def _used_names(node: ast.AST) -> frozenset[str]:
    """Every name ``node`` uses (one walk per node: loading the specs asks about the same helper functions once per
    target that imports them, about 800 times)."""
    cached = _USED_NAMES.get(id(node))
    if cached is None or cached[0] is not node:
        cached = _USED_NAMES[id(node)] = (node, frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name)))
    return cached[1]


@functools.lru_cache(maxsize=256)
def _helper_closure(module: str, source: str, names: tuple[str, ...]) -> tuple[tuple[str, ...], frozenset[str]]:
    """The functions to inline for ``names`` (and the helper module's functions they use), in the
    module's order, and every name those functions use (to pick the module's imports they need).

    Raises:
        OpSourceError: a name is not a top-level function of the helper module.
    """
    functions = _helper_module(module, source)
    wanted = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in wanted:
            continue
        if name not in functions:
            raise OpSourceError(f"{module}.py (beside the op source) defines no top-level function {name}; the op source imports it")
        wanted.add(name)
        pending.extend(_used_names(functions[name]) & functions.keys())
    return tuple(n for n in functions if n in wanted), frozenset().union(*(_used_names(functions[n]) for n in wanted))


def _splice_markers(fn: ast.FunctionDef) -> list[ast.arg]:
    """``fn``'s parameters annotated ``SPLICE`` (``_shared_params: SPLICE``), in order."""
    args = fn.args
    return [
        a for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
        if isinstance(a.annotation, ast.Name) and a.annotation.id == SPLICE_PLACEHOLDER
    ]


def _op_function(tree: ast.Module) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "op"), None)


def _with_defaults(args: list[ast.arg], defaults: list[ast.expr]) -> list[tuple[ast.arg, ast.expr | None]]:
    """Positional parameters paired with their defaults (``ast.arguments`` aligns defaults to the tail)."""
    return list(zip(args, [None] * (len(args) - len(defaults)) + list(defaults)))


def _signature_only(fn: ast.FunctionDef) -> bool:
    """``def _f(p: T, q: U = 1):`` with a docstring, ``...`` or ``pass`` for its body, nothing else."""
    args = fn.args
    if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or fn.returns or fn.decorator_list:
        return False
    return all(
        isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and (s.value.value is Ellipsis or isinstance(s.value.value, str)))
        for s in fn.body
    )


def _spliced_op(op_fn: ast.FunctionDef, source: str, helpers: dict[str, str]) -> ast.FunctionDef:
    """``op`` with each ``_shared_params: SPLICE`` parameter replaced by the parameters of the signature-only
    helper ``_shared_params`` (imported from a helper module); ``op_fn`` itself when it splices nothing.

    Args:
        op_fn: the op source's ``def op`` (from :func:`_parse_source`; left unchanged).
        source: text of the op source (for its imports).
        helpers: text of the helper modules it imports, by module name.

    Raises:
        OpSourceError: a SPLICE parameter has a default or is positional-only; its name is not imported
            from a read helper module; the helper is not a signature only or declares no parameters; a
            spliced parameter has no annotation, uses a name the op source does not import (also inside a
            string annotation) or is also op's own; or, once spliced, a parameter without a default
            follows one with a default.
    """
    markers = _splice_markers(op_fn)
    if not markers:
        return op_fn
    args = op_fn.args
    imports = helper_imports(source)
    tree = _parse_source(source)
    bound = set(dir(builtins)) | {
        a.asname or a.name.split(".")[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) and not getattr(n, "level", 0) for a in n.names
    }
    marker_ids = {id(m) for m in markers}
    own = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if id(a) not in marker_ids}
    seen: set[str] = set()

    def splice(items: list[tuple[ast.arg, ast.expr | None]]) -> list[tuple[ast.arg, ast.expr | None]]:
        out = []
        for arg, default in items:
            if id(arg) not in marker_ids:
                out.append((arg, default))
                continue
            name = arg.arg
            if default is not None:
                raise OpSourceError(f"line {arg.lineno}: '{name}: SPLICE' takes no default; the spliced parameters carry their own")
            module = next((m for m, names in imports.items() if name in names), None)
            if module is None:
                raise OpSourceError(f"line {arg.lineno}: op() splices {name}: import it from its helper module ('from ._module import {name}')")
            if module not in helpers:
                raise OpSourceError(f"'from .{module} import ...': no helper module {module}.py was read beside the op source")
            fn = _helper_module(module, helpers[module]).get(name)
            if fn is None:
                raise OpSourceError(f"{module}.py (beside the op source) defines no top-level function {name}; the op source imports it")
            label = f"{module}.py:{fn.lineno}"
            if not _signature_only(fn):
                raise OpSourceError(
                    f"{label}: {name} is spliced into op(), so it is a signature only: plain parameters (no /, *, **), "
                    "no return annotation or decorator, and a docstring for its body"
                )
            if not fn.args.args:
                raise OpSourceError(f"{label}: {name} declares no parameters; give it the parameters to splice or drop '{name}: SPLICE'")
            for param, param_default in _with_defaults(fn.args.args, fn.args.defaults):
                if param.arg in own or param.arg in seen:
                    raise OpSourceError(f"{label}: parameter {param.arg!r} of {name} is op()'s own too (or spliced twice); keep one")
                if param.annotation is None:
                    raise OpSourceError(f"{label}: parameter {param.arg!r} of {name} has no annotation; a spliced parameter carries its schema type")
                used = _annotation_names(param.annotation, label) | (_used_names(param_default) if param_default else set())
                missing = sorted(used - bound)
                if missing:
                    raise OpSourceError(
                        f"{label}: parameter {param.arg!r} of {name} uses {', '.join(missing)}, which the op source does not import; import it there"
                    )
                seen.add(param.arg)
                out.append((param, param_default))
        return out

    if any(id(a) in marker_ids for a in args.posonlyargs):
        raise OpSourceError(f"line {op_fn.lineno}: a SPLICE parameter stands among op()'s plain or keyword-only parameters, not before '/'")
    pairs = _with_defaults([*args.posonlyargs, *args.args], args.defaults)
    positional = [*pairs[: len(args.posonlyargs)], *splice(pairs[len(args.posonlyargs) :])]
    kwonly = splice(list(zip(args.kwonlyargs, args.kw_defaults)))
    defaulted = False
    for arg, default in positional:
        if default is None and defaulted:
            raise OpSourceError(
                f"line {op_fn.lineno}: once spliced, op()'s parameter {arg.arg!r} has no default but follows one that has; "
                "move the SPLICE parameter or give the parameters after it defaults"
            )
        defaulted = defaulted or default is not None
    spliced = copy.copy(op_fn)
    spliced.args = ast.arguments(
        posonlyargs=list(args.posonlyargs),
        args=[a for a, _ in positional[len(args.posonlyargs):]],
        vararg=args.vararg,
        kwonlyargs=[a for a, _ in kwonly],
        kw_defaults=[d for _, d in kwonly],
        kwarg=args.kwarg,
        defaults=[d for _, d in positional if d is not None],
    )
    return spliced


def _annotation_names(annotation: ast.expr, label: str) -> set[str]:
    """The names an annotation uses, also inside a string annotation (``"Optional[torch.Tensor]"``,
    which ``torch.library.custom_op`` evaluates in the module's globals all the same). ``label`` names
    the helper in the OpSourceError raised for a string annotation that is not an expression."""
    names = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                names |= _annotation_names(ast.parse(node.value, mode="eval").body, label)
            except SyntaxError:
                raise OpSourceError(f"{label}: string annotation {node.value!r} is not a Python expression") from None
    return names


def _splice_names(source: str) -> frozenset[str]:
    """Names of the signature-only helpers ``op`` splices (imported, but not inlined as functions)."""
    op_fn = _op_function(_parse_source(source))
    return frozenset(a.arg for a in _splice_markers(op_fn)) if op_fn is not None else frozenset()


@functools.lru_cache(maxsize=256)
def _check_placeholders(source: str, op_names: tuple[str, ...], function: str) -> None:
    """``OP_PARAMS`` / ``OMIT`` stand only where the renderer expands them (once per source, op
    parameters and function: a spec's targets share them)."""
    tree = _parse_source(source)
    expanded: set[int] = set()
    callees = (OP_PLACEHOLDER, WRAPPER_PLACEHOLDER, function)
    for node in ast.walk(tree):
        takes = isinstance(node, ast.FunctionDef) and node.args.kwarg is not None and node.args.kwarg.arg == PARAMS_PLACEHOLDER
        if takes and (node not in tree.body or node.name not in ("entry", "fake")):
            raise OpSourceError(f"line {node.lineno}: only entry and fake take **OP_PARAMS")
        if not isinstance(node, ast.Call):
            continue
        spread = [k for k in node.keywords if k.arg is None and isinstance(k.value, ast.Name) and k.value.id == PARAMS_PLACEHOLDER]
        if not spread:
            continue
        callee = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
        if callee not in callees:
            raise OpSourceError(f"line {node.lineno}: **OP_PARAMS stands only in a call to OP or WRAPPER, not {callee}()")
        if node.args or sum(k.arg is None for k in node.keywords) > 1:
            raise OpSourceError(f"line {node.lineno}: {callee}(**OP_PARAMS, ...) takes no positional argument and no other **mapping")
        seen = set()
        for keyword in node.keywords:
            if keyword.arg is None:
                expanded.add(id(keyword.value))
                continue
            if keyword.arg not in op_names or keyword.arg in seen:
                raise OpSourceError(
                    f"line {keyword.lineno}: {callee}(**OP_PARAMS, {keyword.arg}=...): {keyword.arg!r} is "
                    f"{'named twice' if keyword.arg in seen else 'not a parameter of op()'}; name each of op()'s parameters at most once"
                )
            seen.add(keyword.arg)
            if isinstance(keyword.value, ast.Name) and keyword.value.id == OMIT_PLACEHOLDER:
                expanded.add(id(keyword.value))
    op_fn = _op_function(tree)
    markers = _splice_markers(op_fn) if op_fn is not None else []
    expanded.update(id(m.annotation) for m in markers)
    spliced = {m.arg for m in markers}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in (PARAMS_PLACEHOLDER, OMIT_PLACEHOLDER) and id(node) not in expanded:
            raise OpSourceError(
                f"line {node.lineno}: {node.id} stands only in 'def entry(**OP_PARAMS):', 'def fake(**OP_PARAMS):' "
                "and calls 'OP(**OP_PARAMS, p=OMIT)' / 'WRAPPER(**OP_PARAMS, ...)'"
            )
        if isinstance(node, ast.Name) and node.id == SPLICE_PLACEHOLDER and id(node) not in expanded:
            raise OpSourceError(f"line {node.lineno}: SPLICE stands only as the annotation of a parameter of op() ('_shared_params: SPLICE')")
        if isinstance(node, ast.Name) and node.id in spliced:
            raise OpSourceError(f"line {node.lineno}: {node.id} is a parameter list spliced into op(), not a function to use")


def check_op_source(target: CustomOpTarget) -> None:
    """Check that ``target`` can be rendered, with :mod:`ast` only.

    Raises:
        OpSourceError: the source does not parse, lacks ``entry``/``op``/``fake``, holds other
            module-level code, ``entry``/``fake`` neither take ``**OP_PARAMS`` nor op's parameters
            and defaults, ``OP_PARAMS``/``OMIT`` stand elsewhere than where they expand, a shared
            helper is missing (module not in ``target.helpers``, name not a function of it) or clashes
            with a function of the source, a release parameter is unknown to the source, an absent
            parameter has no default to bind, a ``defaults`` entry is not an expression or names no
            parameter, a ``release`` key is not in ``RELEASE``, or a ``_shared_params: SPLICE``
            parameter cannot be spliced (see :func:`_spliced_op`) or ``SPLICE`` stands elsewhere.
    """
    try:
        tree = _parse_source(target.source)
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
    names, defaults = _signature(_spliced_op(functions["op"], target.source, target.helpers))
    for name in ("entry", "fake"):
        if _takes_op_params(functions[name]):
            continue
        own_names, own_defaults = _signature(functions[name])
        if own_names != names or {k: ast.dump(v) for k, v in own_defaults.items()} != {k: ast.dump(v) for k, v in defaults.items()}:
            raise OpSourceError(
                f"{name}() and op() must take the same parameters in the same order with the same defaults; "
                f"write 'def {name}(**OP_PARAMS):' to take op()'s"
            )
    _check_placeholders(target.source, tuple(names), target.function)
    spliced = _splice_names(target.source)
    for module, imported in helper_imports(target.source).items():
        if module not in target.helpers:
            raise OpSourceError(f"'from .{module} import ...': no helper module {module}.py was read beside the op source")
        for name in _helper_closure(module, target.helpers[module], tuple(n for n in imported if n not in spliced))[0]:
            if name in functions:
                raise OpSourceError(f"{name} is defined in the op source and in {module}.py, which it imports from; keep one")
            helper = _helper_module(module, target.helpers[module])[name]
            uses = sorted(_used_names(helper) & spliced)
            if uses:  # it would be inlined without the function it names: a NameError in site-packages
                raise OpSourceError(
                    f"{module}.py:{helper.lineno}: {name} uses {', '.join(uses)}, which op() splices as a parameter list and the "
                    "block does not define; do not use a spliced signature-only helper in another helper"
                )
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

    absent = _absent_params(target)
    required = _required_params(target, absent)
    defaults = _op_defaults(target)
    module = _resolve(target, {name: defaults[name] for name in required if name in defaults})
    body: list[cst.BaseStatement] = []
    imports: list[cst.BaseStatement] = []
    functions: dict[str, cst.FunctionDef] = {}
    helpers: list[cst.BaseStatement] = []
    data: list[cst.BaseStatement] = []
    for index, statement in enumerate(module.body):
        if index == 0 and _is_docstring(statement):
            continue
        if isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], (cst.Import, cst.ImportFrom)):
            if _code(statement) not in {_code(s) for s in imports}:  # a shared helper's import the source has too
                imports.append(statement)
        elif isinstance(statement, cst.FunctionDef) and statement.name.value in FUNCTIONS:
            functions[statement.name.value] = statement
        elif isinstance(statement, cst.FunctionDef):
            helpers.append(statement)
        else:
            data.append(_release_statement(statement, target) if _assigns(statement, "RELEASE") else statement)
    trimmer = _Trim(absent, target.defaults, target.function, required)
    marked = {"op": lambda op_fn: _marked_eager_body(op_fn, target.function)}  # binds first, then the marker
    edited = {name: _bind_absent(marked.get(name, lambda f: f)(functions[name].visit(trimmer)), absent) for name in FUNCTIONS}
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
            cst.EmptyLine(comment=cst.Comment("# Registered when a compile or an export first needs it; eager calls run the original code")),
            cst.EmptyLine(comment=cst.Comment("# after one attribute read.")),
        ],
    )
    # callers are looked up by name: one missing from a release must not break the module's import
    tail = cst.parse_module(_TAIL.format(fn=fn, callers=repr(tuple(target.callers)), floor=".".join(map(str, TORCH_FLOOR)), floor_tuple=repr(TORCH_FLOOR)) + _set_piece(fn) + _ACTIVATE.replace("{fn}", fn) + _carried_refusal(target))
    # The op source's imports stand at module level: custom_op resolves string annotations (a module
    # with `from __future__ import annotations`) in the module's globals, not in the function's scope.
    redirect = _redirect(target)
    # The fingerprint covers the code, not the provenance comments: same schema, fake and data, same name.
    code = _one_line_strings(cst.Module(body=[*imports, register.with_changes(leading_lines=[]), *tail.body]).code, target)
    fingerprint = hashlib.sha256((redirect + "\n" + code).encode()).hexdigest()[:8]
    if imports:
        imports[0] = imports[0].with_changes(leading_lines=register.leading_lines)
        register = register.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    block_module = cst.Module(body=[*imports, register, *tail.body])
    lines = _one_line_strings(block_module.code, target).split("\n")
    block = "".join(line.rstrip() + "\n" for line in (lines[:-1] if lines[-1] == "" else lines))  # no indented blank lines
    op_name = f"{fn}_{fingerprint}"
    return Rendered(f"fp4patch::{op_name}", redirect, block.replace(_NAME_SENTINEL, op_name))



def _marked_eager_body(op_def, function: str):
    """``op_def`` (libcst) with its statements after the docstring run inside ``try``/``finally`` with
    ``_fp4patch_<function>_thread.inside_op`` set: while the op's eager body runs, the wrapper it calls
    runs its own code, whatever compile holds ``torch.compiler._is_compiling_flag`` (see ``_TAIL``)."""
    import libcst as cst

    statements = list(op_def.body.body)
    start = 1 if statements and _is_docstring(statements[0]) else 0
    if start == len(statements):
        return op_def
    state = f"_fp4patch_{function}_thread"
    marked = cst.parse_statement(
        "try:\n"
        "    pass\n"
        "finally:\n"
        f"    {state}.inside_op = _fp4patch_outer\n"
    )
    marked = marked.with_changes(body=marked.body.with_changes(body=statements[start:]))
    enter = [
        cst.parse_statement(f"_fp4patch_outer = {state}.inside_op  # the wrapper called below runs its own code\n"),
        cst.parse_statement(f"{state}.inside_op = True\n"),
    ]
    return op_def.with_changes(body=op_def.body.with_changes(body=[*statements[:start], *enter, marked]))


def _one_line_strings(code: str, target: CustomOpTarget) -> str:
    """``code`` with no line break inside a token: each string literal that spans lines is written as
    parenthesized one-line literals (one a source line, implicitly concatenated: the same value and
    the same AST). Every line break of the rendered block is then one that libcst writes with the
    target file's own newline, so a CRLF file stays CRLF on every line after apply.

    Raises:
        OpSourceError: a backslash continues a line, or an f-string spans lines (the message quotes
            its start and names ``target.source_label``): write it on one line in the op source.
    """
    import io
    import tokenize

    starts = [0]
    for line in code.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(position: tuple[int, int]) -> int:
        return starts[position[0] - 1] + position[1]

    out, done, previous = [], 0, 0
    fstring_parts = {getattr(tokenize, name) for name in ("FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, name)}
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        begin, end = offset(token.start), offset(token.end)
        if "\\" in code[previous:begin]:
            raise OpSourceError(
                f"{target.source_label}: a backslash continues the line of {code[max(0, previous - 40):previous].strip()!r}; "
                "fp4patch writes code with the target file's newlines: put it in parentheses instead"
            )
        previous = end
        if "\n" not in token.string or token.type in (tokenize.NEWLINE, tokenize.NL):
            continue
        prefix = token.string[: len(token.string) - len(token.string.lstrip("rRbBuUfF"))].lower()
        if token.type != tokenize.STRING or "f" in prefix or token.type in fstring_parts:
            raise OpSourceError(
                f"{target.source_label}: an f-string spans lines ({token.string.splitlines()[0][:40]!r}...); "
                "fp4patch writes code with the target file's newlines: write it on one line"
            )
        value = ast.literal_eval(token.string)
        newline = b"\n" if isinstance(value, bytes) else "\n"
        pieces = [piece + newline for piece in value.split(newline)]
        pieces[-1] = pieces[-1][:-1]
        pieces = [piece for piece in pieces if piece]
        line = code[starts[token.start[0] - 1] : starts[token.start[0]]]
        indent = line[: len(line) - len(line.lstrip())]
        literal = "".join(f"\n{indent}    {piece!r}" for piece in pieces)
        out.append(code[done:begin] + (f"({literal}\n{indent})" if len(pieces) > 1 else repr(value)))
        done = end
    converted = "".join(out) + code[done:]
    if converted != code and ast.dump(ast.parse(converted)) != ast.dump(ast.parse(code)):
        raise AssertionError(f"{target.source_label}: rewriting string literals changed the code")  # a bug of this function
    return converted


_TAIL = '''
import sys
import threading

# What the redirect first in {fn} reads. Importing the module only defines these: the op is
# registered (about 10 ms) and Dynamo told what to trace once torch._dynamo is imported (torch.compile,
# torch.export, loading an exported program), or when a trace first needs it.
_fp4patch_{fn}_entry = None  # the op source's entry once the op is registered; False: this torch cannot
_fp4patch_{fn}_globals = globals()
_fp4patch_{fn}_lock = threading.Lock()
_fp4patch_{fn}_public = {fn}
_fp4patch_{fn}_callers = {callers}  # functions of this module that call {fn}
_fp4patch_{fn}_compiler_api = getattr(torch, "compiler", None)


def _fp4patch_{fn}_supported_torch():
    # torch {floor} or newer with the APIs below: else {fn} stays as it was, eagerly and under compile
    try:
        major, minor = (int(part) for part in str(torch.__version__).split(".")[:2])
    except (AttributeError, ValueError):
        return False
    return (
        (major, minor) >= {floor_tuple}
        and getattr(getattr(torch, "library", None), "custom_op", None) is not None
        and all(getattr(_fp4patch_{fn}_compiler_api, name, None) is not None for name in ("is_compiling", "is_dynamo_compiling", "substitute_in_graph"))
    )


_fp4patch_{fn}_available = _fp4patch_{fn}_supported_torch()
_fp4patch_{fn}_substitute = getattr(_fp4patch_{fn}_compiler_api, "substitute_in_graph", None)
_fp4patch_{fn}_dynamo = getattr(_fp4patch_{fn}_compiler_api, "is_dynamo_compiling", None) or bool  # Dynamo: True
_fp4patch_{fn}_get_mode = getattr(torch._C, "_get_dispatch_mode", None)
_fp4patch_{fn}_modes = tuple(getattr(getattr(torch._C, "_TorchDispatchModeKey", None), key, None) for key in ("FAKE", "PROXY"))


def _fp4patch_{fn}_ready():
    # Registers the custom op once: True when it is registered, False when this torch cannot.
    global _fp4patch_{fn}_entry
    if _fp4patch_{fn}_entry is None:
        with _fp4patch_{fn}_lock:
            if _fp4patch_{fn}_entry is None:
                _fp4patch_{fn}_entry = _fp4patch_{fn}_with_load_hint(_fp4patch_register_{fn}()) or False
    return _fp4patch_{fn}_entry is not False


class _fp4patch_{fn}_thread_state(threading.local):
    inside_op = False  # while the op's eager body runs in this thread: {fn} runs its own code


_fp4patch_{fn}_thread = _fp4patch_{fn}_thread_state()


def _fp4patch_{fn}_tracing():
    # The redirect's second test, read only while torch.compiler._is_compiling_flag is set. torch 2.13
    # holds the flag for a whole compile, process-wide (pytorch#184614), so real calls see it too:
    # another thread's, Inductor freezing's constant folding, an engine op's eager body. True only
    # when this thread traces a graph (a fake or proxy tensor mode is active here: torch.export's
    # non-strict tracing) through {fn} itself, not a clone, and the op is registered.
    if _fp4patch_{fn}_dynamo():
        # Dynamo traces a copy in place of {fn}'s function objects (_fp4patch_{fn}_on_dynamo), also
        # where torch.compile({fn}) starts, so a body it traces here is a clone's,
        # types.FunctionType({fn}.__code__, namespace): its own code
        return False
    if _fp4patch_{fn}_thread.inside_op or sys._getframe(1).f_globals is not _fp4patch_{fn}_globals:
        return False
    get, modes = _fp4patch_{fn}_get_mode, _fp4patch_{fn}_modes
    if get is not None and None not in modes and all(get(mode) is None for mode in modes):
        return False  # a real call (torch without these internals: through the op, which runs it once)
    return _fp4patch_{fn}_set_whole() and _fp4patch_{fn}_ready()


class _fp4patch_{fn}_flag_from_is_compiling:
    # a torch without torch.compiler._is_compiling_flag: is_compiling() per call (folded under Dynamo)
    @property
    def _is_compiling_flag(self):
        return _fp4patch_{fn}_is_compiling()


class _fp4patch_{fn}_compiler_traced:
    _is_compiling_flag = True


class _fp4patch_{fn}_never_compiling:
    _is_compiling_flag = False


if not _fp4patch_{fn}_available:  # a torch fp4patch does not support: {fn} stays as it was
    _fp4patch_{fn}_compiler = _fp4patch_{fn}_never_compiling
elif hasattr(_fp4patch_{fn}_compiler_api, "_is_compiling_flag"):  # one attribute read per eager call
    _fp4patch_{fn}_compiler = _fp4patch_{fn}_compiler_api
else:
    _fp4patch_{fn}_is_compiling = _fp4patch_{fn}_compiler_api.is_compiling
    _fp4patch_{fn}_compiler = _fp4patch_{fn}_flag_from_is_compiling()


def _fp4patch_{fn}_traced():
    # The redirect's second test in the copy Dynamo traces: marked as a constant result, so Dynamo
    # runs it (registering the op if that is still to do) instead of tracing it.
    return _fp4patch_{fn}_set_whole() and _fp4patch_{fn}_ready()


_fp4patch_{fn}_traceable = {{}}


def _fp4patch_{fn}_unwrap(fn):
    while getattr(fn, "__wrapped__", None) is not None:
        fn = fn.__wrapped__
    return fn


def _fp4patch_{fn}_substitute_layers(fn, traceable, innermost, handed):
    # Dynamo traces `traceable` in place of fn and of each function fn wraps (FlashInfer's decorators:
    # @flashinfer_api logging with FLASHINFER_LOGLEVEL > 0, @backend_requirement; eager calls keep
    # them), with `innermost` in place of the undecorated function too. It is looked up in a dict
    # at module level, so that Dynamo reads its defaults (FlashInfer's _UNSET sentinel) from a source.
    # `handed` (torch < 2.13, where Dynamo starts in the function's own code when it is handed to
    # torch.compile): each of those function objects names `traceable` as the function torch.compile
    # is to start in instead (torch/_dynamo/eval_frame.py, innermost_fn: what torch.compile(torch.compile(f))
    # relies on; torch >= 2.11 follows it only where _torchdynamo_wrapper_id is the object's own id).
    name = fn.__name__
    _fp4patch_{fn}_traceable[name] = traceable

    def _fp4patch_traced_call(*args, **kwargs):
        return _fp4patch_{fn}_traceable[name](*args, **kwargs)

    while fn is not None and (innermost or getattr(fn, "__wrapped__", None) is not None):
        try:
            _fp4patch_{fn}_substitute(fn, skip_signature_check=True)(_fp4patch_traced_call)
        except (TypeError, ValueError):  # already registered
            pass
        if handed and fn is not traceable:
            fn._torchdynamo_orig_callable = traceable
            fn._torchdynamo_wrapper_id = id(fn)
        fn = getattr(fn, "__wrapped__", None)


def _fp4patch_{fn}_on_dynamo():
    # torch._dynamo is imported: Dynamo is to trace, in place of {fn}'s function objects, a copy of
    # its undecorated code that reads the *_traced names, so its redirect enters the op (a clone is
    # another function object: Dynamo traces its own body). Then the op is registered.
    try:
        inner = _fp4patch_{fn}_unwrap(_fp4patch_{fn}_public)
        renamed = {{"_fp4patch_{fn}_compiler": "_fp4patch_{fn}_compiler_traced", "_fp4patch_{fn}_tracing": "_fp4patch_{fn}_traced"}}
        code = inner.__code__
        if not set(renamed) <= set(code.co_names):
            return  # {fn} has no redirect (edited since apply)
        code = code.replace(co_names=tuple(renamed.get(n, n) for n in code.co_names))
        copy = type(inner)(code, inner.__globals__, inner.__name__, inner.__defaults__, inner.__closure__)
        copy.__kwdefaults__ = inner.__kwdefaults__
        constant = getattr(torch._dynamo, "assume_constant_result", None)
        if constant is not None:
            constant(_fp4patch_{fn}_traced)
        handed = not _fp4patch_{fn}_top_level_substituted()
        _fp4patch_{fn}_substitute_layers(_fp4patch_{fn}_public, copy, True, handed)
        for name in _fp4patch_{fn}_callers:
            caller = _fp4patch_{fn}_globals.get(name)
            if caller is not None and getattr(caller, "__wrapped__", None) is not None:
                _fp4patch_{fn}_substitute_layers(caller, _fp4patch_{fn}_unwrap(caller), False, handed)
        _fp4patch_{fn}_ready()
    except Exception as exc:  # an import cycle at this moment, a changed torch API: the trace tries again
        import warnings

        warnings.warn(f"fp4patch: {fn} when torch._dynamo was imported: {{exc!r}}", RuntimeWarning, stacklevel=2)


class _fp4patch_{fn}_dynamo_import:
    # A sys.meta_path finder that finds nothing itself: it wraps torch._dynamo's loader so that its
    # callbacks run right after torch._dynamo is imported, then leaves sys.meta_path. The patched
    # modules share one (each adds its callback to the first one's list).
    def __init__(self, callbacks):
        self._fp4patch_callbacks = callbacks
        self.loader = None

    def find_spec(self, name, path=None, target=None):
        if name != "torch._dynamo" or self.loader is not None:
            return None
        import importlib.util

        self.loader = self
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.loader = None
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return None
        self.loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        callbacks, self._fp4patch_callbacks = self._fp4patch_callbacks, None
        for callback in callbacks:
            callback()


def _fp4patch_{fn}_when_dynamo_imported(callback):
    if "torch._dynamo" in sys.modules:
        return callback()
    for finder in sys.meta_path:
        if isinstance(getattr(finder, "_fp4patch_callbacks", None), list):
            return finder._fp4patch_callbacks.append(callback)
    sys.meta_path.insert(0, _fp4patch_{fn}_dynamo_import([callback]))


def _fp4patch_{fn}_top_level_substituted():
    # Whether torch.compile({fn}) has Dynamo trace the substitute_in_graph copy at the top level
    # (torch >= 2.13: torch/_dynamo/eval_frame.py wraps a polyfilled callable), not {fn}'s own body
    call = getattr(getattr(torch._dynamo.eval_frame, "_TorchDynamoContext", None), "__call__", None)
    return "is_polyfilled_callable" in getattr(getattr(call, "__code__", None), "co_names", ())
'''

#: The block's last statement, after every piece the callback reads (_set_piece's): where torch._dynamo is already
#: imported (an engine imports it before FlashInfer), the callback runs at once.
_ACTIVATE = '''

if _fp4patch_{fn}_available:
    _fp4patch_{fn}_when_dynamo_imported(_fp4patch_{fn}_on_dynamo)
'''


def _set_piece(fn: str) -> str:
    """Two pieces of the rendered block, appended to ``_TAIL``:

    - the check that FlashInfer's patched files loaded in this process are one whole set
      (:mod:`fp4patch.set_stamp`): ``_fp4patch_<fn>_set_whole()``, which the redirect's trace tests call before they
      enter the op; per-apply values (the token) are in the stamp, outside the fingerprinted code;
    - ``_fp4patch_<fn>_with_load_hint(entry)``, the entry the redirect calls once the op is registered: the op's
      node in a graph it traces carries, in its ``custom`` metadata, what a program loaded where FlashInfer was not
      imported needs (torch's deserialization warning prints the node with it).
    """
    return _SET_TAIL.replace("{fn}", fn) + _LOAD_HINT_TAIL.replace("{fn}", fn)


#: What an exported program's fp4patch op node says to whoever loads the program (its ``custom`` metadata).
LOAD_HINT = (
    "this program calls FlashInfer through an fp4patch op: import flashinfer (patched by fp4patch, the same "
    "FlashInfer and fp4patch versions) before torch.export.load"
)

_LOAD_HINT_TAIL = '''

_fp4patch_{fn}_load_hint = {"fp4patch": "''' + LOAD_HINT + '''"}


def _fp4patch_{fn}_with_load_hint(entry):
    # torch.export.load resolves torch.ops.fp4patch.<fn>_<hash> only where this module registered it: elsewhere it
    # fails with a generic error and a warning that prints the op's node. The node carries the hint in its custom
    # metadata: under Dynamo (torch.compile, strict export) through torch.fx.traceback.annotate (torch >= 2.10);
    # while a proxy mode traces (non-strict export, make_fx) it is added to the fp4patch op nodes the call made.
    if entry is None:
        return None
    annotate = getattr(getattr(getattr(torch, "fx", None), "traceback", None), "annotate", None)

    def _fp4patch_{fn}_hinted_entry(*args, **kwargs):
        if _fp4patch_{fn}_dynamo():
            if annotate is None:
                return entry(*args, **kwargs)
            with annotate(_fp4patch_{fn}_load_hint):
                return entry(*args, **kwargs)
        graph = None
        try:
            from torch.fx.experimental.proxy_tensor import get_proxy_mode

            mode = get_proxy_mode()
            graph = mode.tracer.graph if mode is not None else None
            before = len(graph.nodes) if graph is not None else 0
        except Exception:
            graph = None
        out = entry(*args, **kwargs)
        if graph is not None:
            try:
                nodes = reversed(graph.nodes)
                for _ in range(len(graph.nodes) - before):
                    node = next(nodes)
                    if getattr(node.target, "namespace", None) == "fp4patch":
                        node.meta.setdefault("custom", {}).update(_fp4patch_{fn}_load_hint)
            except Exception:
                pass
        return out

    _fp4patch_{fn}_hinted_entry.__wrapped__ = entry  # inspect.signature: the entry's own parameters
    return _fp4patch_{fn}_hinted_entry
'''


_SET_TAIL = '''

def _fp4patch_{fn}_set_whole():
    # fp4patch apply appends to every file it leaves patched the set's stamp, _fp4patch_set = (token, modules,
    # seen): seen is True when fp4patch's record named that token as the module was imported. {fn} traces through
    # the op only when this module's stamp was seen so and every module of the set loaded in this process carries
    # the same token: a process that imported while an apply or revert ran, or after one was killed half-way,
    # never compiles through a half-patched set. Without a stamp (a block run as rendered) there is nothing to check.
    stamp = _fp4patch_{fn}_globals.get("_fp4patch_set")
    if stamp is None:
        return True
    why = None if stamp[2] is True else stamp[2]
    for name in stamp[1] if why is None else ():
        other = getattr(sys.modules.get(name), "_fp4patch_set", None) if name in sys.modules else stamp
        if other is None or other[0] != stamp[0] or other[2] is not True:
            why = name + (" was imported unpatched" if other is None else " was imported from another fp4patch apply")
            break
    if why is None:
        return True
    if not any(getattr(sys.modules.get(name), "_fp4patch_set_warned", False) for name in stamp[1]):
        import warnings

        _fp4patch_{fn}_globals["_fp4patch_set_warned"] = True
        warnings.warn(
            "fp4patch: FlashInfer's patched files loaded in this process are not one whole set (" + why + "), so {fn} "
            "and the other patched functions trace as their unpatched code here; start the process again once "
            "fp4patch apply or revert has finished",
            RuntimeWarning,
            stacklevel=3,
        )
    return False
'''


def plain_source(source: str, helpers: dict[str, str] | None = None) -> str:
    """The op source as plain Python, for every parameter of ``op``: ``**OP_PARAMS`` expanded and the shared
    helpers inlined, the placeholders ``OP`` and ``WRAPPER`` left for the caller to bind.

    What tests execute to run ``entry``/``op``/``fake`` with stand-ins (no release trimming, no registration).

    Args:
        source: text of an op source.
        helpers: text of the helper modules it imports, by module name (:func:`read_helpers`).

    Raises:
        OpSourceError: as :func:`check_op_source`.
    """
    try:
        tree = _parse_source(source)
    except SyntaxError as exc:
        raise OpSourceError(f"line {exc.lineno}: does not parse: {exc.msg}") from None
    op_fn = _op_function(tree)
    params = tuple(_signature(_spliced_op(op_fn, source, dict(helpers or {})))[0]) if op_fn is not None else ()
    target = CustomOpTarget(function="", source=source, source_label="", params=params, helpers=dict(helpers or {}))
    check_op_source(target)
    return _resolve(target).code


def _code(statement) -> str:
    import libcst as cst

    return cst.Module(body=[statement.with_changes(leading_lines=[])]).code.strip()


def _resolve(target: CustomOpTarget, omit_values: dict[str, str] | None = None):
    """``target.source`` as a libcst module with the shared helpers inlined (their imports and functions where
    the relative import stood), ``entry``/``fake`` given op's parameters where they take ``**OP_PARAMS``, and
    ``**OP_PARAMS`` expanded in calls (for every parameter of ``op``: trimming comes after). ``omit_values``:
    code passed for ``p=OMIT`` in an ``OP(...)`` call instead of leaving ``p`` out, for the parameters the
    rendered op declares without a default (:func:`_required_params`: their op default)."""
    import libcst as cst

    module = cst.parse_module(target.source)
    op_def = _splice_cst(next(s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == "op"), target)
    op_params = op_def.params
    names = [p.name.value for p in (*op_params.posonly_params, *op_params.params, *op_params.kwonly_params)]
    inlined: set[str] = set(_splice_names(target.source))  # signature-only helpers: spliced, never inlined
    body = []
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.ImportFrom) and statement.body[0].relative:
            body.extend(_inline(statement, target, inlined))
        elif isinstance(statement, cst.FunctionDef) and statement.name.value == "op":
            body.append(op_def)
        elif isinstance(statement, cst.FunctionDef) and _takes_op_params_cst(statement):
            body.append(statement.with_changes(params=_unannotated(op_params), whitespace_before_params=op_def.whitespace_before_params))
        else:
            body.append(statement)
    return module.with_changes(body=body).visit(_Expand(names, (OP_PLACEHOLDER, WRAPPER_PLACEHOLDER, target.function), omit_values))


@functools.lru_cache(maxsize=64)
def _parse_cst(source: str):
    """``libcst.parse_module(source)`` once per helper module text (libcst trees are immutable)."""
    import libcst as cst

    return cst.parse_module(source)


def _splice_cst(op_def, target: CustomOpTarget):
    """``op_def`` (libcst) with each ``_shared_params: SPLICE`` parameter replaced by the helper's parameters:
    their annotations, defaults and layout, as if typed in its place. On a signature laid out one parameter a
    line, the helper's comment lines stay (those after its ``(`` go before its first parameter) and its last
    parameter takes the SPLICE parameter's comma, or none where SPLICE is op's last without one, with the
    helper's end-of-line comment (the SPLICE parameter's own is dropped); on one line, the parameters are
    joined by ", " and comments dropped. Checked beforehand by :func:`_spliced_op`."""
    import libcst as cst

    spliced = _splice_names(target.source)
    if not spliced:
        return op_def
    imports = helper_imports(target.source)
    lead: dict[int, list] = {}  # position in the new list -> comment lines to put before that parameter

    def after(param):
        """The whitespace ending ``param``: after its comma, else before ")" (a last parameter without one)."""
        return param.comma.whitespace_after if isinstance(param.comma, cst.Comma) else param.whitespace_after_param

    def replace(seq, offset):
        out = []
        for param in seq:
            if param.name.value not in spliced:
                out.append(param)
                continue
            module = next(m for m, names in imports.items() if param.name.value in names)
            helper = next(s for s in _parse_cst(target.helpers[module]).body if isinstance(s, cst.FunctionDef) and s.name.value == param.name.value)
            params = list(helper.params.params)
            own, last = after(param), after(params[-1])
            if not isinstance(own, cst.ParenthesizedWhitespace):  # op on one line
                params = [p.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")), whitespace_after_param=cst.SimpleWhitespace(""))
                          for p in params]
                params[-1] = params[-1].with_changes(comma=param.comma, whitespace_after_param=param.whitespace_after_param)
                out.extend(params)
                continue
            opening = helper.whitespace_before_params
            if isinstance(opening, cst.ParenthesizedWhitespace):
                comment = opening.first_line.comment
                top = [cst.EmptyLine(indent=True, whitespace=opening.last_line, comment=comment)] if comment else []
                lead[offset + len(out)] = [*top, *opening.empty_lines]
            helper_lines = (last.first_line, list(last.empty_lines)) if isinstance(last, cst.ParenthesizedWhitespace) else (cst.TrailingWhitespace(), [])
            ending = own.with_changes(first_line=helper_lines[0], empty_lines=[*helper_lines[1], *own.empty_lines])
            if isinstance(param.comma, cst.Comma):
                params[-1] = params[-1].with_changes(comma=param.comma.with_changes(whitespace_after=ending), whitespace_after_param=param.whitespace_after_param)
            else:
                params[-1] = params[-1].with_changes(comma=param.comma, whitespace_after_param=ending)
            out.extend(params)
        return out

    params = op_def.params
    positional = replace(params.params, 0)
    kwonly = replace(params.kwonly_params, len(positional))
    flat = [*positional, *kwonly]
    before_params = op_def.whitespace_before_params
    star, slash = params.star_arg, params.posonly_ind

    def with_lines(ws, lines):
        return ws.with_changes(empty_lines=[*ws.empty_lines, *lines]) if isinstance(ws, cst.ParenthesizedWhitespace) else ws

    for index, lines in lead.items():
        if index == len(positional) and isinstance(star, cst.ParamStar) and kwonly:  # first after "*,"
            star = star.with_changes(comma=star.comma.with_changes(whitespace_after=with_lines(star.comma.whitespace_after, lines)))
        elif index == 0 and isinstance(slash, cst.ParamSlash) and isinstance(slash.comma, cst.Comma):  # first after "/,"
            slash = slash.with_changes(comma=slash.comma.with_changes(whitespace_after=with_lines(slash.comma.whitespace_after, lines)))
        elif index == 0 and not params.posonly_params:
            before_params = with_lines(before_params, lines)
        elif index > 0 and isinstance(flat[index - 1].comma, cst.Comma):
            previous = flat[index - 1]
            flat[index - 1] = previous.with_changes(comma=previous.comma.with_changes(whitespace_after=with_lines(previous.comma.whitespace_after, lines)))
    positional, kwonly = flat[: len(positional)], flat[len(positional) :]
    return op_def.with_changes(
        whitespace_before_params=before_params,
        params=params.with_changes(params=positional, kwonly_params=kwonly, star_arg=star, posonly_ind=slash),
    )


def _takes_op_params_cst(function) -> bool:
    import libcst as cst

    star = function.params.star_kwarg
    return isinstance(star, cst.Param) and star.name.value == PARAMS_PLACEHOLDER


def _inline(statement, target: CustomOpTarget, inlined: set[str]) -> list:
    """The imports and functions of a helper module that ``from .module import ...`` (``statement``) needs."""
    import libcst as cst

    node = ast.parse(_code(statement)).body[0]
    module = node.module  # type: ignore[attr-defined]
    source = target.helpers[module]
    spliced = _splice_names(target.source)
    names, used = _helper_closure(module, source, tuple(a.name for a in node.names if a.name not in spliced))  # type: ignore[attr-defined]
    helper = _parse_cst(source)
    out = []
    for s in helper.body:
        if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], (cst.Import, cst.ImportFrom)):
            bound = {a.asname or a.name.split(".")[0] for n in ast.parse(_code(s)).body for a in n.names}  # type: ignore[attr-defined]
            if bound & used:
                out.append(s)
    for s in helper.body:
        if isinstance(s, cst.FunctionDef) and s.name.value in names and s.name.value not in inlined:
            inlined.add(s.name.value)
            out.append(s)
    return out


def _unannotated(params):
    """op's parameter list for entry/fake: the same names, defaults and layout, no annotations."""
    import libcst as cst

    tight = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))

    def strip(seq):
        return [p.with_changes(annotation=None, equal=tight if p.default is not None else cst.MaybeSentinel.DEFAULT) for p in seq]

    return params.with_changes(posonly_params=strip(params.posonly_params), params=strip(params.params), kwonly_params=strip(params.kwonly_params))


def _make_expand():
    import libcst as cst

    class Expand(cst.CSTTransformer):
        """``OP(**OP_PARAMS, q=f(q), r=OMIT)`` → ``OP(p=p, q=f(q), s=s)``: every op parameter in signature order."""

        def __init__(self, names: list[str], callees: tuple[str, ...], omit_values: dict[str, str] | None = None) -> None:
            super().__init__()
            self.names = names
            self.callees = callees
            self.omit_values = omit_values or {}  # OP(p=OMIT) passes this code for p instead of leaving it out

        def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
            if not (isinstance(updated_node.func, cst.Name) and updated_node.func.value in self.callees):
                return updated_node
            args = list(updated_node.args)
            if not any(a.star == "**" and isinstance(a.value, cst.Name) and a.value.value == PARAMS_PLACEHOLDER for a in args):
                return updated_node
            explicit = {a.keyword.value: a for a in args if a.keyword is not None}
            tight = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
            # The expansion follows the call's layout: one argument per line where the source puts its first
            # argument on a line of its own, ", " otherwise; the last argument closes the call as in the source.
            before = updated_node.whitespace_before_args
            if isinstance(before, cst.ParenthesizedWhitespace):
                separator = cst.Comma(whitespace_after=cst.ParenthesizedWhitespace(indent=before.indent, last_line=before.last_line))
            else:
                separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            closing = args[-1].comma
            out = []
            omit_values = self.omit_values if updated_node.func.value == OP_PLACEHOLDER else {}
            for name in self.names:
                arg = explicit.get(name)
                if arg is None:
                    out.append(cst.Arg(keyword=cst.Name(name), value=cst.Name(name), equal=tight))
                elif not (isinstance(arg.value, cst.Name) and arg.value.value == OMIT_PLACEHOLDER):
                    out.append(arg)
                elif name in omit_values:
                    out.append(arg.with_changes(value=cst.parse_expression(omit_values[name])))
            return updated_node.with_changes(
                args=[a.with_changes(comma=_layout_comma(separator if i < len(out) - 1 else closing, a.comma)) for i, a in enumerate(out)]
            )

    return Expand


def _layout_comma(layout, own):
    """``layout`` (the separator or the call's closing comma) carrying the end-of-line comment of ``own``, an
    explicit argument's comma in the source (a comment stays with its argument wherever the expansion puts it)."""
    import libcst as cst

    if not (isinstance(layout, cst.Comma) and isinstance(layout.whitespace_after, cst.ParenthesizedWhitespace)):
        return layout
    own_line = own.whitespace_after.first_line if isinstance(own, cst.Comma) and isinstance(own.whitespace_after, cst.ParenthesizedWhitespace) else cst.TrailingWhitespace()
    return layout.with_changes(whitespace_after=layout.whitespace_after.with_changes(first_line=own_line))


def _Expand(names: list[str], callees: tuple[str, ...], omit_values: dict[str, str] | None = None):
    """The libcst transformer of :func:`_make_expand` (built on first use: libcst loads lazily)."""
    return _make_expand()(names, callees, omit_values)


def _redirect(target: CustomOpTarget) -> str:
    fn = target.function
    arguments = "".join(f"        {p}={p},\n" for p in target.params)
    return f"if _fp4patch_{fn}_compiler._is_compiling_flag and _fp4patch_{fn}_tracing():\n{_carried_guard(target)}    return _fp4patch_{fn}_entry(\n{arguments}    )\n"


def _carried_guard(target: CustomOpTarget) -> str:
    """The statements a carried target (``target.carried``) puts first in the redirect, while compiling: for each
    parameter the installed wrapper added with a default, a call with another value is refused with fp4patch's
    own first line (``_fp4patch_<fn>_refuse_carried``, :func:`_carried_refusal`), never forwarded to an op that was
    verified without it and never dropped; at the default the wrapper, which the op calls, takes that default
    itself. "" for a target that carries nothing (the rendering of every spec target)."""
    fn = target.function
    lines = []
    for name, default in target.carried:
        if default in ("None", "True", "False"):
            same = f"{name} is {default}"
        elif _is_literal(default):  # never `is` with a literal (a SyntaxWarning, and no meaning for equal values)
            same = f"type({name}) is type({default}) and {name} == {default}"
        else:  # a dotted name (an enum member): the same object, or an equal value of its type
            same = f"{name} is {default} or (type({name}) is type({default}) and {name} == {default})"
        lines.append(f"    if not ({same}):  # {name}: new in FlashInfer {target.carried_release}, checked at its default only\n")
        lines.append(f"        _fp4patch_{fn}_refuse_carried({name!r}, {name}, {default!r})\n")
    return "".join(lines)


def _is_literal(code: str) -> bool:
    try:
        ast.literal_eval(code)
    except (ValueError, SyntaxError):
        return False
    return True


def _carried_refusal(target: CustomOpTarget) -> str:
    """Module code appended to a carried target's op block (after the tail): ``_fp4patch_<fn>_refuse_carried``,
    the refusal :func:`_carried_guard` calls. Once ``torch._dynamo`` is imported it is marked
    ``assume_constant_result``, so Dynamo calls it for real while tracing instead of tracing it (Dynamo cannot
    trace the construction of its exception); it raises ``torch._dynamo.exc.Unsupported``, which Dynamo passes on
    as it is: under ``fullgraph=True`` its message is the first line, without it a graph break, so the call runs
    eagerly with the caller's value. ``NotImplementedError`` where torch has no Dynamo. "" when nothing is carried."""
    if not target.carried:
        return ""
    fn, release, verified = target.function, target.carried_release, target.carried_from
    return f'''

def _fp4patch_{fn}_refuse_carried(name, value, default):
    """Refuse, under compile, a value of a parameter FlashInfer {release} added to {fn}() other than its default."""
    shown = repr(value) if isinstance(value, (bool, int, float, str, type(None))) else "<" + type(value).__name__ + ">"
    message = (
        f"fp4patch: {fn}({{name}}={{shown}}) is not supported under torch.compile on FlashInfer {release} "
        f"({{name}} is new in {release}: fp4patch carries the op verified on {verified}, checked at the default "
        f"{{name}}={{default}} only); call it outside the compiled region, or with the default"
    )
    try:
        from torch._dynamo.exc import Unsupported
    except ImportError:  # a torch without Dynamo
        raise NotImplementedError(message) from None
    raise Unsupported(message)


def _fp4patch_{fn}_mark_refusal():
    constant = getattr(torch._dynamo, "assume_constant_result", None)
    if constant is not None:
        constant(_fp4patch_{fn}_refuse_carried)


if _fp4patch_{fn}_available:
    _fp4patch_{fn}_when_dynamo_imported(_fp4patch_{fn}_mark_refusal)
'''


def source_defaults(target: CustomOpTarget) -> dict[str, str]:
    """Each parameter of ``target``'s op source → its default as source text: the target's
    ``[target.operation.defaults]`` for the release's own parameters, else the op source's (what an
    absent parameter is bound to); parameters without a default are left out.

    Raises:
        OpSourceError: as :func:`check_op_source`.
    """
    op_fn = _spliced_op(_op_function(_parse_source(target.source)), target.source, target.helpers)
    names, defaults = _signature(op_fn)
    out = {name: ast.unparse(defaults[name]) for name in names if name in defaults}
    out.update({k: v for k, v in target.defaults.items() if k in target.params})
    return out


def _absent_params(target: CustomOpTarget) -> dict[str, str]:
    """Parameters of the op source absent in this release → the source default's code."""
    op_fn = _spliced_op(_op_function(_parse_source(target.source)), target.source, target.helpers)
    names, defaults = _signature(op_fn)
    return {name: ast.unparse(defaults[name]) for name in names if name not in target.params}


def _mutated_params(target: CustomOpTarget) -> tuple[str, ...]:
    """The names the rendered ``MUTATES_ARGS`` holds for ``target``: the op source's expression (a tuple
    literal, or ``tuple(RELEASE["mutates"])``) evaluated with the release's ``RELEASE``; ``()`` when absent.

    Raises:
        OpSourceError: ``MUTATES_ARGS`` is not a tuple of names computed from constants and ``RELEASE``.
    """
    for node in _parse_source(target.source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "MUTATES_ARGS":
            try:
                value = eval(compile(ast.Expression(node.value), target.source_label or "<op source>", "eval"),  # noqa: S307
                             {"__builtins__": {}, "RELEASE": release_data(target), "tuple": tuple, "list": list})
            except Exception as exc:
                raise OpSourceError(f"line {node.lineno}: MUTATES_ARGS must be computed from constants and RELEASE ({exc})") from None
            if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
                raise OpSourceError(f"line {node.lineno}: MUTATES_ARGS must be a tuple of parameter names")
            return tuple(value)
    return ()


def _required_params(target: CustomOpTarget, absent: dict[str, str]) -> frozenset[str]:
    """op's parameters up to its last mutated one (``MUTATES_ARGS``), which the rendered ``op`` (the schema's source;
    ``entry`` and ``fake`` keep them) declares without a default: torch before 2.13 hands a custom op's mutation bookkeeping (``ADInplaceOrView``) its arguments
    with trailing ones equal to their default left out, then reads the mutated ones by position
    (``torch/_library/custom_ops.py``, ``adinplaceorview_impl``: ``IndexError`` for ``output=None``). A
    mutated parameter without a default is never left out, nor any before it. Empty for an op that
    mutates nothing, whose rendering is unchanged."""
    mutated = set(_mutated_params(target))
    if not mutated:
        return frozenset()
    op_fn = _spliced_op(_op_function(_parse_source(target.source)), target.source, target.helpers)
    positional = [a.arg for a in (*op_fn.args.posonlyargs, *op_fn.args.args) if a.arg not in absent]
    last = max((i for i, name in enumerate(positional) if name in mutated), default=-1)
    return frozenset(positional[: last + 1])


def _op_defaults(target: CustomOpTarget) -> dict[str, str]:
    """op's default of each parameter as code: the op source's, then the release's ``defaults``."""
    op_fn = _spliced_op(_op_function(_parse_source(target.source)), target.source, target.helpers)
    return {**{name: ast.unparse(code) for name, code in _signature(op_fn)[1].items()}, **target.defaults}


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

    merged = release_data(target)
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

        def __init__(self, absent: dict[str, str], defaults: dict[str, str], wrapper: str, required: frozenset[str] = frozenset()) -> None:
            super().__init__()
            self.absent = absent
            self.defaults = defaults
            self.wrapper = wrapper
            self.required = required  # op declares these without a default (_required_params)
            self.depth = 0

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            self.depth += 1
            return True

        def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
            self.depth -= 1
            if self.depth:
                return updated_node
            params = updated_node.params
            required = self.required if updated_node.name.value == "op" else frozenset()  # the schema's source

            def keep(seq):
                out = []
                for p in seq:
                    if p.name.value in self.absent:
                        continue
                    if p.name.value in required:
                        p = p.with_changes(default=None, equal=cst.MaybeSentinel.DEFAULT)
                    elif p.name.value in self.defaults:
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


def _Trim(absent: dict[str, str], defaults: dict[str, str], wrapper: str, required: frozenset[str] = frozenset()):
    """The libcst transformer of :func:`_make_trim` (built on first use: libcst loads lazily)."""
    return _make_trim()(absent, defaults, wrapper, required)
