"""Every construct module of the op-source language (``fp4patch/ops/``) carries its own before/after cases.

Each module of :mod:`fp4patch.ops` lists ``EXAMPLES`` (:class:`fp4patch.ops.source.Example`): an op source as
written and what the real renderer makes of it, exactly: the whole of
:func:`~fp4patch.ops.render.plain_source` (``plain``), runs of whole lines of
:func:`~fp4patch.ops.render.render`'s redirect and block (``rendered``; the op names in them are the
fingerprints, so a change to what an op renders to shows here), or the exact :class:`OpSourceError` message
(``refused``). Every module but the data (``source``) and the cache has cases, and the modules keep to the
size issue 26 set for them.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import fp4patch.ops
from fp4patch.ops.render import plain_source, render
from fp4patch.ops.source import (
    EXAMPLE_FUNCTION,
    EXAMPLE_LABEL,
    EXAMPLE_SPEC,
    EXAMPLE_VERSIONS,
    CustomOpTarget,
    Example,
    OpSourceError,
)

OPS = Path(fp4patch.ops.__file__).resolve().parent
MODULES = sorted(m.name for m in pkgutil.iter_modules([str(OPS)]))
#: modules without a construct of their own
WITHOUT_EXAMPLES = {"source", "cache"}
#: the import order of fp4patch/ops/__init__.py's docstring: a module imports only those before it
LAYERS = ["source", "omit", "helpers", "splice", "params", "release", "mutates", "trim", "guard", "redirect",
          "wrapper_copy", "register", "strings", "check", "render", "cache"]


def _examples() -> list[tuple[str, Example]]:
    out = []
    for name in MODULES:
        module = importlib.import_module(f"fp4patch.ops.{name}")
        out.extend((name, example) for example in getattr(module, "EXAMPLES", []))
    return out


EXAMPLES = _examples()


def _output(example: Example) -> str:
    """What the renderer makes of ``example``: plain_source's text, or the redirect and the block."""
    if example.target is None:
        return plain_source(example.written, example.helpers)
    target = CustomOpTarget(
        function=EXAMPLE_FUNCTION, source=example.written, source_label=EXAMPLE_LABEL, spec_id=EXAMPLE_SPEC,
        versions=EXAMPLE_VERSIONS, helpers=example.helpers, **example.target,
    )
    rendered = render(target)
    return rendered.redirect + rendered.block


@pytest.mark.parametrize(("module", "example"), EXAMPLES, ids=[f"{m}: {e.name}" for m, e in EXAMPLES])
def test_example_renders_as_written(module: str, example: Example) -> None:
    if example.refused is not None:
        with pytest.raises(OpSourceError) as raised:
            _output(example)
        assert str(raised.value) == example.refused
        return
    output = _output(example)
    if example.plain is not None:
        assert output == example.plain
        return
    lines = output.splitlines(keepends=True)
    for excerpt in example.rendered:
        want = excerpt.splitlines(keepends=True)
        assert excerpt.endswith("\n"), "an excerpt is whole lines"
        assert any(lines[i : i + len(want)] == want for i in range(len(lines) - len(want) + 1)), (
            f"not in the output, as whole lines:\n{excerpt}\n--- output ---\n{output}"
        )


def test_every_construct_module_has_examples_with_distinct_names() -> None:
    assert set(LAYERS) == set(MODULES), "list a new module of fp4patch/ops in LAYERS and in its __init__ docstring"
    for name in MODULES:
        module = importlib.import_module(f"fp4patch.ops.{name}")
        examples = getattr(module, "EXAMPLES", None)
        if name in WITHOUT_EXAMPLES:
            continue
        assert examples, f"fp4patch/ops/{name}.py has no EXAMPLES"
        assert all(isinstance(e, Example) for e in examples)
        names = [e.name for e in examples]
        assert len(names) == len(set(names)), f"fp4patch/ops/{name}.py: two examples share a name"


def test_every_example_written_source_parses() -> None:
    for module, example in EXAMPLES:
        if example.refused and "does not parse" in example.refused:
            continue
        ast.parse(example.written)  # a SyntaxError names the module's example


@pytest.mark.parametrize("name", LAYERS)
def test_a_module_imports_only_lower_pieces(name: str) -> None:
    tree = ast.parse((OPS / f"{name}.py").read_text(encoding="utf-8"))
    below = set(LAYERS[: LAYERS.index(name)])
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            assert node.module in below, f"fp4patch/ops/{name}.py imports .{node.module}, not a module below it"
        elif isinstance(node, ast.ImportFrom) and node.level:
            # the cache alone reaches outside: the block index it stores (fp4patch.operations)
            assert (name, node.level) == ("cache", 2) and node.module.startswith("codemods"), f"fp4patch/ops/{name}.py imports {node.module}"
        elif isinstance(node, ast.Import) or isinstance(node, ast.ImportFrom) and not node.level:
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            assert not any(m.startswith("fp4patch") for m in modules), f"fp4patch/ops/{name}.py imports {modules}"
