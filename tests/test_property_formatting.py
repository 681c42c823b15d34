"""Property-based tests: formatting variants of the real target functions, patched by the real specs.

The variants start from the real ``fp4_quantize`` of flashinfer-python 0.6.0 and 0.7.4 and the
real ``get_cuda_version``, read from the unpacked wheels (the module's imports, the function, and
the definition after it), and vary them with libcst transforms and token-level text edits that
keep the source valid Python: extra decorators, comments between and inside statements, the
docstring removed / added / quoted differently, blank lines, backslash and parenthesis
continuations, other string quoting, functions of the same name in classes and nested functions,
trailing whitespace, tabs, no final newline, a BOM or a coding cookie, CRLF line endings.

Each variant is written into a temporary site-packages (with a RECORD that matches it, as an
upstream release formatted that way would have) and the real specs run through the engine.
The property: ``apply`` either succeeds — every written file parses and compiles, the specs are
``applied``, the same-name functions elsewhere are untouched, applying again writes nothing,
``revert`` restores every byte — or it reports drift and nothing changed. It never leaves code
that does not parse. Variants whose edits are all semantically neutral must not drift at all.

The default suite runs a modest number of examples; ``make test-property`` runs the
``property_long`` tests (hypothesis profile ``property-long``: 1000 examples each).
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import itertools
import tempfile
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from fp4patch.engine.coordinator import SATISFIED, Engine, select_specs
from fp4patch.target.environment import find_distribution, from_site_packages
from fp4patch.errors import DriftError
from fp4patch.catalog.spec import load_specs

from .conftest import DIST, SPECS_DIR, release_site, snapshot

VERSIONS = ("0.6.0", "0.7.4")
CUDA, FULLGRAPH, DISABLE = "cuda-version-from-torch", "fp4-quantize-fullgraph", "fp4-quantize-compiler-disable"
SELECTIONS = ((CUDA,), (FULLGRAPH,), (DISABLE,), (CUDA, FULLGRAPH))
STATE = ".fp4patch"

DEFAULT_EXAMPLES = 25  # make test; the property_long run (make test-property) tries 1000
LONG_EXAMPLES = 1000
FULL_DEFAULT_EXAMPLES = 3  # whole real modules: seconds per example
FULL_LONG_EXAMPLES = 30
_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
settings.register_profile("property-long", max_examples=LONG_EXAMPLES, **_COMMON)
DEFAULT = settings(max_examples=DEFAULT_EXAMPLES, **_COMMON)
LONG = settings(settings.get_profile("property-long"))
FULL_DEFAULT = settings(max_examples=FULL_DEFAULT_EXAMPLES, **_COMMON)
FULL_LONG = settings(max_examples=FULL_LONG_EXAMPLES, **_COMMON)


# --------------------------------------------------------------------------- the real sources
@dataclass(frozen=True)
class Source:
    """A target file of one release reduced to what the operations look at: its imports, the
    target function (decorators and docstring included), and the definition that follows it."""

    version: str
    relative: str
    function: str
    code: str = field(repr=False)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Source]:
    """(version, relative path) → reduced real source, for every file the specs target."""
    return _sources(tmp_path_factory, reduce=True)


@pytest.fixture(scope="module")
def full_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Source]:
    """(version, relative path) → the whole real module, for every file the specs target."""
    return _sources(tmp_path_factory, reduce=False)


def _sources(tmp_path_factory: pytest.TempPathFactory, reduce: bool) -> dict[tuple[str, str], Source]:
    # the specs the variants run (SELECTIONS): another spec patching the same file (block_scale_interleave's, in
    # fp4_quantization.py) must not pick that file's function
    selected = {i for selection in SELECTIONS for i in selection}
    specs = [s for s in _specs() if s.id in selected]
    found: dict[tuple[str, str], Source] = {}
    for version in VERSIONS:
        site = release_site(version, tmp_path_factory, sources_only=True)
        for spec in specs:
            for target in spec.targets_for(version):
                for op in target.operations:
                    if op.function and (version, target.file) not in found:
                        text = (site / target.file).read_text("utf-8")
                        found[(version, target.file)] = Source(version, target.file, op.function, _reduce(text, op.function) if reduce else text)
    assert {rel for _, rel in found} >= {"flashinfer/jit/cpp_ext.py", "flashinfer/fp4_quantization.py", "flashinfer/quantization/fp4_quantization.py"}
    return found


_SPECS: list = []


def _specs():
    if not _SPECS:
        _SPECS.extend(load_specs(SPECS_DIR))
    return _SPECS


def _reduce(text: str, function: str) -> str:
    module = cst.parse_module(text)
    body = list(module.body)
    index = next(i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef) and s.name.value == function)
    imports = [s for s in body[:index] if isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body)]
    after = [s for s in body[index + 1 :] if isinstance(s, (cst.FunctionDef, cst.ClassDef))][:1]
    reduced = module.with_changes(body=[*imports, body[index], *after])
    assert reduced.code.count(f"def {function}(") == 1
    return reduced.code


# --------------------------------------------------------------------------- libcst variations
DECORATORS = (
    "functools.lru_cache(maxsize=None)",
    "_identity",
    "registry.tag('fp4', level=2)",
    "torch.compiler.disable",
    "(lambda f: f)",
    "typing.no_type_check",
)
COMMENTS = ("# note", "#", "# TODO(fp4patch): keep", "#: doc comment", "# ümlaut ✓", "# type: ignore")


@dataclass
class Plan:
    """What a drawn variant does (shown by hypothesis on failure)."""

    edits: list[str] = field(default_factory=list)
    neutral: bool = True  # every edit keeps the function's meaning and its anchors
    shadows: list[str] = field(default_factory=list)  # same-name definitions that must stay as they are


def _target(module: cst.Module, name: str) -> tuple[int, cst.FunctionDef]:
    for i, s in enumerate(module.body):
        if isinstance(s, cst.FunctionDef) and s.name.value == name:
            return i, s
    raise AssertionError(name)


def _replace(module: cst.Module, index: int, node: cst.BaseStatement) -> cst.Module:
    body = list(module.body)
    body[index] = node
    return module.with_changes(body=body)


def _comment_line(text: str) -> cst.EmptyLine:
    return cst.EmptyLine(comment=cst.Comment(text))


class _Strings(cst.CSTTransformer):
    """Swap the quote character of single-quoted strings (and f-strings) where that is safe."""

    def __init__(self, picks: list[bool], triple: bool) -> None:
        self.picks, self.triple, self.count = picks, triple, 0

    def _pick(self) -> bool:
        self.count += 1
        return self.picks[(self.count - 1) % len(self.picks)] if self.picks else False

    def leave_SimpleString(self, original_node: cst.SimpleString, updated_node: cst.SimpleString) -> cst.SimpleString:
        value = updated_node.value
        prefix = value[: len(value) - len(value.lstrip("rRbBuU"))]
        body = value[len(prefix) :]
        if body[:3] in ('"""', "'''") or not self._pick():
            return updated_node
        quote, inner = body[0], body[1:-1]
        other = "'" if quote == '"' else '"'
        if other in inner or "\\" in inner:
            return updated_node
        if self.triple and not inner.endswith(other):
            return updated_node.with_changes(value=f"{prefix}{other * 3}{inner}{other * 3}")
        return updated_node.with_changes(value=f"{prefix}{other}{inner}{other}")

    def leave_FormattedString(self, original_node: cst.FormattedString, updated_node: cst.FormattedString) -> cst.FormattedString:
        code = cst.Module(body=[]).code_for_node(updated_node)
        if len(updated_node.end) != 1 or not self._pick():
            return updated_node
        quote = updated_node.end
        other = "'" if quote == '"' else '"'
        if other in code or "\\" in code:
            return updated_node
        return updated_node.with_changes(start=updated_node.start[:-1] + other, end=other)


