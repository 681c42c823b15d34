"""README.md stays a short page, and every relative link in README.md and docs/*.md resolves.

A link resolves when the file (or folder) it names exists, relative to the page it is written in,
and, when it carries an anchor (``page.md#heading`` or ``#heading``), that Markdown page has a
heading GitHub gives that anchor. Links and headings inside code (fenced blocks, inline code) do not
count. Run as a script to list the broken links: ``python tests/test_docs_links.py``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parent.parent
README_LIMIT = 20 * 1024  # bytes: a page a newcomer reads in five minutes; the reference lives in docs/

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lower-cased, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match[2])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    problems = []
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            target = match[1]
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("//"):
                continue  # https:, mailto: ...
            where = f"{page.relative_to(REPO)}:{number}: {target}"
            path, _, anchor = target.partition("#")
            linked = (page.parent / unquote(path)).resolve() if path else page
            if path.startswith("/"):
                problems.append(f"{where}: an absolute path (write it relative to the page)")
                continue
            if not linked.exists():
                problems.append(f"{where}: no such file")
                continue
            if anchor:
                if linked.suffix != ".md" or linked.is_dir():
                    problems.append(f"{where}: an anchor on a page that is not Markdown")
                elif unquote(anchor) not in anchors(linked):
                    problems.append(f"{where}: no heading with this anchor in {linked.relative_to(REPO)}")
    return problems


def test_readme_is_a_short_page() -> None:
    size = (REPO / "README.md").stat().st_size
    assert size <= README_LIMIT, f"README.md is {size} bytes (limit {README_LIMIT}): move reference material into docs/"


def test_every_relative_link_resolves() -> None:
    problems = [problem for page in pages() for problem in broken_links(page)]
    assert not problems, "\n".join(problems)


def test_the_checker_sees_a_broken_file_and_a_broken_anchor(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## `verify --trace`: one graph\n\n```\n# not a heading\n```\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md) [ok](docs/a.md#verify---trace-one-graph) [ok](#a-readme) `[code](nowhere.md)`\n"
        "# A README\n[gone](docs/b.md) [bad anchor](docs/a.md#not-a-heading) [web](https://example.org)\n"
    )
    assert [p.split(": ", 1)[1] for p in broken_links(tmp_path / "README.md")] == [
        "docs/b.md: no such file",
        "docs/a.md#not-a-heading: no heading with this anchor in docs/a.md",
    ]


if __name__ == "__main__":
    problems = [problem for page in pages() for problem in broken_links(page)]
    print("\n".join(problems) or "every relative link resolves")
    size = (REPO / "README.md").stat().st_size
    print(f"README.md: {size} bytes (limit {README_LIMIT})")
    sys.exit(1 if problems or size > README_LIMIT else 0)
