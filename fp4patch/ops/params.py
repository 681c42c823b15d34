"""``**OP_PARAMS``: op's parameter list in ``entry``/``fake`` and every parameter in a call (``docs/op-source.md``).

Owns the placeholder ``OP_PARAMS`` and the keywords written after it: ``def entry(**OP_PARAMS):`` /
``def fake(**OP_PARAMS):`` take ``op``'s parameters (names, defaults, layout; no annotations), and
``OP(**OP_PARAMS, q=f(q), r=OMIT)`` / ``WRAPPER(**OP_PARAMS, ...)`` pass every parameter of ``op`` by keyword in
signature order, an explicit keyword in its place with its comment (:func:`_Expand`; what ``OMIT`` becomes is
:mod:`fp4patch.ops.omit`'s). Also the one walk that finds every placeholder standing where it does not expand
(``OP_PARAMS``, ``OMIT``, ``SPLICE``, a spliced helper's name), so the first in the source is the one reported
(:func:`_check_placeholders`). Expansion covers every parameter of ``op``; trimming for a release comes after
(:mod:`fp4patch.ops.trim`).

May import: the standard library, libcst (inside functions), :mod:`fp4patch.ops.source`, :mod:`fp4patch.ops.omit`
and :mod:`fp4patch.ops.splice` (which parameters of ``op`` are spliced).
"""

from __future__ import annotations

import ast
import functools

from .omit import _is_omit, _omitted
from .source import (
    OMIT_PLACEHOLDER,
    OP_PLACEHOLDER,
    PARAMS_PLACEHOLDER,
    SPLICE_PLACEHOLDER,
    WRAPPER_PLACEHOLDER,
    Example,
    OpSourceError,
    _op_function,
    _parse_source,
)
from .splice import _splice_markers


def _takes_op_params(fn: ast.FunctionDef) -> bool:
    """True for ``def entry(**OP_PARAMS):`` (the placeholder alone): op's parameter list."""
    args = fn.args
    return args.kwarg is not None and args.kwarg.arg == PARAMS_PLACEHOLDER and not (args.posonlyargs or args.args or args.vararg or args.kwonlyargs)


def _signature(fn: ast.FunctionDef) -> tuple[list[str], dict[str, ast.expr]]:
    """``fn``'s parameter names in order and each one's default (:mod:`ast`).

    Raises:
        OpSourceError: ``fn`` takes ``**OP_PARAMS`` (``op``, or beside other parameters), or ``*args``/``**kwargs``.
    """
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


def _check_signatures(functions: dict[str, ast.FunctionDef], names: list[str], defaults: dict[str, ast.expr]) -> None:
    """``entry`` and ``fake`` take ``**OP_PARAMS`` alone, or ``op``'s parameter ``names`` and ``defaults`` exactly.

    Raises:
        OpSourceError: as :func:`_signature`, or an explicit list that differs from ``op``'s.
    """
    for name in ("entry", "fake"):
        if _takes_op_params(functions[name]):
            continue
        own_names, own_defaults = _signature(functions[name])
        if own_names != names or {k: ast.dump(v) for k, v in own_defaults.items()} != {k: ast.dump(v) for k, v in defaults.items()}:
            raise OpSourceError(
                f"{name}() and op() must take the same parameters in the same order with the same defaults; "
                f"write 'def {name}(**OP_PARAMS):' to take op()'s"
            )


@functools.lru_cache(maxsize=256)
def _check_placeholders(source: str, op_names: tuple[str, ...], function: str) -> None:
    """``OP_PARAMS`` / ``OMIT`` / ``SPLICE`` stand only where the renderer expands them (once per source, op
    parameters and function: a spec's targets share them).

    Raises:
        OpSourceError: ``**OP_PARAMS`` in another signature, in a call to another function or beside a positional
            argument or another ``**mapping``; a keyword after it that is not op's parameter or is named twice;
            ``OP_PARAMS``, ``OMIT`` or ``SPLICE`` elsewhere; a spliced helper's name used.
    """
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


