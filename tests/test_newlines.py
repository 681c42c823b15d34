"""Written code follows the target file's newline convention on every line, inside multi-line strings too.

libcst writes each line break of inserted code with the module's own newline (``Module.default_newline``),
but a line break *inside* a token — a triple-quoted string spliced from an op source, such as ``mm_fp4``'s
docstrings — is written as it was parsed: LF. A CRLF file then came out of ``apply`` with mixed newlines.
The renderer now writes every string literal that spans lines as parenthesized one-line literals (the
same value, the same AST: ``fp4patch/ops/strings.py``'s ``_one_line_strings``), so no token of the rendered
code holds a line break.
"""

from __future__ import annotations

import ast
import io
import tokenize

import pytest

from fp4patch.ops.render import CustomOpTarget, OpSourceError, render
from fp4patch.catalog.spec import load_specs

from .conftest import SPECS_DIR, run_cli

VERSIONS = ["0.6.0", "0.7.4"]


def _breaks_inside_tokens(code: str) -> list[str]:
    """Tokens of ``code`` (other than line ends) that hold a line break, and backslash continuations
    (a backslash between two tokens)."""
    starts = [0]
    for line in code.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    found, previous = [], 0
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        begin = starts[token.start[0] - 1] + token.start[1]
        if "\\" in code[previous:begin]:
            found.append(f"line {token.start[0]}: a backslash continuation before it")
        if "\n" in token.string and token.type not in (tokenize.NEWLINE, tokenize.NL):
            found.append(f"line {token.start[0]}: {token.string[:60]!r}")
        previous = starts[token.end[0] - 1] + token.end[1]
    return found


def test_no_rendered_token_holds_a_line_break() -> None:
    """Every custom-op target of every spec: the redirect and the block."""
    checked = 0
    for spec in load_specs(SPECS_DIR):
        for target in spec.targets:
            if target.status:
                continue
            for rendered in target.custom_ops:
                assert _breaks_inside_tokens(rendered.block) == [], f"{spec.id} {target.versions}: {rendered.op_name}"
                assert _breaks_inside_tokens(rendered.redirect) == [], f"{spec.id} {target.versions}"
                checked += 1
    assert checked > 40


SOURCE = '''
import torch

MUTATES_ARGS = ()


def _helper(x):
    """First line.

    Indented second paragraph, a raw \\\\ backslash.
    """
    return x


def entry(**OP_PARAMS):
    """Called while compiling.

    Returns what OP returns."""
    return OP(**OP_PARAMS)


def op(x: torch.Tensor) -> torch.Tensor:
    return WRAPPER(**OP_PARAMS).clone()


def fake(**OP_PARAMS):
    message = """two
lines"""
    return torch.empty_like(x)
'''


def _target(source: str) -> CustomOpTarget:
    return CustomOpTarget(function="wrap", source=source.lstrip("\n"), source_label="ops/wrap.py", params=("x",))


def test_multi_line_strings_become_one_line_literals_of_the_same_value() -> None:
    block = render(_target(SOURCE)).block
    assert _breaks_inside_tokens(block) == []
    module = ast.parse(block)
    register = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "_fp4patch_register_wrap")
    functions = {n.name: n for n in ast.walk(register) if isinstance(n, ast.FunctionDef)}
    assert ast.get_docstring(functions["_helper"], clean=False) == "First line.\n\n    Indented second paragraph, a raw \\ backslash.\n    "
    assert ast.get_docstring(functions["entry"], clean=False) == "Called while compiling.\n\n    Returns what OP returns."
    (message,) = [n.value.value for n in ast.walk(functions["fake"]) if isinstance(n, ast.Assign) and n.targets[0].id == "message"]
    assert message == "two\nlines"
    # laid out one source line a literal, inside parentheses
    assert "        (\n            'First line.\\n'\n            '\\n'\n" in block


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ('    text = f"""{x}\n    and more"""\n', "an f-string spans lines"),
        ("    total = 1 + \\\n        2\n", "a backslash continues the line"),
    ],
    ids=["f-string", "backslash"],
)
def test_what_cannot_be_written_on_one_line_is_refused(code: str, message: str) -> None:
    source = SOURCE.replace("    return torch.empty_like(x)\n", code + "    return torch.empty_like(x)\n")
    with pytest.raises(OpSourceError, match=message):
        render(_target(source))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_crlf_file_stays_crlf_on_every_line_after_apply(linked_site, version: str) -> None:
    """Each file the default specs patch, rewritten with CRLF line endings (``--allow-modified``: it no
    longer matches RECORD): after ``apply`` no line ends in a bare LF, and ``revert`` restores its bytes."""
    site = linked_site(version)
    files = sorted({t.file for s in load_specs(SPECS_DIR) if s.default for t in s.targets_for(version) if not t.status})
    originals = {}
    for relative in files:
        path = site / relative
        data = path.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        path.unlink()  # a hard link to the shared unpack: replace it, never write through it
        path.write_bytes(data)
        originals[relative] = data
    run_cli("apply", "--site-packages", str(site), "--allow-modified", check=True)
    for relative in files:
        data = (site / relative).read_bytes()
        assert data != originals[relative], f"{relative} was not patched"
        bare = [i + 1 for i, line in enumerate(data.split(b"\n")[:-1]) if not line.endswith(b"\r")]
        assert bare == [], f"{relative}: {len(bare)} lines end in a bare LF, the first at line {bare[0] if bare else 0}"
    run_cli("revert", "--site-packages", str(site), check=True)
    assert {r: (site / r).read_bytes() for r in files} == originals