class _Parens(cst.CSTTransformer):
    """Wrap the values of assignments and returns in (possibly multi-line) parentheses."""

    def __init__(self, picks: list[int]) -> None:
        self.picks, self.count = picks, 0

    def _wrap(self, value: cst.BaseExpression) -> cst.BaseExpression:
        self.count += 1
        how = self.picks[(self.count - 1) % len(self.picks)] if self.picks else 0
        if how == 0:
            return value
        if how == 1:
            return value.with_changes(lpar=[cst.LeftParen(), *value.lpar], rpar=[*value.rpar, cst.RightParen()])
        open_ws = cst.ParenthesizedWhitespace(first_line=cst.TrailingWhitespace(), indent=True, last_line=cst.SimpleWhitespace("    "))
        close_ws = cst.ParenthesizedWhitespace(first_line=cst.TrailingWhitespace(), indent=True, last_line=cst.SimpleWhitespace(""))
        return value.with_changes(
            lpar=[cst.LeftParen(whitespace_after=open_ws), *value.lpar], rpar=[*value.rpar, cst.RightParen(whitespace_before=close_ws)]
        )

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        return updated_node.with_changes(value=self._wrap(updated_node.value))

    def leave_Return(self, original_node: cst.Return, updated_node: cst.Return) -> cst.Return:
        if updated_node.value is None:
            return updated_node
        return updated_node.with_changes(value=self._wrap(updated_node.value))


