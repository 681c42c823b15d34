"""Spec loading: every malformed spec gives a ``SpecError`` starting with ``path:LINE:``.

The expected line is marked in each broken spec with a ``# <-- here`` comment (a TOML comment,
or a Python comment inside a code block), so no line number is hard-coded.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from packaging.version import Version

from fp4patch.errors import EXIT_USAGE, SpecError
from fp4patch.codemods import AddDecorator, AppendToModule, InsertAtFunctionStart, RewriteCallArguments
from fp4patch.catalog.spec import load_spec, load_specs

from .conftest import SPECS_DIR

MARK = "# <-- here"

VALID = '''\
id = "demo"
summary = "s"
rationale = "r"
distribution = "flashinfer-python"
default = true
conflicts = []
requires = []

[[target]]
versions = ">=0.6,<0.7"
file = "pkg/mod.py"

  [[target.operation]]
  kind = "insert-at-function-start"
  function = "f"
  anchor-calls = ["subprocess.check_output"]
  code = """
x = 1
y = 2
"""

[[target]]
versions = ">=0.7"
file = "pkg/other.py"

  [[target.operation]]
  kind = "add-decorator"
  function = "g"
  decorator = "torch.compiler.disable"
  position = "outermost"

  [[target.operation]]
  kind = "append-to-module"
  position = "end"
  code = """
def _helper():
    return 1
