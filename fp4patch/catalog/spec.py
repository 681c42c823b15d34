"""Load and validate the declarative patch specs (``patches/<distribution>/<id>.toml``).

The format is documented in ``docs/spec-format.md``. Every problem is reported as a
:class:`~fp4patch.errors.SpecError` whose message starts with ``path:line:``.
"""

from __future__ import annotations

import ast
import re
import textwrap
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import SpecError
from ..locations import builtin_specs_dir

SPEC_KEYS = {"id", "summary", "rationale", "distribution", "default", "conflicts", "requires", "target", "case", "obsolete-when"}
TARGET_KEYS = {"versions", "file", "operation", "status", "reason"}
CASE_KEYS = {"name", "version", "before", "after", "expect"}
OBSOLETE_KEYS = {"versions", "file", "function", "calls", "reason"}
OPERATION_COMMON = {"kind", "function", "anchor-calls", "anchor-params", "code", "code-file", "mirrors"}
OPERATION_FIELDS = {
    "add-decorator": {"decorator", "position"},
    "insert-at-function-start": set(),
    "replace-function-body": set(),
    "append-to-module": {"position"},
    "rewrite-call-arguments": {"call", "from", "to"},
    "custom-op": {"op-source", "params", "defaults", "release", "callers"},
}
NEEDS_FUNCTION = {"add-decorator", "insert-at-function-start", "replace-function-body", "custom-op"}
NEEDS_CODE = {"insert-at-function-start", "replace-function-body", "append-to-module"}
POSITIONS = {"add-decorator": {"outermost", "innermost"}, "append-to-module": {"end", "after-imports"}}
TARGET_STATUSES = {"not-needed", "unsupported"}
ID_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
#: A ``mirrors`` entry: ``qualname`` in the target's file, ``path.py:qualname``, or C++ launcher code
#: ``path.cu:Class.method[names]`` (see :mod:`fp4patch.catalog.fingerprint`, :mod:`fp4patch.catalog.native`).
MIRROR_PATTERN = re.compile(
    r"^(([A-Za-z0-9_./-]+\.py:)?[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(\[\w+(,\w+)*\])?"
    r"|[A-Za-z0-9_./-]+\.(cu|cuh|cpp|cc|h|hpp):[A-Za-z_]\w*(\.[A-Za-z_]\w*)?(\[\w+(,\w+)*\])?)$"
)


@dataclass
class Target:
    """One ``[[target]]`` of a spec: a version specifier and what to do for those versions.

    Attributes:
        versions: PEP 440 specifier; pre- and post-releases match (``0.6.11.post3``). It places the
            releases of the catalog (``catalog.json``); a release the catalog does not list takes
            the target whose recorded evidence matches its code (:mod:`fp4patch.catalog.evidence`).
        file: path relative to site-packages ("" for a ``status`` target).
        operation_specs: ``(kind, fields)`` of each ``[[target.operation]]``; ``fields["mirrors"]``
            names the code the operation depends on beyond the function it edits.
        operations: applied in order to ``file``.
        status: "" for a patching target, else ``not-needed`` or ``unsupported``.
        reason: why, for a ``status`` target.
    """

    versions: SpecifierSet
    file: str = ""
    operation_specs: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status: str = ""
    reason: str = ""
    line: int = 0
    _operations: list | None = field(default=None, repr=False, compare=False)

    @property
    def operations(self) -> list:
        """The :class:`~fp4patch.codemods.Operation` objects, built on first use.

        Built lazily so that loading specs (``status``) never imports
        libcst; the fields were validated when the spec was loaded.
        """
        if self._operations is None:
            from ..codemods import OPERATIONS

            operations = []
            for kind, kwargs in self.operation_specs:
                if kind == "custom-op":
                    operations.extend(_custom_op_operations(kwargs))
                else:
                    operations.append(OPERATIONS[kind](**{k: v for k, v in kwargs.items() if k != "mirrors"}))
            self._operations = operations
        return self._operations

    @property
    def custom_ops(self) -> list:
        """The :class:`~fp4patch.ops.source.Rendered` op of each ``custom-op`` operation, in order."""
        from ..ops.cache import render_cached

        return [render_cached(kwargs["target"]) for kind, kwargs in self.operation_specs if kind == "custom-op"]

    def contains(self, version: Version | str) -> bool:
        """True when ``version`` falls inside this target's specifier.

        PEP 440 with pre-releases admitted, plus one rule users expect from adjacent ranges
        ``<X`` / ``>=X``: a pre- or dev-release of X (``0.6.11rc1``) carries X's code, so it is
        matched as X when the specifier does not place it by itself.
        """
        version = Version(str(version))
        if self.versions.contains(version, prereleases=True):
            return True
        if version.is_prerelease and not any(Version(s.version.rstrip(".*")).is_prerelease for s in self.versions if s.version[0].isdigit()):
            return self.versions.contains(Version(version.base_version), prereleases=True)
        return False


