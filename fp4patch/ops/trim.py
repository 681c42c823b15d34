"""Trimming for a release: absent parameters, per-release defaults, ``WRAPPER`` (``docs/op-source.md``).

Owns what changes with the target's ``params`` and ``defaults`` once ``**OP_PARAMS`` is expanded: a parameter
of the op source the release lacks is dropped from the signatures and from the calls to ``OP``, ``WRAPPER``
and the wrapper, and bound to its default after each function's docstring (:func:`_absent_params`,
:func:`_bind_absent`); ``[target.operation.defaults]`` replaces defaults in the signatures; ``WRAPPER``
becomes the wrapper's name; the parameters :func:`fp4patch.ops.mutates._required_params` names lose their
default in ``op`` (:func:`_Trim`). Also the checks of ``params`` and ``defaults`` (:func:`_check_release_params`)
and the defaults as source text (:func:`source_defaults`).

May import: the standard library, libcst (inside functions), :mod:`fp4patch.ops.source`,
:mod:`fp4patch.ops.splice` (``op``'s spliced signature) and :mod:`fp4patch.ops.params` (reading a signature).
"""

from __future__ import annotations

import ast

from .params import _signature
from .source import OP_PLACEHOLDER, WRAPPER_PLACEHOLDER, CustomOpTarget, Example, OpSourceError, _is_docstring
from .splice import _spliced_op_of


def source_defaults(target: CustomOpTarget) -> dict[str, str]:
    """Each parameter of ``target``'s op source → its default as source text: the target's
    ``[target.operation.defaults]`` for the release's own parameters, else the op source's (what an
    absent parameter is bound to); parameters without a default are left out.

    Args:
        target: a :class:`~fp4patch.ops.source.CustomOpTarget` that :func:`fp4patch.ops.check.check_op_source` accepts.

    Raises:
        OpSourceError: as :func:`fp4patch.ops.check.check_op_source`.
    """
    names, defaults = _signature(_spliced_op_of(target))
    out = {name: ast.unparse(defaults[name]) for name in names if name in defaults}
    out.update({k: v for k, v in target.defaults.items() if k in target.params})
    return out


def _absent_params(target: CustomOpTarget) -> dict[str, str]:
    """Parameters of the op source absent in this release → the source default's code."""
    names, defaults = _signature(_spliced_op_of(target))
    return {name: ast.unparse(defaults[name]) for name in names if name not in target.params}


def _op_defaults(target: CustomOpTarget) -> dict[str, str]:
    """op's default of each parameter as code: the op source's, then the release's ``defaults``."""
    return {**{name: ast.unparse(code) for name, code in _signature(_spliced_op_of(target))[1].items()}, **target.defaults}


def _check_release_params(target: CustomOpTarget, names: list[str], defaults: dict[str, ast.expr]) -> None:
    """``target.params`` and ``target.defaults`` against op's parameter ``names`` and ``defaults`` (spliced).

    Raises:
        OpSourceError: a release parameter the op source does not know; an absent parameter without a default
            to bind it to; a ``defaults`` entry for a parameter the release lacks, or one that is not an expression.
    """
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
    """The libcst transformer of :func:`_make_trim` (built on first use: libcst loads lazily).

    Args:
        absent: op's parameters the release lacks → their default's code (:func:`_absent_params`).
        defaults: the release's ``defaults`` (parameter → expression).
        wrapper: the wrapper's name, for ``WRAPPER``.
        required: parameters ``op`` declares without a default (:func:`fp4patch.ops.mutates._required_params`).
    """
    return _make_trim()(absent, defaults, wrapper, required)


_WRITTEN = '''\
import torch


def entry(**OP_PARAMS):
    """Called while compiling."""
    return OP(**OP_PARAMS)


def op(input: torch.Tensor, alignment: int = 32, mode: int = 0, backend: str = "auto") -> torch.Tensor:
    return WRAPPER(**OP_PARAMS)


def fake(**OP_PARAMS):
    if mode not in (0, 1):
        raise ValueError(f"mode {mode}")
    return input.new_empty(input.shape)
'''

EXAMPLES = [
    Example(
        name="an absent parameter is dropped and bound to its default after the docstring",
        written=_WRITTEN,
        target={"params": ("input", "alignment", "backend")},
        rendered=(
            '''\
    def entry(input, alignment=32, backend="auto"):
        """Called while compiling."""
        mode = 0  # not a parameter of this release
        return OP(input=input, alignment=alignment, backend=backend)
''',
            '''\
    def fake(input, alignment=32, backend="auto"):
        mode = 0  # not a parameter of this release
        if mode not in (0, 1):
''',
        ),
    ),
    Example(
        name="a per-release default in every signature",
        written=_WRITTEN,
        target={"params": ("input", "alignment", "mode", "backend"), "defaults": {"alignment": "16", "backend": '"cuda"'}},
        rendered=(
            '''\
    def entry(input, alignment=16, mode=0, backend="cuda"):
''',
            '''\
    def op(input: torch.Tensor, alignment: int = 16, mode: int = 0, backend: str = "cuda") -> torch.Tensor:
''',
        ),
    ),
    Example(
        name="a release parameter the op source does not know",
        written=_WRITTEN,
        target={"params": ("input", "alignment", "mode", "backend", "enable_pdl")},
        refused="release parameter(s) enable_pdl of quantize() unknown to the op source; add them to entry/op/fake",
    ),
    Example(
        name="an absent parameter without a default",
        written=_WRITTEN.replace("mode: int = 0, backend", "mode: int, backend").replace("alignment: int = 32", "alignment: int"),
        target={"params": ("input", "alignment", "backend")},
        refused="parameter 'mode' is absent in this release but has no default in the op source to bind it to",
    ),
    Example(
        name="a default for a parameter the release does not have",
        written=_WRITTEN,
        target={"params": ("input", "alignment", "backend"), "defaults": {"mode": "1"}},
        refused="defaults names 'mode', not a parameter of this release",
    ),
    Example(
        name="a default that is not an expression",
        written=_WRITTEN,
        target={"params": ("input", "alignment", "mode", "backend"), "defaults": {"alignment": "16 +"}},
        refused="default for 'alignment' is not a Python expression: '16 +'",
    ),
]