class _BodyLines(cst.CSTTransformer):
    """Add comments / blank lines above statements, and trailing comments, at every depth."""

    def __init__(self, picks: list[int], comments: list[str]) -> None:
        self.picks, self.comments, self.count = picks, comments, 0

    def _next(self) -> tuple[int, str]:
        self.count += 1
        pick = self.picks[(self.count - 1) % len(self.picks)] if self.picks else 0
        return pick, self.comments[(self.count - 1) % len(self.comments)]

    def _lead(self, node):
        pick, comment = self._next()
        if pick == 1:
            return node.with_changes(leading_lines=[*node.leading_lines, _comment_line(comment)])
        if pick == 2:
            return node.with_changes(leading_lines=[*node.leading_lines, cst.EmptyLine()])
        if pick == 3:
            return node.with_changes(leading_lines=[*node.leading_lines, cst.EmptyLine(), _comment_line(comment), cst.EmptyLine()])
        if pick == 4 and isinstance(node, cst.SimpleStatementLine) and node.trailing_whitespace.comment is None:
            return node.with_changes(
                trailing_whitespace=node.trailing_whitespace.with_changes(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(comment))
            )
        return node

    def leave_SimpleStatementLine(self, original_node, updated_node):
        return self._lead(updated_node)

    def leave_If(self, original_node, updated_node):
        return self._lead(updated_node)

    def leave_Try(self, original_node, updated_node):
        return self._lead(updated_node)

    def leave_For(self, original_node, updated_node):
        return self._lead(updated_node)

    def leave_With(self, original_node, updated_node):
        return self._lead(updated_node)


def _docstring(function: cst.FunctionDef) -> cst.SimpleStatementLine | None:
    if not isinstance(function.body, cst.IndentedBlock) or not function.body.body:
        return None
    first = function.body.body[0]
    if isinstance(first, cst.SimpleStatementLine) and len(first.body) == 1 and isinstance(first.body[0], cst.Expr):
        return first if isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString)) else None
    return None