def _custom_op_operations(kwargs: dict[str, Any]) -> list:
    """A ``custom-op`` as the two operations it renders to: the redirect and the op block."""
    from ..codemods import AppendToModule, InsertAtFunctionStart
    from ..ops.cache import render_cached

    rendered = render_cached(kwargs["target"])
    return [
        InsertAtFunctionStart(
            function=kwargs["function"],
            anchor_calls=kwargs["anchor_calls"],
            anchor_params=kwargs["anchor_params"],
            exact_params=True,
            code=rendered.redirect,
            line=kwargs["line"],
        ),
        AppendToModule(code=rendered.block, position="end", line=kwargs["line"], index=rendered.block_index),
    ]


@dataclass
class ObsoleteWhen:
    """How to recognise that upstream fixed the problem itself (``[[obsolete-when]]``).

    The spec is obsolete for a release when ``function`` in ``file`` calls every name in
    ``calls`` (qualified names, e.g. ``torch.ops.flashinfer.fp4_quantize``), for versions in
    ``versions`` (all when empty).
    """

    file: str
    function: str
    calls: tuple[str, ...]
    reason: str
    versions: SpecifierSet = field(default_factory=SpecifierSet)
    line: int = 0


@dataclass
class Case:
    """A before/after example kept with a spec, run by the test suite (Fixit-style)."""

    name: str
    version: str
    before: str
    after: str = ""
    expect: str = "applied"
    line: int = 0


@dataclass
class Spec:
    """A declarative patch for one distribution, loaded from ``path``."""

    id: str
    summary: str
    rationale: str
    distribution: str
    default: bool
    conflicts: list[str]
    requires: list[str]
    targets: list[Target]
    cases: list[Case]
    path: Path
    obsolete_when: list[ObsoleteWhen] = field(default_factory=list)

    def targets_for(self, version: Version | str) -> list[Target]:
        """The targets whose specifier contains ``version`` (patching and status targets)."""
        return [t for t in self.targets if t.contains(version)]


