"""The import paths modules had before the subsystem folders (issue 26), kept working.

``fp4patch.plan`` is :mod:`fp4patch.engine.plan`, ``fp4patch.operations.base`` is :mod:`fp4patch.codemods.base`,
and so on for every module that moved (:data:`MOVED`, :data:`MOVED_PACKAGES`): the old name is an alias of the
same module object (``sys.modules`` holds both; the module keeps its own ``__name__`` and ``__spec__``, so
``importlib.reload`` and pickling use the new name), so attributes set through one are seen through the other and
``python -m fp4patch.compat`` still runs the tool. :func:`install` puts :class:`OldPathFinder` first on
``sys.meta_path``: a submodule of a moved package (``fp4patch.operations.base``) must not be found a second time by
the path finder through the package's ``__path__`` (a second module object, with classes of its own). It answers
only names of :data:`MOVED` and :data:`MOVED_PACKAGES` (``None`` for every other name, and for an old name whose new
module does not exist) and imports nothing until such a name is imported. New code imports the new paths
(``docs/architecture.md`` is the map).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from types import CodeType, ModuleType

TYPE_CHECKING = False  # typing is not imported: ``import fp4patch`` is on the fast path of ``verify``
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_GROUPS = {
    "engine": ("plan", "journal", "lock", "manifest", "recovery", "files", "bytecode", "install_record", "leftovers",
               "set_stamp", "sources", "report", "selection", "verdict", "advice"),
    "checks": ("trace", "fake_check", "cpu_check"),
    "catalog": ("spec", "releases", "evidence", "fingerprint", "native"),
    "probes": ("trace_probe", "fake_check_probe", "opcheck_probe", "scan_probe", "oracle"),
    "target": ("environment", "torch_support"),
    "tools": ("against", "compat", "scaffold"),
}

#: old module name -> the module it is now (``fp4patch.engine`` and ``fp4patch.catalog`` kept their names as
#: packages, which offer the old modules' names lazily)
MOVED: dict[str, str] = {
    **{f"fp4patch.{m}": f"fp4patch.{group}.{m}" for group, names in _GROUPS.items() for m in names},
    "fp4patch.custom_op": "fp4patch.ops.render",
    "fp4patch.render": "fp4patch.cli.render",
    "fp4patch.entry": "fp4patch.cli.entry",
}
#: old package -> the package it is now (every module under it moved with it)
MOVED_PACKAGES: dict[str, str] = {"fp4patch.operations": "fp4patch.codemods"}


def new_name(name: str) -> str | None:
    """The module an old dotted ``name`` now is (``"fp4patch.plan"`` -> ``"fp4patch.engine.plan"``), or ``None``
    for a name that did not move."""
    if name in MOVED:
        return MOVED[name]
    for old, new in MOVED_PACKAGES.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return None


class _AliasLoader:
    """Loads an old name as the module its new name imports (the same object). A loader by protocol, not by
    :class:`importlib.abc.Loader` (that import costs the fast path of ``verify`` ~100 ms: importlib.resources)."""

    def __init__(self, target: str, package: bool) -> None:
        self.target = target
        self.package = package
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self._spec = module.__spec__  # the import system sets the alias's spec on it next; exec_module puts it back
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing runs (the new name's import ran the module); its own ``__spec__`` is put back."""
        if self._spec is not None:
            module.__spec__ = self._spec

    def get_code(self, fullname: str) -> CodeType:
        """For ``python -m fp4patch.compat``: code that runs the new module as ``__main__`` (:func:`runpy.run_module`,
        so that its relative imports resolve in its new package)."""
        return compile(f"import runpy\nrunpy.run_module({self.target!r}, run_name='__main__', alter_sys=True)\n", f"<{fullname}>", "exec")

    def is_package(self, fullname: str) -> bool:
        return self.package


class OldPathFinder:
    """A meta path finder for the old names of moved modules (:func:`new_name`); ``None`` for every other name."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        new = new_name(fullname)
        if new is None:
            return None
        import importlib.util

        found = sys.modules[new].__spec__ if new in sys.modules else importlib.util.find_spec(new)
        if found is None:
            return None
        package = found.submodule_search_locations is not None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new, package), is_package=package)


def names_of(package: str, module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) for ``package`` that offers the names of its module ``module`` on first use,
    ``__all__`` included (what ``from package import *`` took when the package was that single-file module); for
    ``fp4patch.engine`` (:mod:`~fp4patch.engine.coordinator`) and ``fp4patch.catalog``
    (:mod:`~fp4patch.catalog.catalog_file`), whose import must load nothing (the fast path of ``verify``).

    The returned function raises :class:`AttributeError` for a name the module does not define and for other dunder
    names.
    """

    def __getattr__(name: str) -> Any:
        if name == "__all__":
            found = importlib.import_module(module, package)
            return [n for n, v in vars(found).items() if not n.startswith("_") and n != "annotations" and not isinstance(v, ModuleType)]
        if name.startswith("__"):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    return __getattr__


def install() -> None:
    """Put one :class:`OldPathFinder` first on ``sys.meta_path`` (again after a reload: never twice)."""
    if not any(type(f).__name__ == "OldPathFinder" and type(f).__module__ == __name__ for f in sys.meta_path):
        sys.meta_path.insert(0, OldPathFinder())