"""
'''


def write(directory: Path, text: str, name: str = "demo") -> Path:
    path = directory / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def marked_line(text: str) -> int:
    numbers = [i for i, line in enumerate(text.splitlines(), 1) if MARK in line]
    assert len(numbers) == 1, "a broken spec marks exactly one line"
    return numbers[0]


def sub(text: str, old: str, new: str, count: int = 1) -> str:
    assert old in text, old
    return text.replace(old, new, count)


def assert_error(error: SpecError, path: Path, line: int, *fragments: str) -> None:
    message = str(error)
    assert message.startswith(f"{path}:{line}: "), message
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message.rstrip("\n"), "one line"
    assert error.exit_code == EXIT_USAGE


def test_valid_spec_loads(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, VALID))
    assert spec.id == "demo" and spec.default is True
    assert [len(t.operations) for t in spec.targets] == [1, 2]
    insert, (decorator, append) = spec.targets[0].operations[0], spec.targets[1].operations
    assert isinstance(insert, InsertAtFunctionStart) and insert.anchor_calls == ("subprocess.check_output",)
    assert isinstance(decorator, AddDecorator) and decorator.position == "outermost"
    assert isinstance(append, AppendToModule) and append.position == "end"


# (name, how to break VALID, fragments of the message). The broken line carries MARK.
BROKEN = [
    ("invalid-toml", lambda t: sub(t, 'summary = "s"', f'summary = "s  {MARK}'), ["invalid TOML"]),
    ("duplicate-key", lambda t: sub(t, 'rationale = "r"', f'rationale = "r"\nsummary = "again"  {MARK}'), ["invalid TOML"]),
    ("unknown-top-level-key", lambda t: sub(t, "requires = []", f"requires = []\nbogus = 1  {MARK}"), ["unknown key 'bogus'"]),
    ("id-not-file-name", lambda t: sub(t, 'id = "demo"', f'# a comment first\nid = "other"  {MARK}'), ["'other'", "'demo'"]),
    ("id-not-kebab-case", lambda t: sub(t, 'id = "demo"', f'# a comment first\nid = "Demo_Spec"  {MARK}'), ["kebab-case"]),
    ("default-not-bool", lambda t: sub(t, "default = true", f'default = "yes"  {MARK}'), ["'default'"]),
    ("conflicts-not-a-list", lambda t: sub(t, "conflicts = []", f'conflicts = "other"  {MARK}'), ["'conflicts'"]),
    ("bad-specifier-second-target", lambda t: sub(t, 'versions = ">=0.7"', f'versions = ">=0.7,<<1"  {MARK}'), ["invalid PEP 440 specifier"]),
    ("unknown-target-key", lambda t: sub(t, 'file = "pkg/other.py"', f'file = "pkg/other.py"\nfiles = []  {MARK}'), ["unknown key 'files'"]),
    ("file-outside-site-packages", lambda t: sub(t, 'file = "pkg/other.py"', f'file = "../other.py"  {MARK}'), ["'../other.py'"]),
    (
        "unknown-operation-kind-third-operation",
        lambda t: sub(t, 'kind = "append-to-module"', f'kind = "append-to-everything"  {MARK}'),
        ["unknown operation kind 'append-to-everything'"],
    ),
    ("unknown-operation-key", lambda t: sub(t, 'function = "g"', f'function = "g"\n  decorators = "x"  {MARK}'), ["unknown key 'decorators'"]),
    ("key-of-another-kind", lambda t: sub(t, 'function = "f"', f'function = "f"\n  decorator = "x"  {MARK}'), ["unknown key 'decorator'"]),
    ("bad-decorator-position", lambda t: sub(t, 'position = "outermost"', f'position = "top"  {MARK}'), ["position must be one of"]),
    ("bad-append-position", lambda t: sub(t, 'position = "end"', f'position = "middle"  {MARK}'), ["position must be one of"]),
    ("decorator-not-an-expression", lambda t: sub(t, 'decorator = "torch.compiler.disable"', f'decorator = "def x"  {MARK}'), ["not a Python expression"]),
    ("anchor-calls-not-a-list", lambda t: sub(t, 'anchor-calls = ["subprocess.check_output"]', f'anchor-calls = "subprocess.check_output"  {MARK}'), ["'anchor-calls'"]),
    ("code-does-not-parse", lambda t: sub(t, "y = 2\n", f"y = (  {MARK}\n"), ["code does not parse"]),
    ("code-bad-indent", lambda t: sub(t, "y = 2\n", f"    y = 2  {MARK}\n"), ["code does not parse"]),
    ("code-does-not-parse-second-block", lambda t: sub(t, "def _helper():", f"def _helper(:  {MARK}"), ["code does not parse"]),
    ("code-file-missing", lambda t: sub(t, 'code = """\nx = 1\ny = 2\n"""', f'code-file = "demo/missing.py"  {MARK}'), ["cannot read code-file 'demo/missing.py'"]),
]


@pytest.mark.parametrize(("break_it", "fragments"), [pytest.param(b, f, id=n) for n, b, f in BROKEN])
def test_malformed_spec_names_path_and_line(tmp_path: Path, break_it, fragments) -> None:
    text = break_it(VALID)
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert_error(caught.value, path, marked_line(text), *fragments)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param('id = "demo"\n', "", id="missing-id"),
        pytest.param('distribution = "flashinfer-python"\n', "", id="missing-distribution"),
    ],
)
def test_missing_top_level_key_is_reported_at_line_1(tmp_path: Path, old: str, new: str) -> None:
    path = write(tmp_path, sub(VALID, old, new))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert_error(caught.value, path, 1, "missing required key")


def test_missing_operation_kind_points_at_the_operation(tmp_path: Path) -> None:
    text = sub(VALID, '  [[target.operation]]\n  kind = "add-decorator"\n', f"  [[target.operation]]  {MARK}\n")
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert_error(caught.value, path, marked_line(text), "missing required key 'kind'")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(sub(VALID, 'code = """\nx = 1\ny = 2\n"""', f'code = "x = = 1"  {MARK}'), id="single-line-string"),
        pytest.param(sub(VALID, "x = 1\ny = 2\n", f"\nx = 1\ny = (  {MARK}\n"), id="leading-blank-line"),
    ],
)
def test_code_error_line_for_other_layouts(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert_error(caught.value, path, marked_line(text), "code does not parse")


def test_code_file_error_points_into_the_code_file(tmp_path: Path) -> None:
    text = sub(VALID, 'code = """\nx = 1\ny = 2\n"""', 'code-file = "demo/early_return.py"')
    path = write(tmp_path, text)
    code_file = tmp_path / "demo" / "early_return.py"
    code_file.parent.mkdir()
    code_file.write_text(f"# helper\nif torch.version.cuda is not None:\n    return Version(torch.version.cuda  {MARK}\n")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert_error(caught.value, code_file.resolve(), marked_line(code_file.read_text()), "code does not parse")


def test_code_file_that_parses_is_loaded(tmp_path: Path) -> None:
    text = sub(VALID, 'code = """\nx = 1\ny = 2\n"""', 'code-file = "demo/early_return.py"')
    path = write(tmp_path, text)
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "early_return.py").write_text("if torch.version.cuda is not None:\n    return 1\n")
    op = load_spec(path).targets[0].operations[0]
    assert "torch.version.cuda" in op.code


# --------------------------------------------------------------------------- across specs
@pytest.mark.parametrize("key", ["conflicts", "requires"])
def test_reference_to_unknown_spec(tmp_path: Path, key: str) -> None:
    text = sub(VALID, f"{key} = []", f'{key} = ["no-such-spec"]  {MARK}')
    path = write(tmp_path, text)
    load_spec(path)  # a single spec cannot know the others
    with pytest.raises(SpecError) as caught:
        load_specs(tmp_path)
    assert_error(caught.value, path, marked_line(text), "unknown spec 'no-such-spec'")


def test_duplicate_ids_in_two_directories(tmp_path: Path) -> None:
    first = write(tmp_path / "a", VALID)
    second = write(tmp_path / "b", VALID)
    with pytest.raises(SpecError) as caught:
        load_specs(tmp_path)
    assert_error(caught.value, second, 1, "duplicate spec id 'demo'", str(first))


def test_duplicate_id_line_is_the_id_line(tmp_path: Path) -> None:
    write(tmp_path / "a", VALID)
    text = sub(VALID, 'id = "demo"', f'# the second copy\n\nid = "demo"  {MARK}')
    second = write(tmp_path / "b", text)
    with pytest.raises(SpecError) as caught:
        load_specs(tmp_path)
    assert_error(caught.value, second, marked_line(text), "duplicate spec id 'demo'")


def test_broken_spec_among_good_ones_fails_the_whole_load(tmp_path: Path) -> None:
    specs = tmp_path / "patches"
    shutil.copytree(SPECS_DIR, specs)
    text = sub(VALID, "y = 2\n", f"y = (  {MARK}\n")
    path = write(specs / "flashinfer-python", text)
    with pytest.raises(SpecError) as caught:
        load_specs(specs)
    assert_error(caught.value, path, marked_line(text), "code does not parse")


def test_missing_specs_directory(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="spec directory not found"):
        load_specs(tmp_path / "nope")


def test_builtin_specs_load() -> None:
    specs = load_specs(SPECS_DIR)
    ids = [s.id for s in specs]
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    assert {"cuda-version-from-torch", "fp4-quantize-compiler-disable"} <= set(ids)


def test_rewrite_call_arguments_loads(tmp_path: Path) -> None:
    text = sub(
        VALID,
        '  kind = "append-to-module"\n  position = "end"\n  code = """\ndef _helper():\n    return 1\n"""\n',
        '  kind = "rewrite-call-arguments"\n  function = "g"\n  call = "module.fp4_quantize"\n'
        '  from = "input, enable_pdl"\n  to = "input, enable_pdl=enable_pdl"\n',
    )
    op = load_spec(write(tmp_path, text)).targets[1].operations[1]
    assert isinstance(op, RewriteCallArguments) and op.call == "module.fp4_quantize"
    broken = sub(text, 'from = "input, enable_pdl"', f'from = "input,, enable_pdl"  {MARK}')
    path = write(tmp_path, broken)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert_error(caught.value, path, marked_line(broken), "not an argument list")


# --------------------------------------------------------------------------- versions
def target(specifier: str):
    text = sub(VALID, 'versions = ">=0.6,<0.7"', f'versions = "{specifier}"')
    return text


@pytest.mark.parametrize(
    ("specifier", "version", "expected"),
    [
        # post-releases are the release plus a fix: inside ranges that contain the release
        (">=0.6.11", "0.6.11.post3", True),
        (">=0.6,<0.7", "0.6.11.post3", True),
        ("~=0.6.11", "0.6.11.post3", True),
        ("==0.6.*", "0.6.11.post3", True),
        ("==0.6.0", "0.6.0", True),
        # ...but an exact pin means that file, not a later rebuild (PEP 440: ==0.6.0 is not 0.6.0.post1)
        ("==0.6.0", "0.6.0.post1", False),
        # pre-releases and dev builds inside a range are targeted (packaging would skip them by default)
        (">=0.6,<0.7", "0.6.12rc1", True),
        (">=0.6,<0.7", "0.6.12.dev0", True),
        ("==0.6.*", "0.6.0rc1", True),
        # a preview of 0.7 carries 0.7 code: it is not part of "<0.7" (the 0.6 series)
        ("<0.7", "0.7.0rc1", False),
        ("<0.7", "0.7.0.dev1", False),
        (">=0.6,<0.7", "0.7.0rc1", False),
        ("<0.7", "0.6.99", True),
        # an author targets the previews explicitly
        (">=0.7.0rc1", "0.7.0rc1", True),
        (">=0.7.0rc1", "0.7.0", True),
        (">=0.7.0rc1", "0.7.0.post1", True),
        ("<0.7.0rc1", "0.7.0rc1", False),
        # outside
        (">=0.6,<0.7", "0.5.3", False),
        (">=0.6,<0.7", "0.7.0", False),
    ],
)
def test_target_contains(tmp_path: Path, specifier: str, version: str, expected: bool) -> None:
    spec = load_spec(write(tmp_path, target(specifier)))
    first = spec.targets[0]
    assert first.contains(version) is expected
    assert first.contains(Version(version)) is expected
    assert (first in spec.targets_for(version)) is expected




@pytest.mark.parametrize(
    ("version", "expected_target"),
    [
        ("0.6.10", 0),
        ("0.6.10.post1", 0),
        ("0.6.10rc1", 0),
        ("0.6.11", 1),
        ("0.6.11.post3", 1),
        ("0.6.11rc1", 1),
        ("0.6.11.dev2", 1),
    ],
)
def test_adjacent_targets_partition_every_version(tmp_path: Path, version: str, expected_target: int) -> None:
    """Two targets `<X` and `>=X` (how authors split version ranges) cover every version exactly once.

    A pre-release of X carries X's code, so users expect it in `>=X`.
    """
    text = sub(VALID, 'versions = ">=0.6,<0.7"', 'versions = ">=0.6,<0.6.11"')
    text = sub(text, 'versions = ">=0.7"', 'versions = ">=0.6.11,<0.7"')
    spec = load_spec(write(tmp_path, text))
    assert [i for i, t in enumerate(spec.targets) if t.contains(version)] == [expected_target]