class _Lines:
    """Find line numbers in a spec file for error messages (tomllib keeps none)."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self._headers: dict[str, list[int]] = {}

    def header(self, name: str, index: int) -> int:
        """Line of the ``index``-th ``[[name]]`` header (1-based; 1 when not found)."""
        if name not in self._headers:  # one scan per name: a spec asks for each of its targets, operations and cases
            pattern = re.compile(r"^\s*\[\[\s*" + re.escape(name) + r"\s*\]\]")
            self._headers[name] = [number for number, line in enumerate(self.lines, 1) if pattern.match(line)]
        found = self._headers[name]
        return found[index] if 0 <= index < len(found) else 1

    def key(self, key: str, start: int = 1) -> int:
        """Line of the first ``key =`` at or after line ``start`` (``start`` when not found)."""
        pattern = re.compile(r"^\s*" + re.escape(key) + r"\s*=")
        for number in range(start, len(self.lines) + 1):
            if pattern.match(self.lines[number - 1]):
                return number
        return start


def load_specs(directory: Path | None = None) -> list[Spec]:
    """Load every ``*.toml`` under ``directory`` (default: :func:`builtin_specs_dir`).

    Returns the specs sorted by id.

    Raises:
        SpecError: a spec is malformed, two specs share an id, or a ``conflicts``/``requires``
            entry names no spec.
    """
    directory = directory or builtin_specs_dir()
    if not directory.is_dir():
        raise SpecError(f"{directory}: spec directory not found; pass --specs-dir DIR")
    specs = [load_spec(path) for path in sorted(directory.rglob("*.toml"))]
    if not specs:
        raise SpecError(f"{directory}: no *.toml spec files here; pass --specs-dir DIR with specs (patches/<distribution>/<id>.toml)")
    by_id: dict[str, Spec] = {}
    for spec in specs:
        if spec.id in by_id:
            line = _Lines(spec.path.read_text(encoding="utf-8")).key("id")
            raise SpecError(f"{spec.path}:{line}: duplicate spec id {spec.id!r} (also in {by_id[spec.id].path})")
        by_id[spec.id] = spec
    for spec in specs:
        lines = _Lines(spec.path.read_text(encoding="utf-8"))
        for key in ("conflicts", "requires"):
            for other in getattr(spec, key):
                if other not in by_id:
                    raise SpecError(f"{spec.path}:{lines.key(key)}: {key} names unknown spec {other!r}")
    return sorted(specs, key=lambda s: s.id)


def load_spec(path: Path) -> Spec:
    """Load and validate one spec file.

    Raises:
        SpecError: with ``path:line: message`` for invalid TOML, unknown or missing keys, a bad
            specifier, an unknown operation kind, or code that does not parse.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}:1: cannot read spec: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"line (\d+)", str(exc))
        raise SpecError(f"{path}:{found.group(1) if found else 1}: invalid TOML: {exc}") from None
    return _SpecBuilder(path, text, data).build()


