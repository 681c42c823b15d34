"""Render an op source (``patches/<distribution>/ops/<function>.py``) for one release target.

The op-source language is documented in ``docs/op-source.md``, construct by construct (``OP_PARAMS``,
``OMIT``, ``SPLICE``, ``WRAPPER``, ``OP``, helper modules, ``RELEASE``, ``MUTATES_ARGS``, absent
parameters, per-release defaults, ``callers``, the imports, the redirect), each with what it renders to
and what is refused, and the order the renderer works in; ``tests/test_op_source_docs.py`` runs every
example of that page, and ``tests/test_op_constructs.py`` every module's ``EXAMPLES``.

This module assembles; each construct is a module of :mod:`fp4patch.ops` (lowest first): ``source`` (the
data, the error, the placeholders), ``omit``, ``helpers``, ``splice``, ``params`` (``OP_PARAMS``),
``release``, ``mutates``, ``trim`` (absent parameters, defaults, ``WRAPPER``), ``guard`` (a carried
target's refusal), ``redirect``, ``wrapper_copy`` (what Dynamo traces, ``callers``), ``register``
(``OP``, the register function), ``strings`` (one line a token), ``check`` (:func:`check_op_source`).

:func:`render` turns one op source and one ``custom-op`` target (:class:`CustomOpTarget`: the release's
``params``, ``defaults``, ``release`` data and ``callers``) into a :class:`Rendered`: the *redirect*,
inserted first in the wrapper (after its docstring), and the *op block*, appended to its module, which
registers the custom op ``fp4patch::<function>_<fingerprint>`` (8 hex digits of the sha256 of the
rendered code, provenance comments left out). :func:`plain_source` expands the placeholders and inlines
the helpers for every parameter of ``op``, without trimming for a release (what tests execute).

Validation (:func:`check_op_source`) uses only :mod:`ast`, so that loading specs stays light;
rendering (:func:`render`) uses libcst and runs when a target's operations are built.

May import: the standard library, libcst (inside functions) and every module of :mod:`fp4patch.ops` but ``cache``.
"""

from __future__ import annotations

import hashlib

from .check import check_op_source
from .guard import _carried_refusal
from .helpers import _inline, helper_imports, read_helpers
from .mutates import _required_params
from .omit import _omit_values
from .params import _Expand, _signature, _takes_op_params_cst, _unannotated
from .redirect import LOAD_HINT, TORCH_FLOOR, _redirect, _set_piece, _tail_state
from .register import _marked_eager_body, _register_function, _sorted_statements
from .release import release_data
from .source import (
    _NAME_SENTINEL,
    FUNCTIONS,
    OMIT_PLACEHOLDER,
    OP_PLACEHOLDER,
    PARAMS_PLACEHOLDER,
    SPLICE_PLACEHOLDER,
    WRAPPER_PLACEHOLDER,
    CustomOpTarget,
    Example,
    OpSourceError,
    Rendered,
    _op_function,
    _parse_or_refuse,
)
from .splice import _splice_cst, _splice_names, _spliced_op
from .strings import _one_line_strings
from .trim import _absent_params, _bind_absent, _op_defaults, _Trim, source_defaults
from .wrapper_copy import _activate, _tail_copies

__all__ = [
    "FUNCTIONS",
    "LOAD_HINT",
    "OMIT_PLACEHOLDER",
    "OP_PLACEHOLDER",
    "PARAMS_PLACEHOLDER",
    "SPLICE_PLACEHOLDER",
    "TORCH_FLOOR",
    "WRAPPER_PLACEHOLDER",
    "CustomOpTarget",
    "OpSourceError",
    "Rendered",
    "check_op_source",
    "helper_imports",
    "plain_source",
    "read_helpers",
    "release_data",
    "render",
    "source_defaults",
]