def _with_docstring(function: cst.FunctionDef, how: str) -> cst.FunctionDef:
    """Remove, add, or requote the docstring."""
    body = list(function.body.body)
    doc = _docstring(function)
    if how == "remove":
        return function.with_changes(body=function.body.with_changes(body=body[1:])) if doc else function
    if doc is None:
        text = {"add-triple": '"""Added docstring."""', "add-single": "'Added docstring.'", "add-concat": '"Added " "docstring."'}.get(how)
        if text is None:
            return function
        new = cst.SimpleStatementLine(body=[cst.Expr(cst.parse_expression(text))])
        return function.with_changes(body=function.body.with_changes(body=[new, *body]))
    value = doc.body[0].value
    if not isinstance(value, cst.SimpleString):
        return function
    raw = value.value
    prefix = raw[: len(raw) - len(raw.lstrip("rRbBuU"))]
    inner = raw[len(prefix) + 3 : -3] if raw[len(prefix) :][:3] in ('"""', "'''") else raw[len(prefix) + 1 : -1]
    if how == "single-quotes" and "'''" not in inner and not inner.endswith("'"):
        new_value = f"{prefix}'''{inner}'''"
    elif how == "raw" and "\\" not in inner and "r" not in prefix.lower():
        new_value = f"r{prefix}{raw[len(prefix):]}"
    elif how == "one-line":
        new_value = '"One line."'
    else:
        return function
    node = doc.with_changes(body=[doc.body[0].with_changes(value=value.with_changes(value=new_value))])
    return function.with_changes(body=function.body.with_changes(body=[node, *body[1:]]))


SHADOWS = {
    "class-method": "class _Shadow{n}:\n    def {name}(self, input, *args):\n        return input\n",
    "class-staticmethod": "class _Shadow{n}:\n    @staticmethod\n    def {name}(x):\n        '''Not the target.'''\n        return x\n",
    "nested-function": "def _outer{n}():\n    def {name}():\n        return None\n    return {name}\n",
    "class-in-if": "if True:\n    class _Shadow{n}:\n        def {name}(self):\n            pass\n",
    "lambda-attribute": "class _Shadow{n}:\n    {name} = staticmethod(lambda *a: a)\n",
}
#: a second module-level definition (no anchors): the spec must say drifted, never patch one of two
STUB = "if False:  # pragma: no cover\n    def {name}(*args, **kwargs):\n        ...\n"


