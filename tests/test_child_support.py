"""``tests/child_support.py``'s stand-ins for missing packages, in process (no torch): the guarantees the engine
tests (``tests/test_engines.py``) rest on. A stand-in is served only to the named importers, never in place of an
installed package, and not to anyone after :meth:`MissingPackages.withdraw`; calls after ``arm`` are recorded; an
entry nothing imported is reported.
"""

from __future__ import annotations

import sys

import pytest

from .child_support import MissingPackages

ENGINE = "fp4patch_test_engine.layers"  # the importing module's name, as an engine module's would be
ABSENT = "fp4patch_absent_kernels"  # a package no interpreter has


def _import(statement: str, importer: str) -> dict:
    """Run ``statement`` as code of module ``importer``; its namespace."""
    namespace = {"__name__": importer}
    exec(statement, namespace)  # noqa: S102 - the import statement is the test's own
    return namespace


@pytest.fixture
def stand_ins():
    """A :class:`MissingPackages` for :data:`ABSENT` (importers: :data:`ENGINE`'s package), a value, an alias and an
    entry nothing imports; removed from ``sys.meta_path`` and ``sys.modules`` afterwards."""
    finder = MissingPackages(
        {ABSENT: ("test", ("fp4patch_test_engine",)), "fp4patch_absent_re": ("test", ("fp4patch_test_engine",)),
         "fp4patch_never_imported": ("test", ("fp4patch_test_engine",)), "colorsys": ("installed", ("fp4patch_test_engine",))},
        values={f"{ABSENT}.dumps": lambda *args: b""},
        aliases={"fp4patch_absent_re": "re"},
    ).install()
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)
        finder.withdraw()


def test_a_stand_in_is_served_to_the_named_importers_only_until_withdrawn(stand_ins) -> None:
    with pytest.raises(ModuleNotFoundError):
        _import(f"import {ABSENT}", "torch._dynamo.utils")  # torch asks first: the interpreter's answer
    module = _import(f"import {ABSENT}.language as tl", ENGINE)["tl"]
    assert module.__name__ == f"{ABSENT}.language" and f"{ABSENT}.language" in sys.modules
    stand_ins.withdraw()
    assert not [name for name in sys.modules if name.startswith(ABSENT)]
    with pytest.raises(ModuleNotFoundError):
        _import(f"import {ABSENT}", "torch.utils._triton")
    assert stand_ins.missing() == [ABSENT]


def test_an_installed_package_is_the_real_one(stand_ins) -> None:
    sys.modules.pop("colorsys", None)
    colorsys = _import("import colorsys", ENGINE)["colorsys"]
    assert colorsys.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    assert "colorsys" not in stand_ins.missing() and "colorsys" not in stand_ins.unneeded()


def test_a_module_body_can_use_stand_ins_and_calls_after_arm_are_recorded(stand_ins) -> None:
    code = (
        f"import {ABSENT} as k\n"
        "from fp4patch_absent_re import escape\n"
        "@k.jit\n"
        "def kernel(x):\n"
        "    return x\n"
        "class Config(k.PretrainedConfig, frozen=True):\n"
        "    field: 'int | k.Tensor' = 0\n"
        "hint = dict | k.Tensor\n"
        "k.CONFIG_MAPPING['mine'] = Config\n"
        "blob = k.dumps(kernel)\n"
        "pattern = escape('[')\n"
    )
    namespace = _import(code, ENGINE)
    assert namespace["blob"] == b"" and namespace["pattern"] == r"\["  # the value set, the real re
    assert stand_ins.used == []  # calls while the engine imports are not counted
    stand_ins.arm()
    namespace["k"].cdiv(8, 128)
    namespace["Config"]()
    assert stand_ins.used == [f"{ABSENT}.cdiv", f"{ENGINE}.Config"]


def test_an_entry_nothing_imported_is_reported(stand_ins) -> None:
    _import(f"import {ABSENT}", ENGINE)
    assert stand_ins.unneeded() == ["fp4patch_absent_re", "fp4patch_never_imported"]
