"""docs/op-source.md stays true: every example on the page runs through the renderer here.

The page's fenced blocks name their role after the language, which Markdown renderers ignore:

- ``python written`` starts an example: an op source (``ops/<function>.py``);
- ``python helper _name`` (after it): the helper module ``ops/_name.py`` the example imports;
- ``toml target`` (after it): the ``[[target.operation]]`` fields the example is rendered for
  (``function``, ``params``, ``callers``, ``[target.operation.defaults]``, ``[target.operation.release]``),
  as spec ``quantize-fullgraph``, target ``versions = ">=0.7.4,<0.7.5"``. With one, the example goes
  through :func:`fp4patch.ops.render.render` and its output is the redirect, then the op block;
  without, through :func:`fp4patch.ops.render.plain_source` (placeholders expanded, helpers inlined,
  nothing trimmed for a release);
- ``python rendered``: a run of whole lines of that output, with any indentation the output has
  there removed (the op block nests the source's functions in its register function);
- ``text refused``: rendering the example raises :class:`fp4patch.ops.render.OpSourceError` with
  exactly this message;
- ``text refused-by-loader``: a message of the spec loader, which must be a string constant of ``fp4patch/catalog/spec.py``.

Each row of the cheat sheet links to a section; the row's written code must stand in a written,
helper or target block of that section and its rendered code in a rendered block there.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fp4patch.ops.render import CustomOpTarget, OpSourceError, plain_source, render

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "op-source.md"
SPEC_ID, VERSIONS = "quantize-fullgraph", ">=0.7.4,<0.7.5"
FENCE = re.compile(r"^```(\w+)[ \t]+([\w-]+)(?:[ \t]+(\S+))?[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^(#{2,4}) (.+)$", re.MULTILINE)


@dataclass
class Example:
    """One ``written`` block and the blocks after it, up to the next ``written`` one."""

    section: str
    line: int
    source: str
    helpers: dict[str, str] = field(default_factory=dict)
    target: dict | None = None
    rendered: list[str] = field(default_factory=list)
    refused: str | None = None

    @property
    def label(self) -> str:
        return f"docs/op-source.md:{self.line} ({self.section})"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def sections(text: str) -> list[tuple[int, str]]:
    """``(offset, anchor)`` of each heading, in order."""
    return [(m.start(), slug(m.group(2))) for m in HEADING.finditer(text)]


def section_at(marks: list[tuple[int, str]], offset: int) -> str:
    return next((anchor for start, anchor in reversed(marks) if start <= offset), "")


def parse(text: str) -> tuple[list[Example], list[tuple[str, int]]]:
    """The examples of the page, and the ``refused-by-loader`` messages with their lines."""
    marks = sections(text)
    examples: list[Example] = []
    loader: list[tuple[str, int]] = []
    for match in FENCE.finditer(text):
        role, name, body = match.group(2), match.group(3), match.group(4)
        line = text.count("\n", 0, match.start()) + 1
        section = section_at(marks, match.start())
        if role == "written":
            examples.append(Example(section, line, body))
            continue
        if role == "refused-by-loader":
            loader.append((body.strip(), line))
            continue
        if role not in ("helper", "target", "rendered", "refused"):
            continue
        assert examples and examples[-1].section == section, f"docs/op-source.md:{line}: a {role} block without a written one before it in its section"
        example = examples[-1]
        if role == "helper":
            assert name, f"docs/op-source.md:{line}: a helper block names its module (python helper _name)"
            example.helpers[name] = body
        elif role == "target":
            example.target = tomllib.loads(body)
        elif role == "rendered":
            example.rendered.append(body)
        else:
            example.refused = body.strip()
    return examples, loader


def output(example: Example) -> str:
    """What the renderer makes of ``example`` (module docstring)."""
    if example.target is None:
        return plain_source(example.source, example.helpers)
    operation = example.target.get("target", {}).get("operation", {})
    function = example.target["function"]
    rendered = render(
        CustomOpTarget(
            function=function,
            source=example.source,
            source_label=f"ops/{function}.py",
            params=tuple(example.target["params"]),
            defaults=dict(operation.get("defaults", {})),
            release=dict(operation.get("release", {})),
            spec_id=SPEC_ID,
            versions=VERSIONS,
            helpers=example.helpers,
            callers=tuple(example.target.get("callers", ())),
        )
    )
    return rendered.redirect + rendered.block


def is_excerpt(expected: str, text: str) -> bool:
    """True when ``expected``'s lines stand, whole and in a row, in ``text``, all indented alike."""
    want = expected.splitlines()
    lines = text.splitlines()
    for indent in range(0, 17, 4):
        shifted = [" " * indent + line if line else line for line in want]
        if any(lines[i : i + len(shifted)] == shifted for i in range(len(lines) - len(shifted) + 1)):
            return True
    return False


