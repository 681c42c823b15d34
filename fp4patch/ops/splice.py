"""``name: SPLICE`` in ``op``'s signature: a shared parameter list (``docs/op-source.md``, SPLICE).

Owns the signature-only helpers of a helper module (plain annotated parameters and a docstring for a body)
that ``op`` names as one parameter annotated ``SPLICE``: finding those parameters (:func:`_splice_markers`,
:func:`_splice_names`), checking and splicing them into ``op``'s :mod:`ast` signature for the checks
(:func:`_spliced_op`), and into its libcst signature for rendering, with their annotations, defaults,
comments and layout (:func:`_splice_cst`). Spliced before anything else is rendered, so every later step
sees the spliced parameters as ``op``'s own; a spliced helper is never inlined.

May import: the standard library, libcst (inside functions), :mod:`fp4patch.ops.source` and
:mod:`fp4patch.ops.helpers` (which helper module a name comes from, its functions).
"""

from __future__ import annotations

import ast
import builtins
import copy

from .helpers import _helper_module, helper_imports
from .source import (
    SPLICE_PLACEHOLDER,
    CustomOpTarget,
    Example,
    OpSourceError,
    _op_function,
    _parse_cst,
    _parse_source,
    _used_names,
    _with_defaults,
)


def _splice_markers(fn: ast.FunctionDef) -> list[ast.arg]:
    """``fn``'s parameters annotated ``SPLICE`` (``_shared_params: SPLICE``), in order."""
    args = fn.args
    return [
        a for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
        if isinstance(a.annotation, ast.Name) and a.annotation.id == SPLICE_PLACEHOLDER
    ]


def _splice_names(source: str) -> frozenset[str]:
    """Names of the signature-only helpers ``op`` splices (imported, but not inlined as functions)."""
    op_fn = _op_function(_parse_source(source))
    return frozenset(a.arg for a in _splice_markers(op_fn)) if op_fn is not None else frozenset()


def _signature_only(fn: ast.FunctionDef) -> bool:
    """``def _f(p: T, q: U = 1):`` with a docstring, ``...`` or ``pass`` for its body, nothing else."""
    args = fn.args
    if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or fn.returns or fn.decorator_list:
        return False
    return all(
        isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and (s.value.value is Ellipsis or isinstance(s.value.value, str)))
        for s in fn.body
    )


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


def _spliced_op(op_fn: ast.FunctionDef, source: str, helpers: dict[str, str]) -> ast.FunctionDef:
    """``op`` with each ``_shared_params: SPLICE`` parameter replaced by the parameters of the signature-only
    helper ``_shared_params`` (imported from a helper module); ``op_fn`` itself when it splices nothing.

    Args:
        op_fn: the op source's ``def op`` (from :func:`~fp4patch.ops.source._parse_source`; left unchanged).
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


def _spliced_op_of(target: CustomOpTarget) -> ast.FunctionDef:
    """``target``'s ``op`` (:mod:`ast`), spliced (:func:`_spliced_op`); raises as that."""
    return _spliced_op(_op_function(_parse_source(target.source)), target.source, target.helpers)


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



_PARAMS_HELPER = '''\
"""Parameter lists the quantize op sources share."""
from typing import Optional

import torch


def _quantize_params(
    alignment: int = 32,
    scale: Optional[torch.Tensor] = None,  # per-tensor, float32
):
    """Signature only."""
'''

_SPLICES = '''\
import torch

from ._params import _quantize_params


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS)


def op(input: torch.Tensor, _quantize_params: SPLICE) -> torch.Tensor:
    return WRAPPER(**OP_PARAMS)


def fake(**OP_PARAMS):
    return input.new_empty(input.shape)
'''

_SIGNATURE_ONLY = 'def _quantize_params(alignment: int = 32):\n    """Signature only."""\n'