class _SpecBuilder:
    def __init__(self, path: Path, text: str, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data
        self.lines = _Lines(text)

    def fail(self, line: int, message: str) -> SpecError:
        return SpecError(f"{self.path}:{line}: {message}")

    def _string(self, table: dict[str, Any], key: str, line: int, required: bool = True) -> str:
        value = table.get(key, None)
        if value is None:
            if required:
                raise self.fail(line, f"missing required key {key!r}")
            return ""
        if not isinstance(value, str):
            raise self.fail(self.lines.key(key, line), f"{key!r} must be a string")
        return value

    def _unknown(self, table: dict[str, Any], allowed: set[str], line: int, where: str) -> None:
        for key in table:
            if key not in allowed:
                raise self.fail(self.lines.key(key, line), f"unknown key {key!r} in {where}; allowed: {', '.join(sorted(allowed))}")

    def build(self) -> Spec:
        data = self.data
        self._unknown(data, SPEC_KEYS, 1, "spec")
        spec_id = self._string(data, "id", 1)
        if not ID_PATTERN.match(spec_id):
            raise self.fail(self.lines.key("id"), f"id {spec_id!r} must be kebab-case (a-z, 0-9, -)")
        if self.path.stem != spec_id:
            raise self.fail(self.lines.key("id"), f"id {spec_id!r} must equal the file name {self.path.stem!r}")
        distribution = canonicalize_name(self._string(data, "distribution", 1))
        default = data.get("default", False)
        if not isinstance(default, bool):
            raise self.fail(self.lines.key("default"), "'default' must be true or false")
        lists = {}
        for key in ("conflicts", "requires"):
            value = data.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise self.fail(self.lines.key(key), f"{key!r} must be a list of spec ids")
            lists[key] = value
        raw_targets = data.get("target")
        if not isinstance(raw_targets, list) or not raw_targets:
            raise self.fail(1, "a spec needs at least one [[target]] table")
        targets = [self.target(i, t) for i, t in enumerate(raw_targets)]
        raw_cases = data.get("case", [])
        if not isinstance(raw_cases, list):
            raise self.fail(self.lines.key("case"), "'case' must be an array of tables ([[case]])")
        cases = [self.case(i, c) for i, c in enumerate(raw_cases)]
        raw_obsolete = data.get("obsolete-when", [])
        if not isinstance(raw_obsolete, list):
            raise self.fail(self.lines.key("obsolete-when"), "'obsolete-when' must be an array of tables ([[obsolete-when]])")
        obsolete = [self.obsolete(i, o) for i, o in enumerate(raw_obsolete)]
        return Spec(
            id=spec_id,
            summary=self._string(data, "summary", 1),
            rationale=self._string(data, "rationale", 1),
            distribution=distribution,
            default=default,
            conflicts=lists["conflicts"],
            requires=lists["requires"],
            targets=targets,
            cases=cases,
            path=self.path,
            obsolete_when=obsolete,
        )

    def obsolete(self, index: int, table: Any) -> ObsoleteWhen:
        line = self.lines.header("obsolete-when", index)
        if not isinstance(table, dict):
            raise self.fail(line, "each obsolete-when must be a table ([[obsolete-when]])")
        self._unknown(table, OBSOLETE_KEYS, line, "[[obsolete-when]]")
        calls = table.get("calls", [])
        if not isinstance(calls, list) or not calls or not all(isinstance(c, str) for c in calls):
            raise self.fail(self.lines.key("calls", line), "'calls' must be a non-empty list of qualified names")
        text = self._string(table, "versions", line, required=False)
        try:
            versions = SpecifierSet(text)
        except InvalidSpecifier:
            raise self.fail(self.lines.key("versions", line), f"invalid PEP 440 specifier {text!r}") from None
        return ObsoleteWhen(
            self._string(table, "file", line),
            self._string(table, "function", line),
            tuple(calls),
            self._string(table, "reason", line),
            versions,
            line,
        )

    def target(self, index: int, table: Any) -> Target:
        line = self.lines.header("target", index)
        if not isinstance(table, dict):
            raise self.fail(line, "each target must be a table ([[target]])")
        self._unknown(table, TARGET_KEYS, line, "[[target]]")
        versions_text = self._string(table, "versions", line)
        try:
            versions = SpecifierSet(versions_text)
        except InvalidSpecifier:
            raise self.fail(self.lines.key("versions", line), f"invalid PEP 440 specifier {versions_text!r}") from None
        status = self._string(table, "status", line, required=False)
        if status:
            if status not in TARGET_STATUSES:
                raise self.fail(self.lines.key("status", line), f"status must be one of {', '.join(sorted(TARGET_STATUSES))}")
            if "file" in table or "operation" in table:
                raise self.fail(line, f"a target with status {status!r} has no file or operations")
            return Target(versions, status=status, reason=self._string(table, "reason", line), line=line)
        file = self._string(table, "file", line)
        if file.startswith("/") or ".." in Path(file).parts or not file.endswith(".py"):
            raise self.fail(self.lines.key("file", line), f"file {file!r} must be a relative path to a .py file inside site-packages")
        raw_ops = table.get("operation")
        if not isinstance(raw_ops, list) or not raw_ops:
            raise self.fail(line, "a target needs at least one [[target.operation]] table")
        first_op = sum(len(t.get("operation", [])) for t in self.data["target"][:index] if isinstance(t, dict))
        self._target_versions = versions_text
        operations = [self.operation(first_op + j, op) for j, op in enumerate(raw_ops)]
        return Target(versions, file=file, operation_specs=operations, line=line)

    def operation(self, index: int, table: Any) -> tuple[str, dict[str, Any]]:
        line = self.lines.header("target.operation", index)
        if not isinstance(table, dict):
            raise self.fail(line, "each operation must be a table ([[target.operation]])")
        kind = self._string(table, "kind", line)
        if kind not in OPERATION_FIELDS:
            raise self.fail(self.lines.key("kind", line), f"unknown operation kind {kind!r}; known: {', '.join(sorted(OPERATION_FIELDS))}")
        self._unknown(table, OPERATION_COMMON | OPERATION_FIELDS[kind], line, f"{kind} operation")
        kwargs: dict[str, Any] = {"line": line}
        function = self._string(table, "function", line, required=kind in NEEDS_FUNCTION)
        kwargs["function"] = function
        for key in ("anchor-calls", "anchor-params"):
            value = table.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise self.fail(self.lines.key(key, line), f"{key!r} must be a list of strings")
            if value and not function:
                raise self.fail(self.lines.key(key, line), f"{key!r} needs 'function'")
            kwargs[key.replace("-", "_")] = tuple(value)
        mirrors = table.get("mirrors", [])
        if not isinstance(mirrors, list) or not all(isinstance(v, str) and MIRROR_PATTERN.match(v) for v in mirrors):
            raise self.fail(
                self.lines.key("mirrors", line),
                "'mirrors' must be a list of names of the code the operation depends on: \"qualname\" in the target's file "
                "or \"path/to/file.py:qualname\" (e.g. \"get_fp4_quantization_module.fp4_quantize_sm100\", \"flashinfer/utils.py:round_up\"), "
                "or C++ launcher code \"path/to/file.cu:Class.method[name,...]\"",
            )
        if mirrors and not function:
            raise self.fail(self.lines.key("mirrors", line), "'mirrors' needs 'function'")
        kwargs["mirrors"] = tuple(mirrors)
        if kind == "custom-op":
            return kind, self.custom_op(table, line, kwargs)
        if kind in NEEDS_CODE:
            kwargs["code"] = self.code(table, line)
        elif "code" in table or "code-file" in table:
            raise self.fail(line, f"{kind} takes no code")
        if kind in POSITIONS:
            position = table.get("position", sorted(POSITIONS[kind])[-1] if kind == "add-decorator" else "end")
            if position not in POSITIONS[kind]:
                raise self.fail(self.lines.key("position", line), f"position must be one of {', '.join(sorted(POSITIONS[kind]))}")
            kwargs["position"] = position
        if kind == "add-decorator":
            kwargs["decorator"] = self.expression(table, "decorator", line)
        if kind == "rewrite-call-arguments":
            kwargs["call"] = self._string(table, "call", line)
            kwargs["from_"] = self.arguments(table, "from", line)
            kwargs["to"] = self.arguments(table, "to", line)
        return kind, kwargs

    def code(self, table: dict[str, Any], line: int) -> str:
        if ("code" in table) == ("code-file" in table):
            raise self.fail(line, "give exactly one of 'code' and 'code-file'")
        if "code" in table:
            code = self._string(table, "code", line)
            where = self.lines.key("code", line)
            raw = self.lines.lines[where - 1] if where <= len(self.lines.lines) else ""
            # `code = """` + newline: the first code line is the next one; else it is this line
            opens_block = re.search(r'=\s*("""|\'\'\')\s*$', raw) is not None
            label, offset = str(self.path), where if opens_block else where - 1
        else:
            rel = self._string(table, "code-file", line)
            file = (self.path.parent / rel).resolve()
            try:
                code = file.read_text(encoding="utf-8")
            except OSError as exc:
                raise self.fail(self.lines.key("code-file", line), f"cannot read code-file {rel!r}: {exc.strerror}") from None
            label, offset = str(file), 0
        dedented = textwrap.dedent(code)
        offset += len(dedented) - len(dedented.lstrip("\n"))  # blank lines _dedent strips
        try:
            ast.parse(_dedent(code), label)  # accepts `return` at top level: blocks go into functions
        except SyntaxError as exc:
            raise SpecError(f"{label}:{offset + (exc.lineno or 1)}: code does not parse: {exc.msg}") from None
        return code

    def custom_op(self, table: dict[str, Any], line: int, kwargs: dict[str, Any]) -> dict[str, Any]:
        from ..ops.render import CustomOpTarget, OpSourceError, check_op_source, read_helpers

        if kwargs["anchor_params"]:
            raise self.fail(self.lines.key("anchor-params", line), "a custom-op takes 'params' (the release's parameters), not 'anchor-params'")
        params = table.get("params")
        if not isinstance(params, list) or not params or not all(isinstance(p, str) for p in params):
            raise self.fail(self.lines.key("params", line), "'params' must be the non-empty list of the wrapper's parameter names")
        rel = self._string(table, "op-source", line)
        source_path = (self.path.parent / rel).resolve()
        try:
            source = source_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise self.fail(self.lines.key("op-source", line), f"cannot read op-source {rel!r}: {getattr(exc, 'strerror', None) or exc}") from None
        tables = {}
        for key in ("defaults", "release"):
            value = table.get(key, {})
            if not isinstance(value, dict):
                raise self.fail(self.lines.key(key, line), f"{key!r} must be a table ([target.operation.{key}])")
            tables[key] = value
        if not all(isinstance(v, str) for v in tables["defaults"].values()):
            raise self.fail(self.lines.key("defaults", line), "'defaults' values must be Python expressions as strings (e.g. backend = \"'auto'\")")
        callers = table.get("callers", [])
        if not isinstance(callers, list) or not all(isinstance(c, str) and c.isidentifier() for c in callers):
            raise self.fail(self.lines.key("callers", line), "'callers' must be a list of function names of the wrapper's module")
        try:
            helpers = read_helpers(source, source_path.parent)  # shared helper modules beside it (ast only)
        except OpSourceError as exc:
            raise SpecError(f"{source_path}: {exc} (custom-op at {self.path}:{line})") from None
        target = CustomOpTarget(
            function=kwargs["function"],
            source=source,
            source_label=f"ops/{source_path.name}" if source_path.parent.name == "ops" else rel,
            params=tuple(params),
            defaults=dict(tables["defaults"]),
            release=dict(tables["release"]),
            spec_id=str(self.data.get("id", "")),
            versions=self._target_versions,
            helpers=helpers,
            callers=tuple(callers),
        )
        try:
            check_op_source(target)
        except OpSourceError as exc:
            raise SpecError(f"{source_path}: {exc} (custom-op at {self.path}:{line})") from None
        kwargs["anchor_params"] = tuple(params)
        kwargs["target"] = target
        return kwargs

    def expression(self, table: dict[str, Any], key: str, line: int) -> str:
        text = self._string(table, key, line)
        try:
            ast.parse(text, mode="eval")
        except SyntaxError:
            raise self.fail(self.lines.key(key, line), f"{key} {text!r} is not a Python expression") from None
        return text

    def arguments(self, table: dict[str, Any], key: str, line: int) -> str:
        text = self._string(table, key, line)
        try:
            ast.parse(f"_({text})", mode="eval")
        except SyntaxError:
            raise self.fail(self.lines.key(key, line), f"{key} {text!r} is not an argument list") from None
        return text

    def case(self, index: int, table: Any) -> Case:
        line = self.lines.header("case", index)
        if not isinstance(table, dict):
            raise self.fail(line, "each case must be a table ([[case]])")
        self._unknown(table, CASE_KEYS, line, "[[case]]")
        version = self._string(table, "version", line)
        try:
            Version(version)
        except InvalidVersion:
            raise self.fail(self.lines.key("version", line), f"invalid version {version!r}") from None
        expect = self._string(table, "expect", line, required=False) or "applied"
        if expect not in ("applied", "drifted"):
            raise self.fail(self.lines.key("expect", line), "expect must be 'applied' or 'drifted'")
        after = self._string(table, "after", line, required=expect == "applied")
        return Case(self._string(table, "name", line), version, self._string(table, "before", line), after, expect, line)


def _dedent(code: str) -> str:
    return textwrap.dedent(code).strip("\n") + "\n"