@st.composite
def cst_variant(draw, source: Source) -> tuple[str, Plan]:
    """A variant of ``source`` made with libcst (always valid Python by construction)."""
    plan = Plan()
    module = cst.parse_module(source.code)
    index, function = _target(module, source.function)

    if draw(st.booleans()):  # extra decorators, anywhere in the stack, with comments/blank lines between
        decorators = list(function.decorators)
        for name in draw(st.lists(st.sampled_from(DECORATORS), max_size=3)):
            at = draw(st.integers(0, len(decorators)))
            lead = draw(st.sampled_from([(), (cst.EmptyLine(),), (_comment_line("# deco"),)]))
            decorators.insert(at, cst.Decorator(decorator=cst.parse_expression(name), leading_lines=lead))
            plan.edits.append(f"decorator @{name} at {at}")
        function = function.with_changes(decorators=decorators)
    if draw(st.booleans()):
        lines = draw(st.lists(st.sampled_from([cst.EmptyLine(), _comment_line("# after the decorators")]), max_size=2))
        function = function.with_changes(lines_after_decorators=[*function.lines_after_decorators, *lines])
        plan.edits.append(f"{len(lines)} lines after decorators")
    if draw(st.booleans()):  # comment after the def line
        function = function.with_changes(body=function.body.with_changes(header=cst.TrailingWhitespace(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment("# def line"))))
        plan.edits.append("comment on the def line")
    how = draw(st.sampled_from(["keep", "remove", "add-triple", "add-single", "add-concat", "single-quotes", "raw", "one-line"]))
    function = _with_docstring(function, how)
    plan.edits.append(f"docstring {how}")
    if draw(st.booleans()):
        picks = draw(st.lists(st.integers(0, 4), min_size=1, max_size=12))
        comments = draw(st.lists(st.sampled_from(COMMENTS), min_size=1, max_size=4))
        function = function.with_changes(body=function.body.visit(_BodyLines(picks, comments)))
        plan.edits.append(f"body lines {picks} {comments}")
    if draw(st.booleans()):
        picks = draw(st.lists(st.booleans(), min_size=1, max_size=8))
        function = function.visit(_Strings(picks, draw(st.booleans())))
        plan.edits.append(f"string quotes {picks}")
    if draw(st.booleans()):
        picks = draw(st.lists(st.integers(0, 2), min_size=1, max_size=8))
        function = function.visit(_Parens(picks))
        plan.edits.append(f"parentheses {picks}")
    if draw(st.booleans()):
        function = function.with_changes(leading_lines=[*function.leading_lines, _comment_line("# above the function"), cst.EmptyLine()])
        plan.edits.append("comment above the function")
    module = _replace(module, index, function)

    extra: list[tuple[int, str]] = []
    for n, kind in enumerate(draw(st.lists(st.sampled_from(sorted(SHADOWS)), max_size=3))):
        text = SHADOWS[kind].format(n=n, name=source.function)
        extra.append((draw(st.sampled_from([index, index + 1])), text))
        plan.shadows.append(text)
        plan.edits.append(f"shadow {kind}")
    if draw(st.integers(0, 9)) == 7:  # rare on purpose (hypothesis favours 0 and the bounds)
        extra.append((draw(st.sampled_from([index, index + 1])), STUB.format(name=source.function)))
        plan.neutral = False
        plan.edits.append("second module-level definition (drift)")
    body = list(module.body)
    for at, text in sorted(extra, key=lambda e: -e[0]):
        statements = list(cst.parse_module(text).body)
        statements[0] = statements[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        body[at:at] = statements
    if draw(st.booleans()):
        module = module.with_changes(body=body, default_indent="\t")
        plan.edits.append("tab indentation")
    else:
        module = module.with_changes(body=body)
    return module.code, plan


# --------------------------------------------------------------------------- token-level variations
_SKIP = {tokenize.ENCODING, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT}


def _offsets(text: str) -> list[int]:
    starts, total = [0], 0
    for line in text.splitlines(keepends=True):
        total += len(line)
        starts.append(total)
    return starts


def _tokens(text: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(text).readline))


def _insert(text: str, inserts: list[tuple[int, str]]) -> str:
    for at, piece in sorted(inserts, key=lambda i: -i[0]):
        text = text[:at] + piece + text[at:]
    return text


@st.composite
def token_variant(draw, text: str, plan: Plan) -> str:
    """Backslash continuations, comments inside brackets, trailing whitespace (token-aware)."""
    tokens, starts = _tokens(text), _offsets(text)

    def pos(rc: tuple[int, int]) -> int:
        return starts[rc[0] - 1] + rc[1]

    between, in_brackets, line_ends = [], [], []
    depth = 0
    for a, b in itertools.pairwise(tokens):
        if a.type == tokenize.OP and a.string in "([{":
            depth += 1
        elif a.type == tokenize.OP and a.string in ")]}":
            depth -= 1
        if b.type in (tokenize.NEWLINE, tokenize.NL) and b.string:
            line_ends.append(pos(b.start))
        if a.type in _SKIP or b.type in _SKIP or a.end[0] != b.start[0]:
            continue
        between.append(pos(a.end))
        if depth > 0 and a.type == tokenize.OP and a.string in "([{,":
            in_brackets.append(pos(a.end))
    inserts: list[tuple[int, str]] = []
    replaced: set[int] = set()
    if between and draw(st.booleans()):
        for i in draw(st.sets(st.integers(0, len(between) - 1), max_size=4)):
            indent = draw(st.sampled_from(["", "  ", "        ", "\t"]))
            inserts.append((between[i], " \\\n" + indent))
            replaced.add(i)
        plan.edits.append(f"{len(replaced)} backslash continuations")
    if in_brackets and draw(st.booleans()):
        chosen = draw(st.sets(st.integers(0, len(in_brackets) - 1), max_size=4))
        for i in chosen:
            inserts.append((in_brackets[i], draw(st.sampled_from(["  # inside\n        ", "\n", "\n\n    ", "  #\n"]))))
        plan.edits.append(f"{len(chosen)} breaks/comments inside brackets")
    if line_ends and draw(st.booleans()):
        chosen = draw(st.sets(st.integers(0, len(line_ends) - 1), max_size=12))
        for i in chosen:
            inserts.append((line_ends[i], draw(st.sampled_from([" ", "\t", "  \t ", "    "]))))
        plan.edits.append(f"trailing whitespace on {len(chosen)} lines")
    return _insert(text, inserts)


