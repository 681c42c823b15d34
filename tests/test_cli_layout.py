"""The command line as a package: each module says what it owns, and nothing below the CLI imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .conftest import REPO

CLI = REPO / "fp4patch" / "cli"
MODULES = sorted(CLI.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(CLI)))
def test_each_cli_module_says_what_it_owns(path: Path) -> None:
    text = path.read_text()
    tree = ast.parse(text)
    assert ast.get_docstring(tree), f"{path.name}: no module docstring"
    undocumented = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_") and not ast.get_docstring(n)]
    assert not undocumented, f"{path.name}: public functions without a docstring: {undocumented}"


def test_no_engine_module_imports_the_cli() -> None:
    """The CLI imports the engine, never the other way round."""
    importers = []
    for path in (REPO / "fp4patch").rglob("*.py"):
        if CLI in path.parents or path.name == "__main__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and (node.module == "cli" or node.module.startswith(("cli.", "fp4patch.cli"))):
                importers.append(str(path.relative_to(REPO)))
    assert not importers, importers