def _takes_op_params_cst(function) -> bool:
    """libcst's :func:`_takes_op_params`: ``function`` declares ``**OP_PARAMS``."""
    import libcst as cst

    star = function.params.star_kwarg
    return isinstance(star, cst.Param) and star.name.value == PARAMS_PLACEHOLDER


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
            for name in self.names:
                arg = explicit.get(name)
                if arg is None:
                    out.append(cst.Arg(keyword=cst.Name(name), value=cst.Name(name), equal=tight))
                elif not _is_omit(arg):
                    out.append(arg)
                else:
                    out.extend(_omitted(arg, name, updated_node.func.value, self.omit_values))
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
    """The libcst transformer of :func:`_make_expand` (built on first use: libcst loads lazily).

    Args:
        names: op's parameters, in signature order (spliced).
        callees: the names whose calls expand (``OP``, ``WRAPPER``, the wrapper's own name).
        omit_values: code an ``OP(..., p=OMIT)`` passes for ``p`` (:func:`fp4patch.ops.omit._omit_values`).
    """
    return _make_expand()(names, callees, omit_values)


def _source(entry: str = "def entry(**OP_PARAMS):\n    return OP(**OP_PARAMS)\n",
            op: str = "def op(input: torch.Tensor, alignment: int = 32) -> torch.Tensor:\n    return WRAPPER(**OP_PARAMS)\n",
            fake: str = "def fake(**OP_PARAMS):\n    return input.new_empty(input.shape)\n") -> str:
    """An op source of ``entry``, ``op`` and ``fake`` (each a function's text), as the examples write it."""
    return f"import torch\n\n\n{entry}\n\n{op}\n\n{fake}"