@dataclass(frozen=True)
class Variant:
    """A generated source file; its repr lists the edits (hypothesis prints it on failure)."""

    data: bytes = field(repr=False)
    plan: Plan


@st.composite
def variant(draw, source: Source) -> Variant:
    text, plan = draw(cst_variant(source))
    text = draw(token_variant(text, plan))
    ending = draw(st.sampled_from(["\n", "\n", "\r\n"]))
    if draw(st.integers(0, 4)) == 0:
        text = text.rstrip("\n")
        plan.edits.append("no final newline")
    prefix = draw(st.sampled_from(["", "", "# -*- coding: utf-8 -*-\n", "#!/usr/bin/env python\n# coding: utf-8\n"]))
    data = (prefix + text).replace("\n", ending).encode("utf-8")
    if draw(st.integers(0, 5)) == 0:
        data = b"\xef\xbb\xbf" + data
        plan.edits.append("BOM")
    if ending == "\r\n":
        plan.edits.append("CRLF")
    if prefix:
        plan.edits.append("coding cookie")
    compile(data, source.relative, "exec", dont_inherit=True)  # the generator only makes valid Python
    return Variant(data, plan)


# --------------------------------------------------------------------------- the property
def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_site(root: Path, version: str, files: dict[str, bytes]) -> Path:
    """A site-packages holding ``files`` as flashinfer-python ``version``, with a RECORD that
    matches them (as a release formatted this way would have)."""
    site = root / "site-packages"
    info = site / f"flashinfer_python-{version}.dist-info"
    info.mkdir(parents=True)
    metadata = f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {version}\n".encode()
    (info / "METADATA").write_bytes(metadata)
    rows = []
    for relative, data in sorted(files.items()):
        path = site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        rows.append(f"{relative},{_record_hash(data)},{len(data)}")
    rows += [f"{info.name}/METADATA,{_record_hash(metadata)},{len(metadata)}", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return site


def _engine(site: Path) -> Engine:
    dist = find_distribution(from_site_packages(site), DIST)
    return Engine(dist, [s for s in _specs() if s.distribution == dist.name])


def _targeted(version: str, selection: tuple[str, ...]) -> set[str]:
    selected = select_specs(_specs(), list(selection))
    return {t.file for s in selected for t in s.targets_for(version) if t.file}


def _bare_lf(data: bytes) -> int:
    return data.count(b"\n") - data.count(b"\r\n")


def check_variant(version: str, selection: tuple[str, ...], files: dict[str, Variant]) -> str:
    """Run the property on one drawn scenario; returns the outcome ("applied" or "drifted")."""
    try:
        return _check_variant(version, selection, files)
    except AssertionError:
        # keep the failing sources: hypothesis prints only the edits
        keep = Path(tempfile.mkdtemp(prefix="fp4patch-prop-failure-"))
        for relative, v in files.items():
            (keep / relative).parent.mkdir(parents=True, exist_ok=True)
            (keep / relative).write_bytes(v.data)
        note(f"failing sources kept in {keep}")
        raise


def _check_variant(version: str, selection: tuple[str, ...], files: dict[str, Variant]) -> str:
    targeted = _targeted(version, selection)
    selected = select_specs(_specs(), list(selection))
    neutral = all(v.plan.neutral for rel, v in files.items() if rel in targeted)
    with tempfile.TemporaryDirectory(prefix="fp4patch-prop-") as tmp:
        site = make_site(Path(tmp), version, {rel: v.data for rel, v in files.items()})
        before = snapshot(site)
        try:
            written = _engine(site).apply(selected)
        except DriftError as exc:
            assert not neutral, f"a variant with only neutral edits was refused: {exc}"
            assert snapshot(site) == before, "apply reported drift but changed files"
            assert not (site / STATE).exists()
            reports = [_engine(site).report(s) for s in selected]
            assert any(r.state == "drifted" for r in reports), [r.state for r in reports]
            return "drifted"

        after = snapshot(site)
        for relative, v in files.items():
            data = after[relative]
            # never code that does not parse or compile
            cst.parse_module(data)
            compile(data, relative, "exec", dont_inherit=True)
            if data == v.data:
                continue
            assert relative in targeted, f"{relative} changed but no selected spec targets it"
            dumps = {ast.dump(node) for node in ast.parse(data).body}
            for shadow in v.plan.shadows:  # same-name functions elsewhere stay as they are
                assert ast.dump(ast.parse(shadow).body[0]) in dumps, f"{relative}: a same-name definition was edited:\n{shadow}"
            assert data.startswith(b"\xef\xbb\xbf") == v.data.startswith(b"\xef\xbb\xbf"), f"{relative}: BOM not kept"
            if v.data.lstrip(b"\xef\xbb\xbf").startswith(b"#"):
                assert data.splitlines()[0] == v.data.splitlines()[0], f"{relative}: first line (coding cookie) changed"
            if b"\r\n" in v.data:
                assert _bare_lf(data) == _bare_lf(v.data), f"{relative}: CRLF file got {_bare_lf(data) - _bare_lf(v.data)} bare LF line endings"
        changed = {p for p in after if before.get(p) != after[p] and not p.startswith(STATE)}
        assert changed == {p.relative for p in written}
        states = {s.id: _engine(site).report(s).state for s in selected}
        assert set(states.values()) <= SATISFIED, states

        again = _engine(site).apply(selected)  # a fresh engine, as a second process would be
        assert again == [], [p.relative for p in again]
        assert snapshot(site) == after, "applying again changed files"

        _engine(site).revert(None)
        assert snapshot(site) == before, "revert did not restore every byte"
        assert not (site / STATE).exists()
        return "applied"


@st.composite
def scenario(draw, sources: dict[tuple[str, str], Source]):
    version = draw(st.sampled_from(VERSIONS), label="version")
    selection = draw(st.sampled_from(SELECTIONS), label="specs")
    files = {rel: draw(variant(src), label=rel) for (v, rel), src in sorted(sources.items()) if v == version}
    return version, selection, files


def _run(sources, data) -> None:
    version, selection, files = data.draw(scenario(sources), label="scenario")
    outcome = check_variant(version, selection, files)
    event(f"outcome: {outcome}")
    event(f"specs: {'+'.join(selection)} on {version}")
    if any(b"\r\n" in v.data for v in files.values()):
        event("a CRLF file")


@DEFAULT
@given(data=st.data())
def test_formatting_variants_apply_or_drift(sources, data) -> None:
    _run(sources, data)


@pytest.mark.property_long
@LONG
@given(data=st.data())
def test_formatting_variants_apply_or_drift_long(sources, data) -> None:
    _run(sources, data)


@FULL_DEFAULT
@given(data=st.data())
def test_whole_module_variants_apply_or_drift(full_sources, data) -> None:
    _run(full_sources, data)


@pytest.mark.property_long
@FULL_LONG
@given(data=st.data())
def test_whole_module_variants_apply_or_drift_long(full_sources, data) -> None:
    _run(full_sources, data)
