"""Data flows down through fp4patch (issue 26): no import cycle, no part that makes its own engine, no reach
into another module's private fields. Read from the sources with :mod:`ast`; nothing of fp4patch is imported.

Imports: every ``import`` and ``from ... import`` anywhere in a module — at the top, inside a function, under
``if TYPE_CHECKING:`` (a type-only import still says that the lower module knows the upper one) — with relative
imports resolved against the module's package. ``from . import x`` is an edge to ``fp4patch.x`` where that is a
module, else to the package (``fp4patch/__init__.py``). Imports of other distributions are not edges.

``Engine(...)``: the coordinator (:class:`fp4patch.engine.Engine`) is made only by those that drive a command,
and handed to no part: a part takes values (a resolution, a report, a plan) and returns values. A call counts
when its callee is the name ``Engine``, a name bound by ``from fp4patch.engine(.coordinator) import Engine as X``, or an
attribute ``.Engine``. Allowed in (:data:`ENGINE_MAKERS`):

- ``fp4patch.engine.coordinator``: the engine itself (not the other modules of the engine package: they are parts), and the throw-away copy :meth:`~fp4patch.engine.Engine.check_on_cpu`
  applies the selection to (:mod:`fp4patch.checks.cpu_check` only copies the files and checks the copy);
- ``fp4patch.cli``, and every module of the ``fp4patch.cli`` package once the CLI is one: the engine of each
  command (``_context``);
- ``fp4patch.tools.against``: ``fp4patch against`` applies the selection to a fetched release in a temporary
  site-packages and reports each spec before and after;
- ``fp4patch.tools.compat``: ``make compat`` sweeps every release (apply, trace, revert);
- ``fp4patch.tools.replay``: ``make compat``'s replay resolves each release on the catalogue cut before it, with the
  targets the full catalogue has evidence for (``evidenced``).

A part also takes no engine as an argument (a parameter named ``engine`` or annotated ``Engine``) outside those
modules, save the functions of :data:`ENGINE_TAKERS_LEFT` (none since the CLI became a package: the commands pass
``changed_hunks``, ``add_target`` and ``probe_release_data`` the resolution, the distribution and the reader); that
list only shrinks.

Private fields: an attribute whose name starts with one underscore that some fp4patch module defines (set as
``self._x``, declared in a class body, or a method ``_x`` of a class) is read or set through another object than
``self``/``cls`` only in a module that defines that name itself (a transformer and its operation in one file).
Underscore attributes fp4patch does not define (``torch._dynamo``) are someone else's, not checked here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "fp4patch"
SOURCE = Path(__file__).resolve().parents[1] / PACKAGE

#: The modules that may call ``Engine(...)`` (module docstring); a module under a package named here is allowed too.
ENGINE_MAKERS = frozenset({"fp4patch.engine.coordinator", "fp4patch.cli", "fp4patch.tools.against", "fp4patch.tools.compat", "fp4patch.tools.replay"})

#: Functions outside :data:`ENGINE_MAKERS` that still take the engine, with what their caller (the CLI) should pass
#: instead: ``changed_hunks`` the spec's resolution, the distribution and the released bytes; ``add_target`` the
#: resolution, the distribution, the catalog and the released bytes; ``probe_release_data`` the specs' resolutions.
ENGINE_TAKERS_LEFT: frozenset[str] = frozenset()


def modules(source: Path = SOURCE) -> dict[str, tuple[Path, bool]]:
    """Dotted module name → (its file, whether it is a package's ``__init__.py``), for every ``.py`` under ``source``."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(source.rglob("*.py")):
        parts = list(path.relative_to(source.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imported(name: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: dict) -> list[str]:
    """The fp4patch modules ``node`` (in module ``name``) imports: the longest known prefix of each name."""
    if isinstance(node, ast.Import):
        wanted = [alias.name for alias in node.names]
    else:
        if node.level:
            base = name.split(".") if is_package else name.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            module = ".".join([*base, *([node.module] if node.module else [])])
        else:
            module = node.module or ""
        wanted = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module for alias in node.names]
    found = []
    for target in wanted:
        while target not in known and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in known and target != name:
            found.append(target)
    return found


def _type_only(tree: ast.AST) -> set[int]:
    """The ids of the import nodes under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): never run."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
            (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
            or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
        ):
            found.update(id(n) for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return found


def import_graph(source: Path = SOURCE, runtime: bool = False) -> dict[str, dict[str, int]]:
    """Module → {module it imports: the line of the first such import}, over every import in the module
    (``runtime``: only those that run, leaving out the imports under ``if TYPE_CHECKING:``)."""
    known = modules(source)
    graph: dict[str, dict[str, int]] = {}
    for name, (path, is_package) in known.items():
        edges: dict[str, int] = {}
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        skipped = _type_only(tree) if runtime else set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skipped:
                for target in _imported(name, is_package, node, known):
                    edges[target] = min(edges.get(target, node.lineno), node.lineno)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted; [] when there is no cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph.get(module, {}):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def _described(component: list[str], graph: dict[str, dict[str, int]], source: Path) -> str:
    """``a -> b (a.py:12)`` for every import inside ``component``."""
    inside = set(component)
    lines = [
        f"{a} -> {b} ({modules(source)[a][0].relative_to(source.parent)}:{line})"
        for a in component for b, line in sorted(graph[a].items()) if b in inside
    ]
    return "; ".join(lines)


def engine_calls(source: Path = SOURCE) -> list[str]:
    """``module:line`` of every ``Engine(...)`` call outside :data:`ENGINE_MAKERS` (module docstring)."""
    known = modules(source)
    found = []
    for name, (path, is_package) in known.items():
        if any(name == allowed or name.startswith(f"{allowed}.") for allowed in ENGINE_MAKERS):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        aliases = {"Engine"}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and {"fp4patch.engine", "fp4patch.engine.coordinator"} & set(_imported(name, is_package, node, known)):
                aliases |= {alias.asname or alias.name for alias in node.names if alias.name == "Engine"}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                callee = node.func
                if (isinstance(callee, ast.Name) and callee.id in aliases) or (isinstance(callee, ast.Attribute) and callee.attr == "Engine"):
                    found.append(f"{name}:{node.lineno}")
    return found


def engine_takers(source: Path = SOURCE) -> set[str]:
    """``module.function`` of every function outside :data:`ENGINE_MAKERS` with a parameter named ``engine`` or
    annotated with a name containing ``Engine``."""
    found = set()
    for name, (path, _) in modules(source).items():
        if any(name == allowed or name.startswith(f"{allowed}.") for allowed in ENGINE_MAKERS):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                if any(a.arg == "engine" or (a.annotation is not None and "Engine" in ast.unparse(a.annotation)) for a in arguments):
                    found.add(f"{name}.{node.name}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reaches(source: Path = SOURCE) -> list[str]:
    """``module:line obj._x`` for every private field of fp4patch's reached through another object than
    ``self``/``cls`` in a module that does not define that name (module docstring)."""
    trees = {name: ast.parse(path.read_text(encoding="utf-8"), str(path)) for name, (path, _) in modules(source).items()}
    defined: dict[str, set[str]] = {}
    for name, tree in trees.items():
        own = defined.setdefault(name, set())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                own.add(node.attr)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        own.add(item.name)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        own.add(item.target.id)
                    elif isinstance(item, ast.Assign):
                        own |= {t.id for t in item.targets if isinstance(t, ast.Name)}
        own.intersection_update({n for n in own if _private(n)})
    everywhere = set().union(*defined.values())
    found = []
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute) and node.attr in everywhere and node.attr not in defined[name]
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_no_import_cycle() -> None:
    graph = import_graph()
    cli = {m for name, imports in graph.items() if name.startswith("fp4patch.cli.") for m in imports}
    assert len(graph) > 30 and "fp4patch.engine.coordinator" in cli, "the package was not read"  # a broken walk finds nothing
    found = cycles(graph)
    assert not found, "import cycles in fp4patch: " + " | ".join(
        f"{', '.join(component)} ({_described(component, graph, SOURCE)})" for component in found
    )


def test_only_the_engine_and_the_commands_make_an_engine() -> None:
    assert not engine_calls(), f"Engine(...) outside {sorted(ENGINE_MAKERS)}: a part takes values, not an engine: {engine_calls()}"


def test_no_part_takes_the_engine_but_those_left_to_the_cli() -> None:
    found = engine_takers()
    assert found <= ENGINE_TAKERS_LEFT, f"parts that take the engine: {sorted(found - ENGINE_TAKERS_LEFT)}; pass them values (a resolution, a report, a plan)"
    assert found == ENGINE_TAKERS_LEFT, f"{sorted(ENGINE_TAKERS_LEFT - found)} no longer take the engine: strike them from ENGINE_TAKERS_LEFT"


def test_no_module_reaches_into_another_module_s_private_fields() -> None:
    assert not private_reaches(), f"private fields reached through another object: {private_reaches()}"


@pytest.mark.parametrize(("files", "expected"), [
    ({"__init__.py": "", "a.py": "from . import b\n", "b.py": "def f():\n    from .a import x\n"}, [["fp4patch.a", "fp4patch.b"]]),
    ({"__init__.py": "", "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fp4patch.b import B\n",
      "b.py": "import fp4patch.a\n"}, [["fp4patch.a", "fp4patch.b"]]),
    ({"__init__.py": "", "sub/__init__.py": "", "sub/c.py": "from .. import a\n", "a.py": "from .sub import c\n"},
     [["fp4patch.a", "fp4patch.sub.c"]]),
    ({"__init__.py": "", "a.py": "import os\nfrom . import b\n", "b.py": "import json\nfrom fp4patch import c\n", "c.py": ""}, []),
])
def test_the_walk_finds_function_level_type_only_and_relative_cycles(tmp_path: Path, files: dict[str, str], expected: list) -> None:
    """The checks above are only as good as the walk: a cycle through a function-level import, a type-only one,
    and ``..`` from a subpackage are found; imports of other distributions are not edges."""
    for relative, text in files.items():
        path = tmp_path / PACKAGE / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert cycles(import_graph(tmp_path / PACKAGE)) == expected


def test_the_checks_find_an_engine_made_and_a_private_field_reached(tmp_path: Path) -> None:
    files = {
        "__init__.py": "",
        "engine.py": "class Engine:\n    def __init__(self):\n        self._cache = {}\n",
        "part.py": "from .engine import Engine as E\n\ndef f(engine):\n    copy = E()\n    copy._cache = engine._cache\n",
        "torchy.py": "import torch\n\ndef g():\n    return torch._dynamo\n",
    }
    for relative, text in files.items():
        (tmp_path / PACKAGE).mkdir(exist_ok=True)
        (tmp_path / PACKAGE / relative).write_text(text)
    assert engine_calls(tmp_path / PACKAGE) == ["fp4patch.part:4"]
    assert engine_takers(tmp_path / PACKAGE) == {"fp4patch.part.f"}
    assert private_reaches(tmp_path / PACKAGE) == ["fp4patch.part:5 copy._cache", "fp4patch.part:5 engine._cache"]