EXAMPLES = [
    Example(
        name="entry and fake take op's parameters, laid out as op's",
        written=_source(op="def op(\n    input: torch.Tensor,\n    alignment: int = 32,\n    mode: int = 0,\n) -> torch.Tensor:\n"
                           "    return WRAPPER(**OP_PARAMS)\n"),
        plain='''\
import torch


def entry(
    input,
    alignment=32,
    mode=0,
):
    return OP(input=input, alignment=alignment, mode=mode)


def op(
    input: torch.Tensor,
    alignment: int = 32,
    mode: int = 0,
) -> torch.Tensor:
    return WRAPPER(input=input, alignment=alignment, mode=mode)


def fake(
    input,
    alignment=32,
    mode=0,
):
    return input.new_empty(input.shape)
''',
    ),
    Example(
        name="an explicit list equal to op's, and a call that puts its first argument on a line of its own",
        written=_source(entry="def entry(input, alignment=32):\n    return OP(\n        **OP_PARAMS,\n    )\n"),
        plain='''\
import torch


def entry(input, alignment=32):
    return OP(
        input=input,
        alignment=alignment,
    )


def op(input: torch.Tensor, alignment: int = 32) -> torch.Tensor:
    return WRAPPER(input=input, alignment=alignment)


def fake(input, alignment=32):
    return input.new_empty(input.shape)
''',
    ),
    Example(
        name="a keyword after **OP_PARAMS replaces that parameter's p=p in place, with its comment",
        written=_source(
            entry="def entry(**OP_PARAMS):\n    return OP(\n        **OP_PARAMS,\n        mode=_as_int(mode),  # an enum crosses as int\n    )\n",
            op="def op(input: torch.Tensor, mode: int = 0, alignment: int = 32) -> torch.Tensor:\n"
               "    return WRAPPER(**OP_PARAMS, mode=Mode(mode))\n",
        ),
        plain='''\
import torch


def entry(input, mode=0, alignment=32):
    return OP(
        input=input,
        mode=_as_int(mode),  # an enum crosses as int
        alignment=alignment,
    )


def op(input: torch.Tensor, mode: int = 0, alignment: int = 32) -> torch.Tensor:
    return WRAPPER(input=input, mode=Mode(mode), alignment=alignment)


def fake(input, mode=0, alignment=32):
    return input.new_empty(input.shape)
''',
    ),
    Example(
        name="WRAPPER becomes the wrapper's name, and the wrapper called by its own name expands too",
        written=_source(fake="def fake(**OP_PARAMS):\n    return quantize(**OP_PARAMS)\n"),
        target={"params": ("input", "alignment")},
        rendered=(
            '''\
            return quantize(input=input, alignment=alignment)
''',
            '''\
    def fake(input, alignment=32):
        return quantize(input=input, alignment=alignment)
''',
        ),
    ),
    Example(
        name="op taking **OP_PARAMS",
        written=_source(op="def op(**OP_PARAMS):\n    return WRAPPER(**OP_PARAMS)\n"),
        refused="op() spells out its parameters (with schema annotations); only entry and fake take **OP_PARAMS",
    ),
    Example(
        name="**OP_PARAMS beside other parameters",
        written=_source(entry="def entry(input, **OP_PARAMS):\n    return OP(**OP_PARAMS)\n"),
        refused="entry(**OP_PARAMS) stands alone: write def entry(**OP_PARAMS): for op()'s parameters, or list them all",
    ),
    Example(
        name="an explicit list that differs from op's",
        written=_source(fake="def fake(input, alignment=16):\n    return input.new_empty(input.shape)\n"),
        refused="fake() and op() must take the same parameters in the same order with the same defaults; "
        "write 'def fake(**OP_PARAMS):' to take op()'s",
    ),
    Example(
        name="*args and **kwargs",
        written=_source(entry="def entry(*args, **kwargs):\n    return OP(*args, **kwargs)\n"),
        refused="entry() takes *args/**kwargs; list every parameter by name",
    ),
    Example(
        name="a private helper taking **OP_PARAMS",
        written=_source().replace("\n\ndef entry", "\n\ndef _check(**OP_PARAMS):\n    torch._check(alignment % 32 == 0)\n\n\ndef entry"),
        refused="line 4: only entry and fake take **OP_PARAMS",
    ),
    Example(
        name="**OP_PARAMS beside a positional argument",
        written=_source(entry="def entry(**OP_PARAMS):\n    return OP(input, **OP_PARAMS)\n"),
        refused="line 5: OP(**OP_PARAMS, ...) takes no positional argument and no other **mapping",
    ),
    Example(
        name="**OP_PARAMS in a call to another function",
        written=_source(fake="def fake(**OP_PARAMS):\n    return torch.empty_like(**OP_PARAMS)\n"),
        refused="line 13: **OP_PARAMS stands only in a call to OP or WRAPPER, not torch.empty_like()",
    ),
    Example(
        name="OP_PARAMS as a value",
        written=_source(entry="def entry(**OP_PARAMS):\n    names = OP_PARAMS\n    return OP(**OP_PARAMS)\n"),
        refused="line 5: OP_PARAMS stands only in 'def entry(**OP_PARAMS):', 'def fake(**OP_PARAMS):' and calls "
        "'OP(**OP_PARAMS, p=OMIT)' / 'WRAPPER(**OP_PARAMS, ...)'",
    ),
    Example(
        name="a keyword that is not op's parameter",
        written=_source(entry="def entry(**OP_PARAMS):\n    return OP(**OP_PARAMS, modes=int(alignment))\n"),
        refused="line 5: OP(**OP_PARAMS, modes=...): 'modes' is not a parameter of op(); name each of op()'s parameters at most once",
    ),
    Example(
        name="a keyword named twice",
        written=_source(entry="def entry(**OP_PARAMS):\n    return OP(**OP_PARAMS, alignment=32, alignment=16)\n"),
        refused="line 5: OP(**OP_PARAMS, alignment=...): 'alignment' is named twice; name each of op()'s parameters at most once",
    ),
]
