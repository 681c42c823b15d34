"""A rendered op block appended at the end of a file is added as its text (fp4patch.engine.plan.appended_text), not parsed
and printed again by libcst (half of a first apply's time on 0.7.4): the bytes must be exactly the tree's."""

from __future__ import annotations

import pytest

from fp4patch.engine import plan as plan_module
from fp4patch.engine.coordinator import Engine, select_specs
from fp4patch.target.environment import find_distribution, from_site_packages
from fp4patch.catalog.spec import load_specs

from .conftest import release_site


@pytest.mark.parametrize("version", ["0.6.0", "0.7.4"])
def test_blocks_appended_as_text_are_the_bytes_libcst_prints(tmp_path_factory, monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    site = release_site(version, tmp_path_factory, sources_only=True)
    specs = [s for s in load_specs() if s.distribution == "flashinfer-python"]

    def planned() -> dict[str, bytes]:
        engine = Engine(find_distribution(from_site_packages(site), "flashinfer-python"), specs, notify=lambda m: None)
        return {relative: p.patched for relative, p in engine.plan(select_specs(specs, None)).items()}

    as_text = planned()
    monkeypatch.setattr(plan_module, "_appends_as_text", lambda module: False)
    as_tree = planned()
    assert as_text.keys() == as_tree.keys() and len(as_text) >= 6
    assert [r for r in as_text if as_text[r] != as_tree[r]] == []


BLOCKS = [
    "x = 1\n",
    (
        "# fp4patch: a comment above\n# and another\n\nimport sys\n\n\ndef g(a,  b = 2):\n    if a:\n        return (\n            b\n        )\n"
        '    return """two\nlines"""\n'
    ),
    "@decorator\nclass C:\n    x: int = 1\n\n    def f(self):  # trailing comment\n        pass\n",
]


@pytest.mark.parametrize("code", BLOCKS)
def test_a_block_as_text_is_what_the_tree_prints(code: str) -> None:
    import libcst as cst

    from fp4patch.codemods.append_to_module import AppendToModule

    module = cst.parse_module("import os\n\n\ndef f():\n    return os.sep\n")
    op = AppendToModule(code=code, position="end")
    assert plan_module._appends_as_text(module)
    assert module.code + "\n\n" + plan_module.appended_text(op) == op.apply(module).code


def test_a_block_that_libcst_would_print_otherwise_goes_through_the_tree() -> None:
    """A CRLF or tab-indented file, a footer after the last statement; a block with other indents or a trailing comment."""
    import libcst as cst

    from fp4patch.codemods.append_to_module import AppendToModule

    assert plan_module._appends_as_text(cst.parse_module("def f():\n    pass\n"))
    assert not plan_module._appends_as_text(cst.parse_module("def f():\r\n    pass\r\n"))
    assert not plan_module._appends_as_text(cst.parse_module("def f():\n\tpass\n"))
    assert not plan_module._appends_as_text(cst.parse_module("def f():\n    pass\n# the end\n"))
    assert plan_module.appended_text(AppendToModule(code="def g():\n  return 1\n", position="end")) is None
    assert plan_module.appended_text(AppendToModule(code="def g():\n    return 1\n# trailing\n", position="end")) is None
    assert plan_module.appended_text(AppendToModule(code="import os\n", position="after-imports")) is None


def test_a_file_with_a_byte_order_mark_gets_one_mark(tmp_path) -> None:
    """libcst reads a UTF-8 file with a BOM as utf-8-sig: the blocks appended as text carry no second mark."""
    import libcst as cst

    from fp4patch.codemods.append_to_module import AppendToModule

    data = b"\xef\xbb\xbfimport os\n"
    module = cst.parse_module(data)
    op = AppendToModule(code="def g():\n    return 1\n", position="end")
    text = plan_module.appended_text(op)
    encoding = "utf-8" if module.encoding == "utf-8-sig" else module.encoding
    assert module.bytes + ("\n\n" + text).encode(encoding) == op.apply(module).bytes


def test_a_result_that_does_not_compile_is_refused_before_any_write(tmp_path, tmp_path_factory) -> None:
    """The bytes apply would write, stamp included, must compile (plan.check_result after the set stamp): an edit that
    libcst prints but CPython rejects (a nonlocal with no binding) is drift; nothing is written."""
    import shutil

    from fp4patch.errors import DriftError

    from .conftest import snapshot

    site = shutil.copytree(release_site("0.6.0", tmp_path_factory, sources_only=True), tmp_path / "site-packages")
    specs_dir = tmp_path / "patches" / "flashinfer-python"
    specs_dir.mkdir(parents=True)
    (specs_dir / "nonlocal-demo.toml").write_text(
        'id = "nonlocal-demo"\nsummary = "an edit that does not compile"\nrationale = "a test double"\ndistribution = "flashinfer-python"\ndefault = true\n'
        'conflicts = []\nrequires = []\n\n[[target]]\nversions = ">=0.6.0"\nfile = "flashinfer/jit/cpp_ext.py"\n\n'
        '  [[target.operation]]\n  kind = "insert-at-function-start"\n  function = "get_cuda_version"\n'
        '  anchor-calls = ["subprocess.check_output"]\n  code = """\nnonlocal no_such_name\n"""\n',
        encoding="utf-8",
    )
    specs = load_specs(tmp_path / "patches")
    engine = Engine(find_distribution(from_site_packages(site), "flashinfer-python"), specs, notify=lambda m: None)
    before = snapshot(site)
    with pytest.raises(DriftError, match=r"cpp_ext\.py: patched result does not compile \(no binding for nonlocal"):
        engine.apply(select_specs(specs, None))
    assert snapshot(site) == before
