"""The subsystems of docs/architecture.md and the one-way arrows between them, read from that page's table.

Each row of the table names a subsystem, its modules (dotted names under ``fp4patch``; ``cli.*`` is every module
of that package) and the subsystems it may import. The tests fail when a module of ``fp4patch`` belongs to no
subsystem or to two, when an import that runs (module level or inside a function; ``if TYPE_CHECKING:`` imports
left out, :func:`tests.test_import_graph.import_graph`) goes against the arrows, and when a module outside the
engine and the tools imports the primitives that write site-packages (:data:`WRITERS` of ``fp4patch.engine.files``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from .test_import_graph import SOURCE, import_graph, modules

PAGE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
#: what ``fp4patch.engine.files`` offers to write in site-packages (atomic replacement, folders, modes, bytecode)
WRITERS = {"atomic_write", "make_directory", "share_mode", "remove_temp_files", "refresh_bytecode"}
#: the subsystems that may use them: the engine writes site-packages; the tools write the specs folder
WRITING = {"engine", "tools"}


def table(text: str) -> dict[str, tuple[list[str], set[str]]]:
    """subsystem -> (its module patterns, the subsystems it may import), from the page's table."""
    rows: dict[str, tuple[list[str], set[str]]] = {}
    section = text.split("## The subsystems", 1)[1]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("subsystem", "---"):
            continue
        patterns = [f"fp4patch.{m}" if m != "fp4patch" else m for m in re.findall(r"`([\w.*]+)`", cells[1])]
        allowed = set() if cells[3] == "(none)" else {a.strip() for a in cells[3].split(",")}
        rows[cells[0]] = (patterns, allowed)
    return rows


def subsystem_of(module: str, rows: dict[str, tuple[list[str], set[str]]]) -> list[str]:
    """The subsystems whose patterns name ``module`` (``x.*``: every module under package ``x``)."""
    return [
        name for name, (patterns, _) in rows.items()
        if any(module == p or (p.endswith(".*") and module.startswith(p[:-1])) for p in patterns)
    ]


ROWS = table(PAGE.read_text(encoding="utf-8"))


def test_the_table_was_read_and_its_arrows_name_subsystems() -> None:
    assert {"cli", "engine", "catalog", "probes", "base"} <= set(ROWS), sorted(ROWS)
    for name, (patterns, allowed) in ROWS.items():
        assert patterns, f"{name}: no module"
        assert allowed <= set(ROWS), f"{name} may import {sorted(allowed - set(ROWS))}, not a subsystem of the table"
        assert name not in allowed, f"{name} lists itself"


def test_every_module_is_in_exactly_one_subsystem() -> None:
    problems = []
    for module in modules(SOURCE):
        owners = subsystem_of(module, ROWS)
        if len(owners) != 1:
            problems.append(f"{module}: {owners or 'in no subsystem'}")
    assert not problems, "docs/architecture.md's table: " + "; ".join(problems)


def test_the_arrows_form_no_cycle() -> None:
    reach = {name: set(allowed) for name, (_, allowed) in ROWS.items()}
    for _ in ROWS:  # transitive closure
        for name in reach:
            reach[name] |= {r for a in list(reach[name]) for r in reach.get(a, ())}
    assert not [name for name in reach if name in reach[name]], reach


def test_every_import_that_runs_follows_the_arrows() -> None:
    graph = import_graph(SOURCE, runtime=True)
    against = []
    for module, imports in sorted(graph.items()):
        (mine,) = subsystem_of(module, ROWS)
        for other, line in sorted(imports.items()):
            (theirs,) = subsystem_of(other, ROWS)
            if theirs != mine and theirs not in ROWS[mine][1]:
                against.append(f"{module} ({mine}) imports {other} ({theirs}) at line {line}")
    assert not against, "imports against docs/architecture.md's arrows: " + "; ".join(against)


def test_only_the_engine_and_the_tools_take_the_writers_of_site_packages() -> None:
    takers = []
    for module, (path, _) in modules(SOURCE).items():
        if module == "fp4patch.engine.files" or subsystem_of(module, ROWS)[0] in WRITING:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("files"):
                names = {a.name for a in node.names} & WRITERS
                if names:
                    takers.append(f"{module}: {sorted(names)} (line {node.lineno})")
    assert not takers, "writes in site-packages outside the engine: " + "; ".join(takers)


@pytest.mark.parametrize(("importer", "imported", "allowed"), [("fp4patch.catalog", "fp4patch.engine", False), ("fp4patch.engine", "fp4patch.catalog", True)])
def test_the_check_itself_tells_a_downward_import_from_an_upward_one(importer: str, imported: str, allowed: bool) -> None:
    (mine,), (theirs,) = subsystem_of(importer, ROWS), subsystem_of(imported, ROWS)
    assert (theirs in ROWS[mine][1]) is allowed


#: the subsystems that are the package's top-level modules rather than a folder
TOP_LEVEL = {"base"}
#: where Python looks for ``python -m fp4patch``: the CLI's one module outside its folder
RUN_AS_MAIN = {"fp4patch.__main__"}


def test_every_module_lies_in_its_subsystems_folder() -> None:
    """The folder is the map: a module of subsystem ``x`` is ``fp4patch/x/...`` (the base: ``fp4patch/*.py``)."""
    astray = []
    for module in set(modules(SOURCE)) - RUN_AS_MAIN:
        (mine,) = subsystem_of(module, ROWS)
        parts = module.split(".")
        if mine in TOP_LEVEL:
            if len(parts) > 2:
                astray.append(f"{module} ({mine}: a top-level module of fp4patch)")
        elif len(parts) < 2 or parts[1] != mine:
            astray.append(f"{module} ({mine}: fp4patch/{mine}/)")
    assert not astray, "modules outside their subsystem's folder: " + "; ".join(astray)


@pytest.mark.parametrize("subsystem", sorted(set(ROWS) - TOP_LEVEL))
def test_each_subsystem_package_says_what_it_owns_and_may_import(subsystem: str) -> None:
    doc = ast.get_docstring(ast.parse((SOURCE / subsystem / "__init__.py").read_text(encoding="utf-8"))) or ""
    assert "owns" in doc and "may import" in doc, f"fp4patch/{subsystem}/__init__.py: the docstring names neither"
    for other in ROWS[subsystem][1] - {"base"}:
        assert other in doc or other == "codemods" and "codemod" in doc, f"{subsystem}'s docstring does not name {other}"


#: issue 26: a module a newcomer can read in one sitting
MAX_LINES = 600


def test_every_module_stays_under_600_lines() -> None:
    long = {m: n for m, (path, _) in modules(SOURCE).items() if (n := len(path.read_text(encoding="utf-8").splitlines())) >= MAX_LINES}
    assert not long, f"modules of {MAX_LINES} lines or more (split along a seam): {long}"
