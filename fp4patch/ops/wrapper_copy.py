"""What Dynamo traces in place of the wrapper and its callers (``docs/op-source.md``, callers).

Owns the wrapper copies of the block: once ``torch._dynamo`` is imported (a ``sys.meta_path`` hook; at once
where it is already), ``torch.compiler.substitute_in_graph`` has Dynamo trace, in place of each layer of the
wrapper (FlashInfer's ``@flashinfer_api`` / ``@backend_requirement``), a copy of its undecorated code whose
redirect always fires (it reads the ``*_traced`` names), and, for each name of the target's ``callers``, that
caller's undecorated function; before torch 2.13 each layer also names the copy as the function
``torch.compile`` starts in (``handed``). :func:`_tail_copies` is that module code, :func:`_activate` the
block's last statement, which starts it. Eager calls keep the decorators.

May import: the standard library and :mod:`fp4patch.ops.source`.
"""

from __future__ import annotations

from .source import EXAMPLE_SOURCE_NO_MODE, CustomOpTarget, Example


def _tail_copies(target: CustomOpTarget) -> str:
    """The block's code that has Dynamo trace the copies (after :func:`fp4patch.ops.redirect._tail_state`)."""
    return _COPIES.format(fn=target.function)


def _activate(target: CustomOpTarget) -> str:
    """The block's last statement: run the copies' registration when ``torch._dynamo`` is imported."""
    return _ACTIVATE.replace("{fn}", target.function)


_COPIES = '''\
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


_WRITTEN = EXAMPLE_SOURCE_NO_MODE

EXAMPLES = [
    Example(
        name="callers: each decorated caller traced undecorated, once torch._dynamo is imported",
        written=_WRITTEN,
        target={"params": ("input", "alignment"), "callers": ("quantize_rows",)},
        rendered=(
            "_fp4patch_quantize_callers = ('quantize_rows',)  # functions of this module that call quantize\n",
            '''\
        handed = not _fp4patch_quantize_top_level_substituted()
        _fp4patch_quantize_substitute_layers(_fp4patch_quantize_public, copy, True, handed)
        for name in _fp4patch_quantize_callers:
            caller = _fp4patch_quantize_globals.get(name)
            if caller is not None and getattr(caller, "__wrapped__", None) is not None:
                _fp4patch_quantize_substitute_layers(caller, _fp4patch_quantize_unwrap(caller), False, handed)
''',
        ),
    ),
    Example(
        name="the copy reads the *_traced names, so its redirect always fires; the block ends by starting it",
        written=_WRITTEN,
        target={"params": ("input", "alignment")},
        rendered=(
            "_fp4patch_quantize_callers = ()  # functions of this module that call quantize\n",
            '''\
        renamed = {"_fp4patch_quantize_compiler": "_fp4patch_quantize_compiler_traced", "_fp4patch_quantize_tracing": "_fp4patch_quantize_traced"}
''',
            '''\


if _fp4patch_quantize_available:
    _fp4patch_quantize_when_dynamo_imported(_fp4patch_quantize_on_dynamo)
''',
        ),
    ),
]
