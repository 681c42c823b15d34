"""Helper modules: ``from ._helpers import _f`` inlines ``_f`` (``docs/op-source.md``, helper modules).

Owns the shared helper modules beside the op sources (``ops/_<name>.py``: a docstring, absolute imports and
private functions): which an op source imports (:func:`helper_imports`), reading them (:func:`read_helpers`),
their checks, and inlining, where the relative import stood, the named functions, every function of the same
module they call and the module's imports those functions use (:func:`_inline`), so that the block in
site-packages never imports fp4patch. A helper that ``op`` splices (:mod:`fp4patch.ops.splice`) is never
inlined: the callers pass its name in ``spliced``.

May import: the standard library, libcst (inside functions) and :mod:`fp4patch.ops.source`.
"""

from __future__ import annotations

import ast
import functools

from .source import CustomOpTarget, Example, OpSourceError, _code, _parse_cst, _parse_source, _used_names


def helper_imports(source: str) -> dict[str, tuple[str, ...]]:
    """The shared helpers an op source imports: ``from ._module import _a, _b`` → ``{"_module": ("_a", "_b")}``.

    Only the relative imports at the op source's module level count (one dot, a module name); the
    renderer inlines the named functions. Returns ``{}`` for a source that does not parse
    (:func:`fp4patch.ops.check.check_op_source` reports it).

    Args:
        source: text of an op source.

    Raises:
        OpSourceError: a relative import of another form (two dots, no module, ``*`` or ``as``).
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
        OpSourceError: a helper module cannot be read (the message names the file), or as :func:`helper_imports`.
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


def _check_helpers(target: CustomOpTarget, functions: dict[str, ast.FunctionDef], spliced: frozenset[str]) -> None:
    """Check the helper modules ``target.source`` imports (besides the ``spliced`` signature-only helpers).

    Args:
        target: the target (its ``source`` and ``helpers``).
        functions: the op source's own top-level functions, by name.
        spliced: names of the helpers ``op`` splices (never inlined).

    Raises:
        OpSourceError: a helper module was not read, does not parse or holds other code, a name is not
            one of its functions, a function to inline is the op source's own too, or uses a spliced helper.
    """
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


def _inline(statement, target: CustomOpTarget, inlined: set[str], spliced: frozenset[str]) -> list:
    """The imports and functions of a helper module that ``from .module import ...`` (``statement``, libcst) needs.

    Args:
        statement: the op source's relative import (libcst).
        target: the target (its ``helpers``).
        inlined: names already inlined (the spliced helpers among them); the functions this call inlines are
            added, so that a function two imports need is written once.
        spliced: names of the helpers ``op`` splices, left out of the closure.
    """
    import libcst as cst

    node = ast.parse(_code(statement)).body[0]
    module = node.module  # type: ignore[attr-defined]
    source = target.helpers[module]
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


_HELPERS = '''\
"""Helpers the quantize op sources share."""
import enum
import os


def _as_int(value):
    return int(value.value if isinstance(value, enum.Enum) else value)


def _int_or_none(value):
    return -1 if value is None else _as_int(value)


def _cache_dir():
    return os.environ.get("CACHE", "")
'''

_USES_AS_INT = '''\
import torch

from ._helpers import _as_int


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS, mode=_as_int(mode))


def op(input: torch.Tensor, mode: int = 0) -> torch.Tensor:
    return WRAPPER(**OP_PARAMS)


def fake(**OP_PARAMS):
    return input.new_empty(input.shape)
'''

EXAMPLES = [
    Example(
        name="the imported function, the functions it calls and the imports they use, where the import stood",
        written='''\
import torch

from ._helpers import _int_or_none


def entry(**OP_PARAMS):
    return OP(**OP_PARAMS, mode=_int_or_none(mode))


def op(input: torch.Tensor, mode: int = -1) -> torch.Tensor:
    return WRAPPER(**OP_PARAMS)


def fake(**OP_PARAMS):
    return input.new_empty(input.shape)
''',
        helpers={"_helpers": _HELPERS},
        plain='''\
import torch
import enum


def _as_int(value):
    return int(value.value if isinstance(value, enum.Enum) else value)


def _int_or_none(value):
    return -1 if value is None else _as_int(value)


def entry(input, mode=-1):
    return OP(input=input, mode=_int_or_none(mode))


def op(input: torch.Tensor, mode: int = -1) -> torch.Tensor:
    return WRAPPER(input=input, mode=mode)


def fake(input, mode=-1):
    return input.new_empty(input.shape)
''',
    ),
    Example(
        name="rendered: the helper's import joins the op source's at the top of the block",
        written=_USES_AS_INT,
        helpers={"_helpers": _HELPERS},
        target={"params": ("input", "mode")},
        rendered=(
            '''\
import torch
import enum


def _fp4patch_register_quantize():
''',
            '''\
    MUTATES_ARGS = ()


    def _as_int(value):
        return int(value.value if isinstance(value, enum.Enum) else value)


    def entry(input, mode=0):
''',
        ),
    ),
    Example(
        name="an import with 'as'",
        written=_USES_AS_INT.replace("import _as_int\n", "import _as_int as as_int\n"),
        refused="line 3: a shared helper is imported as 'from ._module import _name, ...' (one dot, no '*', no 'as')",
    ),
    Example(
        name="a helper module that was not read",
        written=_USES_AS_INT,
        refused="'from ._helpers import ...': no helper module _helpers.py was read beside the op source",
    ),
    Example(
        name="a name the helper module does not define",
        written=_USES_AS_INT,
        helpers={"_helpers": "def _as_float(value):\n    return float(value)\n"},
        refused="_helpers.py (beside the op source) defines no top-level function _as_int; the op source imports it",
    ),
    Example(
        name="a name the op source defines too",
        written=_USES_AS_INT.replace("\n\ndef entry", "\n\ndef _as_int(value):\n    return value\n\n\ndef entry"),
        helpers={"_helpers": "def _as_int(value):\n    return int(value)\n"},
        refused="_as_int is defined in the op source and in _helpers.py, which it imports from; keep one",
    ),
    Example(
        name="a helper module holding data",
        written=_USES_AS_INT,
        helpers={"_helpers": "SCALE = 2\n\n\ndef _as_int(value):\n    return int(value) * SCALE\n"},
        refused="_helpers.py:1: a helper module holds only absolute imports and private functions (_name)",
    ),
]