def render(target: CustomOpTarget) -> Rendered:
    """Render ``target``'s redirect and op block (see the module docstring).

    Args:
        target: a :class:`~fp4patch.ops.source.CustomOpTarget`.

    Returns:
        A :class:`~fp4patch.ops.source.Rendered` (``block_index`` None).

    Raises:
        OpSourceError: as :func:`check_op_source`; ``MUTATES_ARGS`` not computed from constants and ``RELEASE``
            (:func:`fp4patch.ops.mutates._mutated_params`); a backslash continuation or an f-string that spans
            lines (:func:`fp4patch.ops.strings._one_line_strings`).
    """
    check_op_source(target)
    import libcst as cst

    absent = _absent_params(target)
    required = _required_params(target, absent)
    module = _resolve(target, _omit_values(_op_defaults(target), required))
    imports, functions, helpers, data = _sorted_statements(module, target)
    trimmer = _Trim(absent, target.defaults, target.function, required)
    marked = {"op": lambda op_fn: _marked_eager_body(op_fn, target.function)}  # binds first, then the marker
    edited = {name: _bind_absent(marked.get(name, lambda f: f)(functions[name].visit(trimmer)), absent) for name in FUNCTIONS}
    register = _register_function(target, data, helpers, edited)
    fn = target.function
    # callers are looked up by name: one missing from a release must not break the module's import
    tail = cst.parse_module(_tail_state(target) + _tail_copies(target) + _set_piece(fn) + _activate(target) + _carried_refusal(target))
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
    tree = _parse_or_refuse(source)
    op_fn = _op_function(tree)
    params = tuple(_signature(_spliced_op(op_fn, source, dict(helpers or {})))[0]) if op_fn is not None else ()
    target = CustomOpTarget(function="", source=source, source_label="", params=params, helpers=dict(helpers or {}))
    check_op_source(target)
    return _resolve(target).code


def _resolve(target: CustomOpTarget, omit_values: dict[str, str] | None = None):
    """``target.source`` as a libcst module with the shared helpers inlined (their imports and functions where
    the relative import stood), ``entry``/``fake`` given op's parameters where they take ``**OP_PARAMS``, and
    ``**OP_PARAMS`` expanded in calls (for every parameter of ``op``: trimming comes after). ``omit_values``:
    code passed for ``p=OMIT`` in an ``OP(...)`` call instead of leaving ``p`` out, for the parameters the
    rendered op declares without a default (:func:`fp4patch.ops.mutates._required_params`: their op default)."""
    import libcst as cst

    module = cst.parse_module(target.source)
    op_def = _splice_cst(next(s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == "op"), target)
    op_params = op_def.params
    names = [p.name.value for p in (*op_params.posonly_params, *op_params.params, *op_params.kwonly_params)]
    spliced = _splice_names(target.source)
    inlined: set[str] = set(spliced)  # signature-only helpers: spliced, never inlined
    body = []
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.ImportFrom) and statement.body[0].relative:
            body.extend(_inline(statement, target, inlined, spliced))
        elif isinstance(statement, cst.FunctionDef) and statement.name.value == "op":
            body.append(op_def)
        elif isinstance(statement, cst.FunctionDef) and _takes_op_params_cst(statement):
            body.append(statement.with_changes(params=_unannotated(op_params), whitespace_before_params=op_def.whitespace_before_params))
        else:
            body.append(statement)
    return module.with_changes(body=body).visit(_Expand(names, (OP_PLACEHOLDER, WRAPPER_PLACEHOLDER, target.function), omit_values))


_WRITTEN = '''\
"""fp4patch op source for flashinfer.quantize (an example)."""
from typing import Optional

import torch

RELEASE = {}


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS)


def op(input: torch.Tensor, alignment: int = 32) -> torch.Tensor:
    return WRAPPER(**OP_PARAMS)


def fake(**OP_PARAMS):
    return input.new_empty(input.shape)
'''

EXAMPLES = [
    Example(
        name="the redirect, then the block: provenance, the op source's imports, the register function",
        written=_WRITTEN.replace("from typing import Optional\n\n", ""),
        target={"params": ("input", "alignment")},
        rendered=(
            '''\
if _fp4patch_quantize_compiler._is_compiling_flag and _fp4patch_quantize_tracing():
    return _fp4patch_quantize_entry(
        input=input,
        alignment=alignment,
    )
# fp4patch quantize-fullgraph: quantize traces as the custom op fp4patch::quantize_e70a0b14
# under torch.compile; rendered from ops/quantize.py for FlashInfer >=0.7.4,<0.7.5.
# Registered when a compile or an export first needs it; eager calls run the original code
# after one attribute read.
import torch


def _fp4patch_register_quantize():
''',
            '''\
    RELEASE = {}
    MUTATES_ARGS = ()


    def entry(input, alignment=32):
        return OP(input=input, alignment=alignment)
''',
        ),
    ),
    Example(
        name="every import of the op source moves above the register function; its docstring is not copied",
        written=_WRITTEN,
        target={"params": ("input", "alignment")},
        rendered=('''\
# after one attribute read.
from typing import Optional

import torch


def _fp4patch_register_quantize():
''',),
    ),
    Example(
        name="a relative import of another form",
        written=_WRITTEN.replace("from typing import Optional\n", "from .. import helpers\n"),
        refused="line 2: a shared helper is imported as 'from ._module import _name, ...' (one dot, no '*', no 'as')",
    ),
]
