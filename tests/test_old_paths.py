"""The import paths of modules that moved into the subsystem folders (issue 26) keep working: ``fp4patch.plan`` is
:mod:`fp4patch.engine.plan` (the same module object), a submodule of a moved package resolves under the new one,
``python -m`` of an old path runs the new module, and importing :mod:`fp4patch` costs no more than the finder.
"""

from __future__ import annotations

import ast
import json
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from fp4patch.old_paths import MOVED, MOVED_PACKAGES, new_name

from .test_import_graph import SOURCE, modules


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_new_module(old: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])


def test_every_module_that_moved_is_listed() -> None:
    """The first commit of the folders (bc5f8bb) moved every flat module but the base; each old name is listed, and
    no listed name points at a module that does not exist."""
    now = set(modules(SOURCE))
    assert set(MOVED.values()) <= now, sorted(set(MOVED.values()) - now)
    flat_before = {"plan", "journal", "lock", "manifest", "recovery", "files", "bytecode", "install_record", "leftovers",
                   "set_stamp", "sources", "report", "selection", "verdict", "advice", "trace", "fake_check", "cpu_check",
                   "spec", "releases", "evidence", "fingerprint", "native", "trace_probe", "fake_check_probe",
                   "opcheck_probe", "scan_probe", "oracle", "environment", "torch_support", "against", "compat",
                   "scaffold", "custom_op", "render", "entry"}
    assert {f"fp4patch.{m}" for m in flat_before} == set(MOVED)


def test_a_submodule_of_a_moved_package_resolves_under_the_new_one() -> None:
    import fp4patch.codemods.base
    import fp4patch.operations.base

    assert fp4patch.operations.base is fp4patch.codemods.base
    assert new_name("fp4patch.operations.add_decorator") == "fp4patch.codemods.add_decorator"
    assert new_name("fp4patch.engine.plan") is None and new_name("fp4patch.errors") is None
    assert MOVED_PACKAGES == {"fp4patch.operations": "fp4patch.codemods"}


def test_the_packages_that_kept_their_names_offer_the_old_modules_names() -> None:
    from fp4patch.catalog import load_catalog
    from fp4patch.catalog.catalog_file import load_catalog as new_load
    from fp4patch.engine import Engine, select_specs
    from fp4patch.engine.coordinator import Engine as NewEngine
    from fp4patch.engine.coordinator import select_specs as new_select

    assert (Engine, select_specs, load_catalog) == (NewEngine, new_select, new_load)
    with pytest.raises(AttributeError):
        import fp4patch.engine

        fp4patch.engine.no_such_name  # noqa: B018


def test_python_m_of_an_old_path_runs_the_new_module() -> None:
    done = subprocess.run([sys.executable, "-m", "fp4patch.compat", "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "--replay" in done.stdout


def test_importing_fp4patch_imports_only_the_finder() -> None:
    """The console script's fast path imports :mod:`fp4patch` first: the finder must not pull in importlib.abc
    (importlib.resources, about 100 ms cold) or any fp4patch module besides itself."""
    code = "import sys; before = set(sys.modules); import fp4patch; print(sorted(set(sys.modules) - before))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = ast.literal_eval(done.stdout)  # a printed list of module names
    assert {m for m in loaded if m.startswith("fp4patch")} == {"fp4patch", "fp4patch.old_paths"}, loaded
    assert not {"importlib.abc", "importlib.resources", "importlib.util"} & set(loaded), loaded


SUBMODULE_CHILD = """
import sys, importlib
import fp4patch.codemods
from fp4patch.operations.base import Operation, OperationError
from fp4patch.operations.add_decorator import AddDecorator
import fp4patch.codemods.base as new
import fp4patch.plan
plan = sys.modules["fp4patch.engine.plan"]
print(sys.modules["fp4patch.operations.base"] is new, Operation is new.Operation, issubclass(AddDecorator, new.Operation),
      plan.__spec__.name, plan.__name__, importlib.util.find_spec("fp4patch.operations.no_such_module"))
importlib.reload(sys.modules["fp4patch.operations"])
import fp4patch.codemods.append_to_module
print(fp4patch.codemods.__path__ == [fp4patch.codemods.__spec__.submodule_search_locations[0]])
"""


def test_a_moved_packages_submodule_runs_once_and_modules_keep_their_names() -> None:
    """In a fresh process (the parent's imports would hide it): the submodule imported through the old package name
    is the new module, not a second copy found through the package's ``__path__`` (its classes would differ, an
    error raised by the codemods would not be caught as the old name's class); the module keeps its own
    ``__spec__`` (``importlib.reload`` reloads it under its name); an old name whose module does not exist has no
    spec; reloading the old package leaves the new one's ``__path__``."""
    done = subprocess.run([sys.executable, "-c", SUBMODULE_CHILD], capture_output=True, text=True, check=True)
    first, second = done.stdout.splitlines()
    assert first == "True True True fp4patch.engine.plan fp4patch.engine.plan None", first
    assert second == "True", done.stdout


def test_star_imports_of_the_packages_that_kept_their_names_offer_the_old_modules_names() -> None:
    for package, names in (("fp4patch.engine", {"Engine", "select_specs", "APPLIED"}), ("fp4patch.catalog", {"load_catalog", "Catalog", "evidence_text"})):
        found: dict = {}
        exec(f"from {package} import *", found)  # noqa: S102 - the star import is what is tested
        assert names <= set(found), (package, sorted(found))


def test_the_compat_tools_old_names_are_still_offered() -> None:
    """``fp4patch.compat`` offered the replay and the report's markers before they had modules of their own."""
    from fp4patch.compat import KEPT_SECTIONS, cut_catalog, render_replay, replay_release
    from fp4patch.tools.compat_report import KEPT_SECTIONS as kept
    from fp4patch.tools.replay import cut_catalog as cut
    from fp4patch.tools.replay import render_replay as rendered
    from fp4patch.tools.replay import replay_release as released

    assert (KEPT_SECTIONS, cut_catalog, render_replay, replay_release) == (kept, cut, rendered, released)


OLD_NAMES = json.loads((Path(__file__).resolve().parent / "data" / "old_public_names.json").read_text(encoding="utf-8"))["modules"]


@pytest.mark.parametrize("old", sorted(OLD_NAMES))
def test_every_public_name_a_moved_module_defined_is_still_offered_there(old: str) -> None:
    """tests/data/old_public_names.json: each public name each moved module defined at the top level before the
    folders (read from its source at bc5f8bb~1); a split that moves a name to a new module re-exports it (the new
    user's trial found ``fp4patch.compat.cut_catalog`` and ``fp4patch.scan_probe.MAX_M`` gone)."""
    module = importlib.import_module(old)
    assert [n for n in OLD_NAMES[old] if not hasattr(module, n)] == []