EXAMPLES = [
    Example(
        name="a signature laid out one parameter a line: the helper's parameters with their comments",
        written='''\
from typing import Optional

import torch

from ._params import _quantize_params


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS)


def op(
    input: torch.Tensor,
    _quantize_params: SPLICE,
    backend: str = "auto",
) -> torch.Tensor:
    return WRAPPER(**OP_PARAMS)


def fake(**OP_PARAMS):
    return input.new_empty(input.shape)
''',
        helpers={"_params": _PARAMS_HELPER},
        plain='''\
from typing import Optional

import torch


def entry(
    input,
    alignment=32,
    scale=None,  # per-tensor, float32
    backend="auto",
):
    return OP(input=input, alignment=alignment, scale=scale, backend=backend)


def op(
    input: torch.Tensor,
    alignment: int = 32,
    scale: Optional[torch.Tensor] = None,  # per-tensor, float32
    backend: str = "auto",
) -> torch.Tensor:
    return WRAPPER(input=input, alignment=alignment, scale=scale, backend=backend)


def fake(
    input,
    alignment=32,
    scale=None,  # per-tensor, float32
    backend="auto",
):
    return input.new_empty(input.shape)
''',
    ),
    Example(
        name="a one-line signature: the helper's parameters joined by ', ', comments dropped",
        written=_SPLICES.replace("import torch\n", "from typing import Optional\n\nimport torch\n", 1),
        helpers={"_params": _PARAMS_HELPER},
        plain='''\
from typing import Optional

import torch


def entry(input, alignment=32, scale=None):
    return OP(input=input, alignment=alignment, scale=scale)


def op(input: torch.Tensor, alignment: int = 32, scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    return WRAPPER(input=input, alignment=alignment, scale=scale)


def fake(input, alignment=32, scale=None):
    return input.new_empty(input.shape)
''',
    ),
    Example(
        name="a spliced parameter absent in the release is trimmed like any other",
        written=_SPLICES.replace("import torch\n", "from typing import Optional\n\nimport torch\n", 1),
        helpers={"_params": _PARAMS_HELPER},
        target={"params": ("input", "alignment")},
        rendered=('''\
    def op(input: torch.Tensor, alignment: int = 32) -> torch.Tensor:
        scale = None  # not a parameter of this release
''',),
    ),
    Example(
        name="a SPLICE parameter with a default",
        written=_SPLICES.replace("_quantize_params: SPLICE)", "_quantize_params: SPLICE = None)"),
        helpers={"_params": _SIGNATURE_ONLY},
        refused="line 10: '_quantize_params: SPLICE' takes no default; the spliced parameters carry their own",
    ),
    Example(
        name="a SPLICE parameter not imported from a helper module",
        written=_SPLICES.replace("\nfrom ._params import _quantize_params\n", ""),
        refused="line 8: op() splices _quantize_params: import it from its helper module ('from ._module import _quantize_params')",
    ),
    Example(
        name="a spliced helper with a body",
        written=_SPLICES,
        helpers={"_params": "def _quantize_params(alignment: int = 32):\n    return alignment\n"},
        refused="_params.py:1: _quantize_params is spliced into op(), so it is a signature only: plain parameters (no /, *, **), "
        "no return annotation or decorator, and a docstring for its body",
    ),
    Example(
        name="a spliced helper without parameters",
        written=_SPLICES,
        helpers={"_params": 'def _quantize_params():\n    """Signature only."""\n'},
        refused="_params.py:1: _quantize_params declares no parameters; give it the parameters to splice or drop '_quantize_params: SPLICE'",
    ),
    Example(
        name="a spliced parameter op declares too",
        written=_SPLICES.replace("_quantize_params: SPLICE)", "_quantize_params: SPLICE, alignment: int = 16)"),
        helpers={"_params": _SIGNATURE_ONLY},
        refused="_params.py:1: parameter 'alignment' of _quantize_params is op()'s own too (or spliced twice); keep one",
    ),
    Example(
        name="a spliced parameter without an annotation",
        written=_SPLICES,
        helpers={"_params": 'def _quantize_params(alignment=32):\n    """Signature only."""\n'},
        refused="_params.py:1: parameter 'alignment' of _quantize_params has no annotation; a spliced parameter carries its schema type",
    ),
    Example(
        name="a spliced annotation using a name the op source does not import",
        written=_SPLICES,
        helpers={"_params": _PARAMS_HELPER},
        refused="_params.py:7: parameter 'scale' of _quantize_params uses Optional, which the op source does not import; import it there",
    ),
    Example(
        name="a parameter without a default after the spliced defaults",
        written=_SPLICES.replace("_quantize_params: SPLICE)", "_quantize_params: SPLICE, mode: int)"),
        helpers={"_params": _SIGNATURE_ONLY},
        refused="line 10: once spliced, op()'s parameter 'mode' has no default but follows one that has; "
        "move the SPLICE parameter or give the parameters after it defaults",
    ),
    Example(
        name="SPLICE elsewhere than as an annotation of op's parameter",
        written=_SPLICES.replace("def fake(**OP_PARAMS):\n", "def fake(**OP_PARAMS):\n    assert SPLICE\n"),
        helpers={"_params": _SIGNATURE_ONLY},
        refused="line 15: SPLICE stands only as the annotation of a parameter of op() ('_shared_params: SPLICE')",
    ),
    Example(
        name="the spliced helper used as a function",
        written=_SPLICES.replace("def fake(**OP_PARAMS):\n", "def fake(**OP_PARAMS):\n    _quantize_params(alignment)\n"),
        helpers={"_params": _SIGNATURE_ONLY},
        refused="line 15: _quantize_params is a parameter list spliced into op(), not a function to use",
    ),
]
