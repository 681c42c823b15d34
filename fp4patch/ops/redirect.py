"""The redirect, first in the wrapper, and what it reads at call time (``docs/op-source.md``, the redirect).

Owns the statement inserted first in the wrapper (after its docstring): while
``torch.compiler._is_compiling_flag`` is set *and* this thread traces through the module's own function, the
call goes to ``entry`` with every parameter of the release by keyword (:func:`_redirect`; a carried target's
refusals first, :mod:`fp4patch.ops.guard`). Also the module-level code of the block that the redirect reads
(:func:`_tail_state`: the torch support test against :data:`TORCH_FLOOR`, the op's registration on first need,
the thread-local ``inside_op``, the tracing test, the compiler flag), and the two pieces its tests call
(:func:`_set_piece`: the set-whole check of :mod:`fp4patch.engine.set_stamp` and the load hint :data:`LOAD_HINT` an
exported program's op node carries). What Dynamo traces instead of the wrapper is :mod:`fp4patch.ops.wrapper_copy`'s.

May import: the standard library, :mod:`fp4patch.ops.source` and :mod:`fp4patch.ops.guard`.
"""

from __future__ import annotations

from .guard import _carried_guard
from .source import EXAMPLE_SOURCE, CustomOpTarget, Example

#: The oldest torch (major, minor) the rendered code supports: below it, or without the torch APIs it relies
#: on, a patched wrapper behaves as unpatched (``docs/eager-stays-eager.md``; ``fp4patch.target.torch_support``
#: refuses such a target environment before anything is written).
TORCH_FLOOR = (2, 7)


def _redirect(target: CustomOpTarget) -> str:
    """The redirect's source text for ``target`` (every parameter of the release by keyword)."""
    fn = target.function
    arguments = "".join(f"        {p}={p},\n" for p in target.params)
    return f"if _fp4patch_{fn}_compiler._is_compiling_flag and _fp4patch_{fn}_tracing():\n{_carried_guard(target)}    return _fp4patch_{fn}_entry(\n{arguments}    )\n"


def _tail_state(target: CustomOpTarget) -> str:
    """The first piece of the block after the register function: what the redirect in ``target.function`` reads
    (the module state, the torch support test, registration on first need, the tracing test, the compiler flag)."""
    return _STATE.format(
        fn=target.function, callers=repr(tuple(target.callers)), floor=".".join(map(str, TORCH_FLOOR)), floor_tuple=repr(TORCH_FLOOR)
    )


_STATE = '''
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


'''


def _set_piece(fn: str) -> str:
    """Two pieces of the rendered block, after the wrapper copies' code (:mod:`fp4patch.ops.wrapper_copy`):

    - the check that FlashInfer's patched files loaded in this process are one whole set
      (:mod:`fp4patch.engine.set_stamp`): ``_fp4patch_<fn>_set_whole()``, which the redirect's trace tests call before they
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


_WRITTEN = EXAMPLE_SOURCE

EXAMPLES = [
    Example(
        name="the redirect passes the release's parameters by keyword, one a line",
        written=_WRITTEN,
        target={"params": ("input", "alignment")},
        rendered=('''\
if _fp4patch_quantize_compiler._is_compiling_flag and _fp4patch_quantize_tracing():
    return _fp4patch_quantize_entry(
        input=input,
        alignment=alignment,
    )
''',),
    ),
    Example(
        name="what the redirect reads: the torch floor, the thread's inside_op, the set check and the load hint",
        written=_WRITTEN,
        target={"params": ("input", "alignment", "mode")},
        rendered=(
            '''\
def _fp4patch_quantize_supported_torch():
    # torch 2.7 or newer with the APIs below: else quantize stays as it was, eagerly and under compile
''',
            "        (major, minor) >= (2, 7)\n",
            '''\
class _fp4patch_quantize_thread_state(threading.local):
    inside_op = False  # while the op's eager body runs in this thread: quantize runs its own code
''',
            "    stamp = _fp4patch_quantize_globals.get(\"_fp4patch_set\")\n",
            '_fp4patch_quantize_load_hint = {"fp4patch": "' + LOAD_HINT + '"}\n',
        ),
    ),
]
