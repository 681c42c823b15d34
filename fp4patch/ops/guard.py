"""The carried guard: a new release parameter checked at its default (``docs/op-source.md``, the redirect).

Owns what a *carried* target adds (``CustomOpTarget.carried``: on a release fp4patch does not list, whose
wrapper added parameters with a default, the nearest target's op is carried): the statements put first in the
redirect that refuse, while compiling, a value of a new parameter other than its default (:func:`_carried_guard`),
and the refusal they call, appended to the block and marked ``assume_constant_result`` so that Dynamo calls it and
its message is the compile error's first line (:func:`_carried_refusal`). No spec target renders either: both
are ``""`` for a target that carries nothing.

May import: the standard library and :mod:`fp4patch.ops.source`.
"""

from __future__ import annotations

import ast

from .source import EXAMPLE_SOURCE_NO_MODE, CustomOpTarget, Example


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


_WRITTEN = EXAMPLE_SOURCE_NO_MODE

_CARRIED = {"carried_release": "0.7.5", "carried_from": "0.7.4"}

EXAMPLES = [
    Example(
        name="a carried parameter with a constant default: refused unless that default, while compiling",
        written=_WRITTEN,
        target={"params": ("input", "alignment"), **_CARRIED, "carried": (("sf_round_up", "False"),)},
        rendered=(
            '''\
if _fp4patch_quantize_compiler._is_compiling_flag and _fp4patch_quantize_tracing():
    if not (sf_round_up is False):  # sf_round_up: new in FlashInfer 0.7.5, checked at its default only
        _fp4patch_quantize_refuse_carried('sf_round_up', sf_round_up, 'False')
    return _fp4patch_quantize_entry(
        input=input,
        alignment=alignment,
    )
''',
            '''\
def _fp4patch_quantize_refuse_carried(name, value, default):
    """Refuse, under compile, a value of a parameter FlashInfer 0.7.5 added to quantize() other than its default."""
''',
            '''\
        f"({name} is new in 0.7.5: fp4patch carries the op verified on 0.7.4, checked at the default "
''',
            '''\
if _fp4patch_quantize_available:
    _fp4patch_quantize_when_dynamo_imported(_fp4patch_quantize_mark_refusal)
''',
        ),
    ),
    Example(
        name="a literal default is compared by type and value, a dotted name also by identity",
        written=_WRITTEN,
        target={"params": ("input", "alignment"), **_CARRIED,
                "carried": (("block", "16"), ("layout", "Layout.SWIZZLED"))},
        rendered=('''\
    if not (type(block) is type(16) and block == 16):  # block: new in FlashInfer 0.7.5, checked at its default only
        _fp4patch_quantize_refuse_carried('block', block, '16')
    if not (layout is Layout.SWIZZLED or (type(layout) is type(Layout.SWIZZLED) and layout == Layout.SWIZZLED)):  # layout: new in FlashInfer 0.7.5, checked at its default only
        _fp4patch_quantize_refuse_carried('layout', layout, 'Layout.SWIZZLED')
''',),
    ),
]