TEXT = PAGE.read_text(encoding="utf-8")
EXAMPLES, LOADER = parse(TEXT)


def test_the_page_has_examples_of_each_kind() -> None:
    assert len(EXAMPLES) >= 30
    assert sum(e.refused is not None for e in EXAMPLES) >= 15
    assert all(e.rendered or e.refused is not None for e in EXAMPLES), [e.label for e in EXAMPLES if not (e.rendered or e.refused)]
    assert not any(e.rendered and e.refused is not None for e in EXAMPLES), "an example is either rendered or refused"


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.refused is None], ids=lambda e: e.label)
def test_written_renders_as_the_page_says(example: Example) -> None:
    text = output(example)
    for block in example.rendered:
        assert is_excerpt(block, text), f"{example.label}: not what the renderer makes of it; it makes:\n{text}"


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.refused is not None], ids=lambda e: e.label)
def test_refused_raises_the_quoted_message(example: Example) -> None:
    with pytest.raises(OpSourceError) as caught:
        output(example)
    assert str(caught.value) == example.refused


def test_loader_messages_are_the_loaders() -> None:
    """Each quoted message is a string the spec loader raises (a string constant of fp4patch/catalog/spec.py)."""
    import ast

    tree = ast.parse((REPO / "fp4patch" / "catalog" / "spec.py").read_text(encoding="utf-8"))
    strings = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    assert LOADER
    for message, line in LOADER:
        assert any(message in text for text in strings), f"docs/op-source.md:{line}: the spec loader no longer says {message!r}"


def cheat_sheet_rows(text: str) -> list[tuple[str, str, str]]:
    """``(anchor, written, rendered)`` of each row of the cheat sheet (its first table)."""
    start = text.index("## Cheat sheet")
    table = text[start : text.index("\n## ", start + 1)]
    rows = []
    for line in table.splitlines():
        link = re.match(r"^\| \[.*?\]\(#([\w-]+)\)", line)
        if not link:
            continue
        example = line.rstrip(" |").rsplit("|", 1)[-1]
        pair = re.fullmatch(r"\s*`(.+?)`\s*→\s*`(.+)`\s*", example)
        assert pair, f"cheat sheet row without a `written` → `rendered` example: {line}"
        rows.append((link.group(1), pair.group(1), pair.group(2)))
    return rows


def test_the_cheat_sheet_is_taken_from_the_sections() -> None:
    rows = cheat_sheet_rows(TEXT)
    anchors = {anchor for _, anchor in sections(TEXT)}
    assert len(rows) >= 14
    for anchor, written, rendered in rows:
        assert anchor in anchors, f"cheat sheet links to #{anchor}, not a heading of the page"
        mine = [e for e in EXAMPLES if e.section == anchor and e.refused is None]
        written_blocks = [e.source for e in mine] + [h for e in mine for h in e.helpers.values()]
        written_blocks += re.findall(r"```toml target\n(.*?)```", _section_text(TEXT, anchor), re.DOTALL)
        assert any(written in block for block in written_blocks), f"#{anchor}: the cheat sheet's {written!r} is in no written block there"
        assert any(rendered in block for e in mine for block in e.rendered), f"#{anchor}: the cheat sheet's {rendered!r} is in no rendered block there"


def _section_text(text: str, anchor: str) -> str:
    marks = sections(text)
    for index, (start, name) in enumerate(marks):
        if name == anchor:
            end = marks[index + 1][0] if index + 1 < len(marks) else len(text)
            return text[start:end]
    return ""


def test_every_link_inside_the_page_names_a_heading() -> None:
    anchors = {anchor for _, anchor in sections(TEXT)}
    missing = sorted({a for a in re.findall(r"\]\(#([\w-]+)\)", TEXT) if a not in anchors})
    assert not missing, missing
