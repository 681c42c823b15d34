"""The on-disk cache of rendered custom ops (fp4patch/ops/cache.py): a hit is what render gives,
anything odd in the cache is rendered afresh, and an unwritable cache only costs time."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from fp4patch.codemods.append_to_module import block_index
from fp4patch.ops import cache as op_cache
from fp4patch.ops.render import OpSourceError, render
from fp4patch.catalog.spec import load_specs

from .conftest import SPECS_DIR, applied_site, read_only, run_cli

#: every file of the op-source language (fp4patch/ops/), each a part of the cache key
LANGUAGE = sorted(p.name for p in Path(op_cache.__file__).resolve().parent.glob("*.py"))
TARGETS = [
    kwargs["target"]
    for spec in load_specs(SPECS_DIR)
    for target in spec.targets
    for kind, kwargs in target.operation_specs
    if kind == "custom-op"
]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FP4PATCH_OP_CACHE", str(tmp_path / "ops"))
    monkeypatch.delenv("FP4PATCH_NO_OP_CACHE", raising=False)
    return tmp_path / "ops"


def _no_render(monkeypatch: pytest.MonkeyPatch) -> list:
    calls = []

    def refuse(target):
        calls.append(target)
        raise AssertionError("rendered although the cache holds the entry")

    monkeypatch.setattr(op_cache, "render", refuse)
    return calls


def test_every_default_custom_op_target_is_read_back_as_rendered(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(TARGETS) > 20
    rendered = []
    monkeypatch.setattr(op_cache, "render", lambda t: rendered.append(render(t)) or rendered[-1])
    fresh = [op_cache.render_cached(t) for t in TARGETS]
    assert len(rendered) == len({op_cache.key(t) for t in TARGETS}) == len(list(cache.glob("*.json")))
    _no_render(monkeypatch)
    again = [op_cache.render_cached(t) for t in TARGETS]
    assert again == fresh
    # what render gave, plus the block's index (what checking an appended block compares)
    assert [dataclasses.replace(r, block_index=None) for r in again] == [render(t) for t in TARGETS]
    assert all(r.block_index == block_index(r.block) for r in again)


def test_status_answers_the_same_with_and_without_the_cache(cache: Path, tmp_path: Path, tmp_path_factory) -> None:
    # patched files without fp4patch's manifest (which would answer "applied" from its hashes): each
    # appended block must be found through the cached index, as without the cache
    site = tmp_path / "site-packages"
    shutil.copytree(applied_site("0.6.0", tmp_path_factory), site, symlinks=True, copy_function=os.link, ignore=shutil.ignore_patterns(".fp4patch"))
    args = ("status", "--json", "--site-packages", str(site))
    cold = run_cli(*args, env={"FP4PATCH_NO_OP_CACHE": "1"})
    first, warm = run_cli(*args), run_cli(*args)
    assert cold.returncode == first.returncode == warm.returncode == 0, cold.stderr
    assert json.loads(cold.stdout) == json.loads(first.stdout) == json.loads(warm.stdout)
    assert {s["state"] for s in json.loads(warm.stdout)["specs"] if s["default"]} <= {"applied", "not-needed"}
    assert list(cache.glob("*.json"))


@pytest.mark.parametrize("field", ["source", "params", "defaults", "release", "callers", "spec_id", "helpers"])
def test_a_change_to_any_input_is_another_entry(cache: Path, field: str) -> None:
    target = next(t for t in TARGETS if t.helpers and t.defaults)
    change = {
        "source": lambda v: v + "\n# changed\n",
        "params": lambda v: v[:-1],
        "defaults": lambda v: {**v, next(iter(v)): "None"},
        "release": lambda v: {**v, "changed": True},
        "callers": lambda v: (*v, "other"),
        "spec_id": lambda v: v + "-changed",
        "helpers": lambda v: {k: t + "\n# changed\n" for k, t in v.items()},
    }[field]
    changed = change(getattr(target, field))
    assert changed != getattr(target, field)
    assert op_cache.key(dataclasses.replace(target, **{field: changed})) != op_cache.key(target)


@pytest.mark.parametrize(
    "content",
    ["", "not json", "[]", '{"op_name": "fp4patch::x_1", "redirect": "r"}', '{"op_name": "other::x", "redirect": "r", "block": "b"}',
     '{"op_name": "fp4patch::x", "redirect": 1, "block": "b", "block_index": [["k"], ["line", ""]]}',
     '{"op_name": "fp4patch::x", "redirect": "r", "block": "b", "block_index": [[], ["line", ""]]}',
     '{"op_name": "fp4patch::x", "redirect": "r", "block": "b", "block_index": "k"}', "[" * 100_000],
    ids=["empty", "not-json", "list", "missing-key", "foreign-name", "not-a-string", "empty-index", "index-not-a-pair", "deep"],
)
def test_a_malformed_entry_is_rendered_afresh_and_rewritten(cache: Path, content: str) -> None:
    target = TARGETS[0]
    path = cache / f"{op_cache.key(target)}.json"
    path.parent.mkdir(parents=True)
    path.write_text(content)
    expected = render(target)
    assert dataclasses.replace(op_cache.render_cached(target), block_index=None) == expected
    written = json.loads(path.read_text())
    assert [written[k] for k in ("op_name", "redirect", "block")] == [expected.op_name, expected.redirect, expected.block]


def test_an_unwritable_cache_renders_and_writes_nothing(cache: Path) -> None:
    cache.mkdir()
    with read_only(cache):
        assert dataclasses.replace(op_cache.render_cached(TARGETS[0]), block_index=None) == render(TARGETS[0])
    assert list(cache.iterdir()) == []


def test_a_cache_path_that_is_a_file_is_skipped(cache: Path) -> None:
    cache.write_text("a file where the folder should be")
    assert dataclasses.replace(op_cache.render_cached(TARGETS[0]), block_index=None) == render(TARGETS[0])


def test_no_home_directory_renders_without_a_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # docker run -u 12345 with no HOME: Path.home() raises RuntimeError
    monkeypatch.delenv("FP4PATCH_OP_CACHE", raising=False)
    monkeypatch.delenv("FP4PATCH_NO_OP_CACHE", raising=False)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert op_cache.render_cached(TARGETS[0]) == render(TARGETS[0])


def test_no_op_cache_variable_turns_it_off(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FP4PATCH_NO_OP_CACHE", "1")
    op_cache.render_cached(TARGETS[0])
    assert not cache.exists()


def test_errors_are_not_cached(cache: Path) -> None:
    broken = dataclasses.replace(TARGETS[0], source="def entry(:\n")
    for _ in range(2):
        with pytest.raises(OpSourceError):
            op_cache.render_cached(broken)
    assert not cache.exists() or list(cache.iterdir()) == []


@pytest.mark.parametrize("name", LANGUAGE)
def test_a_changed_renderer_is_another_entry(cache: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # the renderer is every module of fp4patch/ops: a change to any construct is another entry
    assert len(LANGUAGE) > 10
    assert _key_under_edited(monkeypatch, name, TARGETS[0]) != op_cache.key(TARGETS[0])
    assert os.environ["FP4PATCH_OP_CACHE"] == str(cache)


def test_files_replaced_under_a_running_process_do_not_change_its_key(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the code this process runs is what it imported: files edited after that (an upgrade, a checkout or
    # merge under a long test run) must not give its renderings the new code's key
    import importlib

    before = op_cache.key(TARGETS[0])
    importlib.reload(op_cache)  # as a fresh process imports it: nothing rendered yet
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: real(self) + b"# edited" if self.name in LANGUAGE else real(self))
    assert op_cache.key(TARGETS[0]) == before


def _key_under_edited(monkeypatch: pytest.MonkeyPatch, name: str, target) -> str:
    """``target``'s key as an fp4patch whose ``name`` (a module file's name) differs would compute it."""
    real = Path.read_bytes
    saved = op_cache._renderer_hash
    with monkeypatch.context() as edit:
        edit.setattr(Path, "read_bytes", lambda self: real(self) + b"# edited" if self.name == name else real(self))
        edit.setattr(op_cache, "_renderer_hash", op_cache._hash_renderer())
        key = op_cache.key(target)
    assert op_cache._renderer_hash == saved
    return key


@pytest.mark.parametrize("name", ["base.py", "append_to_module.py"])
def test_a_changed_block_index_is_another_entry(cache: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # the entry's block_index is statement_key (operations/base.py) and _shape (append_to_module.py)
    # of the block: an fp4patch that computes them otherwise must not read this one's entries
    assert _key_under_edited(monkeypatch, name, TARGETS[0]) != op_cache.key(TARGETS[0])


def test_an_index_another_fp4patch_wrote_leaves_status_as_without_the_cache(
    cache: Path, tmp_path: Path, tmp_path_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # entries written by an fp4patch whose statement keys differ (its operations/base.py is another):
    # right block and redirect, an index this fp4patch would not compute. Without the manifest, status
    # finds each appended block through the index: it must answer as without the cache.
    for target in TARGETS:
        rendered = render(target)
        keys, head = block_index(rendered.block)
        stale = dataclasses.replace(rendered, block_index=([k.replace("Name(", "Name (") for k in keys], list(head)))
        name = _key_under_edited(monkeypatch, "base.py", target)
        op_cache._write(cache / f"{name}.json", name, stale)  # as that fp4patch writes it
    site = tmp_path / "site-packages"
    shutil.copytree(applied_site("0.6.0", tmp_path_factory), site, symlinks=True, copy_function=os.link, ignore=shutil.ignore_patterns(".fp4patch"))
    args = ("status", "--json", "--site-packages", str(site))
    cold, warm = run_cli(*args, env={"FP4PATCH_NO_OP_CACHE": "1"}), run_cli(*args)
    assert cold.returncode == warm.returncode == 0, warm.stderr
    assert json.loads(warm.stdout) == json.loads(cold.stdout)


def test_an_entry_under_another_targets_name_is_rendered_afresh(cache: Path) -> None:
    # cp a.json b.json (or a sync tool renaming files): the entry names another target's op
    first, second = TARGETS[0], next(t for t in TARGETS if render(t).block != render(TARGETS[0]).block)
    op_cache.render_cached(first)
    (cache / f"{op_cache.key(first)}.json").rename(cache / f"{op_cache.key(second)}.json")
    assert dataclasses.replace(op_cache.render_cached(second), block_index=None) == render(second)


@pytest.mark.parametrize("edit", ["block", "redirect", "op_name"])
def test_an_entry_edited_by_hand_is_rendered_afresh(cache: Path, edit: str) -> None:
    # someone debugging a rendered op edits its cached text: apply must still write what render gives
    target = TARGETS[0]
    op_cache.render_cached(target)
    path = cache / f"{op_cache.key(target)}.json"
    data = json.loads(path.read_text())
    data[edit] = data[edit].replace("fp4patch", "fp4patch_edited", 1)
    path.write_text(json.dumps(data))
    assert dataclasses.replace(op_cache.render_cached(target), block_index=None) == render(target)
