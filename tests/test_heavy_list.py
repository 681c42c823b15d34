"""``tests/heavy.txt`` and the rule that writes it (``scripts/heavy_tests.py``): which tests ``make test`` leaves out."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .conftest import heavy_tests

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "heavy_tests.py"


def _script():
    spec = importlib.util.spec_from_file_location("heavy_tests_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rule_keeps_one_cheap_instance_of_a_test_that_is_heavy_everywhere() -> None:
    durations = {
        "tests/test_a.py::test_x[0.6.0]": 31.0,
        "tests/test_a.py::test_x[0.7.4]": 15.0,  # the cheapest 0.7.4 instance under 20 s stays in make test
        "tests/test_a.py::test_y[0.6.0]": 12.0,
        "tests/test_a.py::test_y[0.7.4]": 3.0,  # a quick instance is left anyway: test_y[0.6.0] is heavy
        "tests/test_a.py::test_z[0.7.4]": 44.0,  # over 20 s: no instance is kept back
        "tests/test_a.py::test_z[0.6.0]": 39.0,
        "tests/test_b.py::test_single": 9.9,
    }
    assert _script().heavy(durations, 10.0, 20.0) == {
        "tests/test_a.py::test_x[0.6.0]", "tests/test_a.py::test_y[0.6.0]", "tests/test_a.py::test_z[0.7.4]", "tests/test_a.py::test_z[0.6.0]"}


def test_the_list_names_tests_by_node_id_and_leaves_most_of_the_suite_to_make_test() -> None:
    listed = heavy_tests()
    assert listed and all(n.startswith("tests/test_") and ".py::test_" in n for n in listed), sorted(listed)[:3]
    # the conftest hook refuses a stale id when its file is collected whole; here: each listed file exists
    assert all((SCRIPT.parent.parent / n.split("::", 1)[0]).is_file() for n in listed)
