"""Fingerprints of the FlashInfer code a spec target depends on (the catalog's evidence).

A target depends on the functions its operations edit (for a ``custom-op``: the wrapper and its
``callers``) and on every piece of code its fake mirrors (the operation's ``mirrors``: the kernel
entry that allocates the outputs, the scale-factor layout helpers, the backend table, the enums the
op converts). Each piece is read with :mod:`ast` and reduced to a canonical form: docstrings
removed, comments and formatting gone (the AST has neither), and the nodes written field by field
with empty optional fields left out, so that the same code gives the same form on every Python
version fp4patch runs on (3.12 added ``type_params`` to every ``FunctionDef``). A reformatted or
re-commented release therefore keeps its fingerprint; a changed default, decorator, statement or
constant changes it.

A piece is named as in a spec's ``mirrors``: ``qualname`` for a definition in the target's own
file (a dotted path through classes and functions, any nesting: ``get_fp4_quantization_module.fp4_quantize_sm100``;
a module-level assignment by its name: ``_UNSET``), or ``path.py:qualname`` for one in another file
(relative to site-packages: ``flashinfer/utils.py:round_up``), or ``path.cu:Class.method[names]`` for C++
launcher code the fake mirrors (read as tokens, comments and whitespace gone: :mod:`fp4patch.catalog.native`).
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .native import is_native, piece_text

#: The value of a piece that the installed code does not define (a file or a name missing).
MISSING = "missing"
#: Hex digits kept of a sha256 (48 bits: collisions among a few hundred pieces are not a concern).
DIGITS = 12

_DROPPED_FIELDS = frozenset({"ctx", "type_comment", "kind"})


def canonical(node: ast.AST | list | object) -> str:
    """The canonical form of an AST node (see the module docstring); stable across Python versions.

    Fields that are None or empty lists are left out (``type_params=[]``, ``returns=None``), as are
    ``ctx`` (Load/Store follows from the position), ``type_comment`` and ``Constant.kind`` (the
    ``u`` prefix). ``Constant(value=None)`` keeps its value.
    """
    if isinstance(node, ast.AST):
        parts = []
        for name in node._fields:
            if name in _DROPPED_FIELDS:
                continue
            value = getattr(node, name, None)
            if isinstance(node, ast.Constant) and name == "value":
                parts.append(f"value={value!r}")
                continue
            if value is None or value == []:
                continue
            parts.append(f"{name}={canonical(value)}")
        return f"{type(node).__name__}({', '.join(parts)})"
    if isinstance(node, list):
        return "[" + ", ".join(canonical(item) for item in node) + "]"
    return repr(node)


def _without_docstrings(node: ast.AST) -> ast.AST:
    """A copy of ``node`` in which no function, class or module body starts with a docstring."""
    import copy

    node = copy.deepcopy(node)
    for inner in ast.walk(node):
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = inner.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                inner.body = body[1:] or [ast.Pass()]
    return node


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:DIGITS]


def _definitions(body: Iterable[ast.stmt], name: str) -> list[ast.stmt]:
    """Definitions of ``name`` directly in ``body`` or inside its ``if``/``try``/``with`` blocks (not
    inside nested functions or classes), in source order: functions, classes and assignments."""
    found: list[ast.stmt] = []
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and statement.name == name:
            found.append(statement)
        elif isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in statement.targets):
            found.append(statement)
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.target.id == name:
            found.append(statement)
        elif isinstance(statement, (ast.If, ast.Try, ast.With, ast.For, ast.While)) or type(statement).__name__ == "TryStar":
            for block in ("body", "orelse", "finalbody"):
                found.extend(_definitions(getattr(statement, block, []), name))
            for handler in getattr(statement, "handlers", []):
                found.extend(_definitions(handler.body, name))
    return found


def resolve(module: ast.Module, qualname: str) -> list[ast.stmt]:
    """The definitions ``qualname`` names in ``module`` (dotted through classes and functions); [] when absent."""
    scopes: list[ast.stmt] = []
    current: list[list[ast.stmt]] = [module.body]
    for part in qualname.split("."):
        scopes = [d for body in current for d in _definitions(body, part)]
        current = [d.body for d in scopes if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        if not scopes:
            return []
    return scopes


def split_selection(qualname: str) -> tuple[str, tuple[str, ...]]:
    """``("f", ("a", "b"))`` for ``"f[a,b]"``; ``("f", ())`` for a piece without a statement selection."""
    name, bracket, rest = qualname.partition("[")
    return name, tuple(n.strip() for n in rest.rstrip("]").split(",") if n.strip()) if bracket else ()


def is_selection(piece: str) -> bool:
    """True for a piece that names statements (``qualname[names]``, Python or C++): the allocation of outputs the
    CPU check cannot see (:mod:`fp4patch.checks.cpu_check`), as opposed to a whole definition."""
    return piece.endswith("]") and "[" in piece


def statements_naming(node: ast.AST, names: tuple[str, ...]) -> list[str]:
    """The simple statements inside definition ``node`` (any depth) that assign one of ``names`` — a variable, or
    an attribute of that name (``x.name = ...``), alone or in a tuple, plain, annotated or augmented; ``return``
    names every return statement (as written: what they read is not followed) — and, to a fixed point, the
    statements that assign a local name an assignment selected reads (``routing_dtype`` in
    ``topk_weights = torch.empty(..., dtype=routing_dtype)``); each as
    ``"<enclosing tests> => <canonical statement>"``: the conditions of the ``if``, ``while``, ``for`` and
    ``with`` it stands in (an ``else`` branch as ``not <test>``). Where an output is allocated, with what it is
    sized, and what is returned — not every call that passes it on. Docstrings never count."""
    wanted = set(names)
    while True:
        out = _statements_assigning(node, wanted)
        read = {n.id for line in out if not isinstance(line[1], ast.Return) for n in line[2]} & _assigned_names(node)
        if read <= wanted:
            return [line[0] for line in out]
        wanted |= read


def _assigned_names(node: ast.AST) -> set[str]:
    """Every plain name a statement inside ``node`` assigns (its local variables)."""
    names = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
            names.add(inner.id)
    return names


def _statements_assigning(node: ast.AST, wanted: set[str]) -> list[tuple[str, ast.stmt, list[ast.AST]]]:
    """``(line, statement, the nodes it reads)`` of each statement :func:`statements_naming` selects for ``wanted``."""
    out: list[tuple[str, ast.stmt, list[ast.AST]]] = []

    def assigned(target: ast.AST) -> bool:
        if isinstance(target, (ast.Tuple, ast.List)):
            return any(assigned(t) for t in target.elts)
        if isinstance(target, ast.Starred):
            return assigned(target.value)
        return (isinstance(target, ast.Name) and target.id in wanted) or (isinstance(target, ast.Attribute) and target.attr in wanted)

    def named(statement: ast.stmt) -> bool:
        if isinstance(statement, ast.Return):
            return "return" in wanted
        if isinstance(statement, ast.Assign):
            return any(assigned(t) for t in statement.targets)
        if isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
            return assigned(statement.target)
        return False

    def visit(body: list[ast.stmt], heads: tuple[str, ...]) -> None:
        for statement in body:
            if isinstance(statement, (ast.If, ast.While)):
                test = canonical(statement.test)
                visit(statement.body, (*heads, test))
                visit(statement.orelse, (*heads, f"not {test}"))
            elif isinstance(statement, (ast.For, ast.AsyncFor)):
                head = f"for {canonical(statement.target)} in {canonical(statement.iter)}"
                visit(statement.body, (*heads, head))
                visit(statement.orelse, (*heads, f"{head} else"))
            elif isinstance(statement, (ast.With, ast.AsyncWith)):
                visit(statement.body, (*heads, f"with {canonical(statement.items)}"))
            elif isinstance(statement, ast.Try) or type(statement).__name__ == "TryStar":
                visit(statement.body, (*heads, "try"))
                for handler in statement.handlers:
                    visit(handler.body, (*heads, f"except {canonical(handler.type) if handler.type else ''}"))
                visit(statement.orelse, (*heads, "try else"))
                visit(statement.finalbody, (*heads, "finally"))
            elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(statement.body, (*heads, f"def {statement.name}"))
            elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str):
                continue  # a docstring or a string statement
            elif named(statement):
                read = [n for n in ast.walk(statement.value) if isinstance(n, ast.Name)] if getattr(statement, "value", None) is not None else []
                out.append((" | ".join(heads) + " => " + canonical(statement), statement, read))

    visit(getattr(node, "body", []), ())
    return out


def split_piece(piece: str, default_file: str) -> tuple[str, str]:
    """``(file, qualname)`` of a piece name (``path.py:qualname`` or a ``qualname`` of ``default_file``)."""
    if ":" in piece:
        file, _, qualname = piece.partition(":")
        return file, qualname
    return default_file, piece


@dataclass
class ModuleReader:
    """Reads and parses site-packages files once (ast), for fingerprints of several targets.

    ``source`` returns the bytes to read for a site-packages-relative path, or None when the file
    is missing (default: the file under ``site_packages``; the engine passes one that reads the
    backup of a file fp4patch patched, so that a fingerprint is always of the released code).
    """

    site_packages: Path
    source: Callable[[str], bytes | None] | None = None
    _trees: dict[str, ast.Module | None] = field(default_factory=dict)

    def read(self, relative: str) -> bytes | None:
        if self.source is not None:
            return self.source(relative)
        path = self.site_packages / relative
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def tree(self, relative: str) -> ast.Module | None:
        """The parsed module, or None when the file is missing or is not valid Python."""
        if relative not in self._trees:
            data = self.read(relative)
            try:
                self._trees[relative] = None if data is None else ast.parse(data, relative)
            except (SyntaxError, ValueError):
                self._trees[relative] = None
        return self._trees[relative]

    def piece(self, piece: str, default_file: str) -> str:
        """The digest of one piece's canonical code, or :data:`MISSING` (a C++ piece: of its normalised
        tokens, :func:`fp4patch.catalog.native.piece_text`)."""
        file, qualname = split_piece(piece, default_file)
        if is_native(file):
            text = self.native_text(file, qualname)
            return MISSING if text is None else _digest(text)
        qualname, names = split_selection(qualname)
        nodes = self.definitions(file, qualname)
        if not nodes:
            return MISSING
        if names:
            return _digest("\n".join(line for n in nodes for line in statements_naming(n, names)))
        return _digest("\n".join(canonical(_without_docstrings(n)) for n in nodes))

    def native_text(self, file: str, qualname: str) -> str | None:
        """The normalised C++ code piece ``qualname`` of ``file`` names (:func:`fp4patch.catalog.native.piece_text`), or
        None when the file is missing or does not define it."""
        data = self.read(file)
        if data is None:
            return None
        return piece_text(data.decode("utf-8", errors="replace"), qualname)

    def definitions(self, file: str, qualname: str) -> list[ast.stmt]:
        """The definitions ``qualname`` names as module ``file`` sees it: defined there, or bound
        there by ``from X import name [as alias]`` (followed into X, four levels at most), so that a
        definition upstream moved to another module with the same code keeps its digest."""
        return self.locate(file, qualname)[1]

    def locate(self, file: str, qualname: str, depth: int = 0) -> tuple[str, list[ast.stmt]]:
        """``(the file that defines it, its definitions)`` for :meth:`definitions`; ``(file, [])`` when absent."""
        tree = self.tree(file)
        if tree is None:
            return file, []
        nodes = resolve(tree, qualname)
        if nodes or depth >= 4:
            return file, nodes
        head, _, rest = qualname.partition(".")
        for source, name in _imported(tree, head, file):
            for candidate in (f"{source}.py", f"{source}/__init__.py"):
                if self.tree(candidate) is not None:
                    found = self.locate(candidate, f"{name}.{rest}" if rest else name, depth + 1)
                    if found[1]:
                        return found
        return file, []

    def function_node(self, file: str, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The last definition of function ``qualname`` in ``file`` (the one the module ends up
        binding), or None."""
        nodes = [n for n in self.definitions(file, qualname) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        return nodes[-1] if nodes else None


def _imported(tree: ast.Module, name: str, file: str) -> list[tuple[str, str]]:
    """``(module path without .py, original name)`` of every ``from X import ...`` at module level
    (also inside ``if``/``try``) that binds ``name`` in ``file``'s module; relative imports are
    resolved from ``file``'s package."""
    found = []
    package = Path(file).parent.parts

    def visit(body: list[ast.stmt]) -> None:
        for statement in body:
            if isinstance(statement, ast.ImportFrom):
                for alias in statement.names:
                    if (alias.asname or alias.name) != name:
                        continue
                    if statement.level:
                        base = package[: len(package) - (statement.level - 1)] if statement.level > 1 else package
                        parts = [*base, *(statement.module.split(".") if statement.module else [])]
                    else:
                        parts = (statement.module or "").split(".")
                    found.append(("/".join(parts), alias.name))
            elif isinstance(statement, (ast.If, ast.Try)) or type(statement).__name__ == "TryStar":
                visit(statement.body)
                visit(getattr(statement, "orelse", []))
                for handler in getattr(statement, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    return found


@dataclass(frozen=True)
class Fingerprint:
    """The code one target depends on, as read from one site-packages.

    Attributes:
        pieces: piece name -> 12-hex digest of its canonical code (or ``"missing"``), in the
            target's order: edited functions first, then callers and mirrors.
    """

    pieces: dict[str, str]

    @property
    def digest(self) -> str:
        """One 12-hex digest over every piece (names and digests, in order)."""
        return _digest(json.dumps(list(self.pieces.items())))

    def changed(self, other: dict[str, str]) -> list[str]:
        """Names of the pieces whose digest differs from ``other``'s (or that only one of them has)."""
        names = list(dict.fromkeys([*self.pieces, *other]))
        return [n for n in names if self.pieces.get(n) != other.get(n)]


def native_files(specs) -> set[str]:
    """The site-packages-relative C++ files the ``mirrors`` of ``specs`` name (what an unpacked release must keep
    besides its Python sources for their fingerprints: :func:`fp4patch.catalog.releases.unpack`)."""
    return {
        split_piece(name, "")[0]
        for spec in specs
        for target in spec.targets
        for _, kwargs in target.operation_specs
        for name in kwargs.get("mirrors", ())
        if is_native(split_piece(name, "")[0])
    }


def target_pieces(target) -> list[str]:
    """The piece names of a spec :class:`~fp4patch.catalog.spec.Target`: every function its operations name
    (a ``custom-op``'s wrapper, then its ``callers``), then every operation's ``mirrors``; in order,
    without repeats. A status target (``not-needed``/``unsupported``) has none."""
    names: list[str] = []
    for kind, kwargs in target.operation_specs:
        if kwargs.get("function"):
            names.append(kwargs["function"])
        if kind == "custom-op":
            names.extend(kwargs["target"].callers)
        names.extend(kwargs.get("mirrors", ()))
    return list(dict.fromkeys(names))


def fingerprint(reader: ModuleReader, target) -> Fingerprint:
    """The :class:`Fingerprint` of ``target`` (a patching target) on ``reader``'s files."""
    return Fingerprint({name: reader.piece(name, target.file) for name in target_pieces(target)})


# --------------------------------------------------------------------------- signatures
def signature(node: ast.FunctionDef | ast.AsyncFunctionDef | None) -> list[list[str]]:
    """The parameters of a function definition as ``[name, kind, default]`` rows, in order.

    ``kind`` is ``positional-only``, ``positional``, ``keyword-only``, ``*args`` or ``**kwargs``;
    ``default`` is the default's source text (``ast.unparse``) or ``""`` when there is none.
    Annotations are left out: the op schema carries its own. ``[]`` for None.
    """
    if node is None:
        return []
    a = node.args
    rows: list[list[str]] = []
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for index, (arg, default) in enumerate(zip(positional, defaults)):
        kind = "positional-only" if index < len(a.posonlyargs) else "positional"
        rows.append([arg.arg, kind, ast.unparse(default) if default is not None else ""])
    if a.vararg:
        rows.append([a.vararg.arg, "*args", ""])
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        rows.append([arg.arg, "keyword-only", ast.unparse(default) if default is not None else ""])
    if a.kwarg:
        rows.append([a.kwarg.arg, "**kwargs", ""])
    return rows


def signature_changes(installed: list[list[str]], verified: list[list[str]], function: str) -> list[str]:
    """What changed in ``function``'s parameters from ``verified`` to ``installed`` (rows of
    :func:`signature`), one phrase each: a parameter added, removed or renamed (one removed and one
    added at the same position), moved, of another kind, or with another default. [] when equal."""
    if installed == verified:
        return []
    old = {row[0]: (i, row) for i, row in enumerate(verified)}
    new = {row[0]: (i, row) for i, row in enumerate(installed)}
    removed = [n for n in old if n not in new]
    added = [n for n in new if n not in old]
    changes: list[str] = []
    renamed = set()
    for name in list(added):
        position = new[name][0]
        twin = next((r for r in removed if old[r][0] == position and r not in renamed), None)
        if twin is not None:
            renamed.add(twin)
            added.remove(name)
            changes.append(f"{function}(): parameter {twin!r} renamed to {name!r}")
    changes += [f"{function}(): parameter {n!r} added" for n in added]
    changes += [f"{function}(): parameter {n!r} removed" for n in removed if n not in renamed]
    for name, (position, row) in new.items():
        if name not in old:
            continue
        before = old[name][1]
        if row[1] != before[1]:
            changes.append(f"{function}(): parameter {name!r} is {row[1]}, was {before[1]}")
        if row[2] != before[2]:
            changes.append(f"{function}(): default of {name!r} is {row[2] or 'none'}, was {before[2] or 'none'}")
    kept_new = [r[0] for r in installed if r[0] in old]
    kept_old = [r[0] for r in verified if r[0] in new]
    if kept_new != kept_old and not any("renamed" in c for c in changes):
        changes.append(f"{function}(): parameters reordered ({', '.join(kept_new)})")
    return changes or [f"{function}(): signature differs"]


def source_segment(reader: ModuleReader, piece: str, default_file: str) -> tuple[str, str]:
    """``(file, source text)`` of a piece as its file has it (decorators included, imports followed),
    for a hunk; the text is "" when the piece is missing."""
    file, qualname = split_piece(piece, default_file)
    if is_native(file):
        text = reader.native_text(file, qualname)
        return file, "" if text is None else text + "\n"
    qualname, names = split_selection(qualname)
    if names:  # the statements selected, as the fingerprint reads them
        where, nodes = reader.locate(file, qualname)
        return where, "".join(line + "\n" for n in nodes for line in statements_naming(n, names))
    where, nodes = reader.locate(file, qualname)
    data = reader.read(where)
    if data is None or not nodes:
        return where, ""
    lines = data.decode("utf-8", errors="replace").splitlines(keepends=True)
    out = []
    for node in nodes:
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        out.append("".join(lines[start - 1 : node.end_lineno]))
    return where, "".join(out)


def hunks(installed: ModuleReader, verified: ModuleReader, pieces: list[str], default_file: str, release: str) -> str:
    """Unified diffs, piece by piece, of ``pieces`` from the ``verified`` release's files (labelled
    ``release``) to the ``installed`` ones; "" when none differs in text."""
    import difflib

    out = []
    for piece in pieces:
        old_file, old = source_segment(verified, piece, default_file)
        new_file, new = source_segment(installed, piece, default_file)
        out.append("".join(difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"{release}/{old_file} ({piece})", f"installed/{new_file} ({piece})",
        )))
    return "".join(out)
