"""``fp4patch new``: scaffold a spec for a function of an installed distribution.

Finds the module's file among the distribution's files (RECORD), finds the function in it with
libcst, and writes ``<specs-dir>/<distribution>/<id>.toml`` with a target for the installed
version, an ``insert-at-function-start`` operation anchored on the function's parameters, and a
before/after case made from the real function — so the new spec loads, its case passes in the
test suite, and adding the next patch is this command plus editing ``code``.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from ..catalog.spec import ID_PATTERN
from ..codemods import InsertAtFunctionStart
from ..codemods.base import find_functions
from ..engine.advice import Advice
from ..errors import FileSystemError, UsageError
from ..target.environment import InstalledDistribution

PLACEHOLDER = "# TODO(fp4patch): replace with the statements to insert\npass\n"


def module_file(dist: InstalledDistribution, module: str) -> str:
    """The site-packages-relative file of dotted ``module`` (``flashinfer.fp4_quantization``).

    Raises:
        UsageError: the distribution has no such module file.
    """
    base = module.replace(".", "/")
    for candidate in (f"{base}.py", f"{base}/__init__.py"):
        if dist.locate(candidate).is_file():
            return candidate
    raise UsageError(f"{dist.name} {dist.version} has no module {module!r} (looked for {base}.py); check --function MODULE:FUNCTION")


def _imported_from(tree: cst.Module, name: str, module: str, is_package: bool) -> str:
    """The absolute module a top-level ``from X import name`` in ``module`` takes ``name`` from
    (``""`` when there is none). ``is_package``: ``module`` is a package's ``__init__.py``, so a
    relative import counts from ``module`` itself (``from .quantization.fp4_quantization import``
    in ``flashinfer/__init__.py`` is ``flashinfer.quantization.fp4_quantization``), not from its parent."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    for statement in tree.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
                continue
            if any((a.asname.name.value if a.asname else a.name.value) == name for a in small.names if isinstance(a.name, cst.Name)):
                dots = len(small.relative)
                base = package[: len(package) - (dots - 1)] if dots else []
                tail = cst.Module(body=[]).code_for_node(small.module) if small.module else ""
                return ".".join([*base, tail] if tail else base)
    return ""


def defining_module(dist: InstalledDistribution, module: str, function: str, hops: int = 5) -> str:
    """The module that defines ``function`` (a top-level name, or ``Class`` of ``Class.method``),
    following re-exports (``from .x import name``) from ``module`` at most ``hops`` times; ``""``
    when the chain ends elsewhere (a name not found, a module outside the distribution).

    Example (flashinfer-python 0.7.4): ``flashinfer`` and the shim ``flashinfer.fp4_quantization``
    re-export ``fp4_quantize`` from ``flashinfer.quantization.fp4_quantization``, which defines it.
    """
    name = function.split(".")[0]
    for _ in range(hops):
        try:
            relative = module_file(dist, module)
            tree = cst.parse_module(dist.locate(relative).read_bytes())
        except (UsageError, OSError, cst.ParserSyntaxError):
            return ""
        if find_functions(tree, function):
            return module
        module = _imported_from(tree, name, module, relative.endswith("__init__.py"))
        if not module:
            return ""
    return ""


def _toml_string(text: str) -> str:
    """``text`` as a TOML multi-line literal string (falls back to a basic string if it holds ''')."""
    if "'''" not in text:
        return "'''\n" + text + "'''"
    escaped = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return '"""\n' + escaped + '"""'


def scaffold(
    dist: InstalledDistribution, spec_id: str, target: str, summary: str, specs_dir: Path, force: bool = False, advice: Advice = Advice(),
) -> Path:
    """Write a new spec ``spec_id`` for ``target`` (``package.module:function`` or ``...:Class.method``); ``advice``
    words the commands a refusal asks for (the ``--python``/``--site-packages`` the command was given).

    Returns the path written.

    Raises:
        UsageError: a bad id or target, a function not found, or an existing spec file (without ``force``).
        FileSystemError: the spec file cannot be written.
    """
    if not ID_PATTERN.match(spec_id):
        raise UsageError(f"spec id {spec_id!r} must be kebab-case (a-z, 0-9, -)")
    module, sep, function = target.partition(":")
    if not sep or not module or not function:
        raise UsageError(f"--function {target!r}: expected MODULE:FUNCTION, e.g. flashinfer.quantization.fp4_quantization:fp4_quantize")
    try:
        relative = module_file(dist, module)
    except UsageError as exc:
        # the module moved between releases (flashinfer.fp4_quantization → flashinfer.quantization.fp4_quantization
        # at 0.6.7): follow the package's own re-exports to where this release defines the function
        found = defining_module(dist, module.split(".")[0], function)
        if not found:
            raise
        base = module.replace(".", "/")
        raise UsageError(
            f"{dist.name} {dist.version} has no module {module!r} (looked for {base}.py); {function} is defined in {found} "
            f"in this release: pass --function {found}:{function}"
        ) from exc
    from ..engine.manifest import ManifestStore

    manifest = ManifestStore(dist.site_packages, dist.name).load()
    if manifest and relative in manifest.files:
        raise UsageError(
            f"{dist.locate(relative)}: patched by fp4patch ({', '.join(manifest.files[relative].specs)}); "
            f"run `{advice.command('revert')}` first so the case shows the upstream function"
        )
    source = dist.locate(relative).read_bytes()
    tree = cst.parse_module(source)
    found = find_functions(tree, function)
    if not found:
        imported = _imported_from(tree, function.split(".")[0], module, relative.endswith("__init__.py"))
        origin = imported and defining_module(dist, imported, function)
        if origin:
            hint = f"it is imported from {origin}; pass --function {origin}:{function}"
        elif imported:
            hint = f"it is imported from {imported}, which does not define it either; give the module that defines it"
        else:
            hint = "give Class.method for a method"
        raise UsageError(f"{dist.locate(relative)}: no function {function!r} defined here; {hint}")
    definition = found[-1]
    signature = definition.params
    params = [p.name.value for p in (*signature.posonly_params, *signature.params, *signature.kwonly_params)]
    op = InsertAtFunctionStart(function=function, code=PLACEHOLDER, anchor_params=tuple(params))
    before = cst.Module(body=[definition.with_changes(leading_lines=())]).code
    if "." in function:  # a method: keep its class around it so the dotted path resolves
        cls = function.split(".")[0]
        before = f"class {cls}:\n" + "".join("    " + line if line.strip() else line for line in before.splitlines(True))
    after = op.apply(cst.parse_module(before)).code
    path = specs_dir / dist.name / f"{spec_id}.toml"
    if path.exists() and not force:
        raise UsageError(f"{path}: spec exists; choose another id or pass --force")
    params_toml = ", ".join(f'"{p}"' for p in params)
    text = f'''id = "{spec_id}"
summary = "{summary.replace('"', "'")}"
rationale = """
TODO: why this patch exists, with the upstream issue or PR.
"""
distribution = "{dist.name}"
default = false
conflicts = []
requires = []

# Scaffolded by `fp4patch new` from {dist.name} {dist.version}, {relative}.
[[target]]
versions = "=={dist.version}"
file = "{relative}"

  [[target.operation]]
  kind = "insert-at-function-start"
  function = "{function}"
  anchor-params = [{params_toml}]
  code = {_toml_string(PLACEHOLDER)}

[[case]]
name = "{function} as in {dist.name} {dist.version}"
version = "{dist.version}"
before = {_toml_string(before)}
after = {_toml_string(after)}
'''
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise FileSystemError(f"{path}: cannot write the new spec ({exc.strerror}); pass a writable --specs-dir") from None
    return path


def add_target(spec, resolution, dist, listed: bool, reader, directory: Path) -> Path:
    """``fp4patch new SPEC_ID --add-target``: start a target of ``spec`` for the installed release
    from the difference :mod:`fp4patch.catalog.evidence` found (a changed signature, code that differs).

    ``resolution``: the spec's :class:`fp4patch.catalog.evidence.Resolution` on the installed release; ``dist``: the
    :class:`fp4patch.target.environment.InstalledDistribution`; ``listed``: whether the catalog lists its version;
    ``reader``: a :class:`fp4patch.catalog.fingerprint.ModuleReader` of the installed files as released.

    Copies the spec file (with its op sources, helpers and case grids when it is a built-in one) to
    ``<directory>/<distribution>/`` unless it is there already, and inserts, before its first
    ``[[case]]``, a copy of the target the nearest verified release takes, with ``versions`` set to
    ``==<installed version>``, ``params`` set to the installed wrapper's parameters, and comments
    naming what changed and what to check. The new target has no evidence, so the spec takes it by
    its specifier; ``fp4patch diff``/``verify --trace`` with ``--specs-dir`` then show it.

    Raises:
        UsageError: the spec takes no patching target on this release, or already one for exactly
            this version, or the release is one the catalog lists (its target is known).
        FileSystemError: the file cannot be written.
    """
    import re
    import shutil

    from ..catalog.evidence import edited_function, installed_signature

    version = str(dist.version)
    if listed:
        raise UsageError(f"{spec.id}: {dist.name} {version} is a release fp4patch knows; its target is {spec.path}'s own — edit that")
    patching = [t for t in resolution.targets if not t.status]
    if not patching:
        raise UsageError(f"{spec.id}: no patching target to start from on {version} ({resolution.basis.describe() if resolution.basis else 'none'})")
    destination = directory / spec.distribution / spec.path.name
    if destination.resolve() != spec.path.resolve():
        if destination.exists():
            raise UsageError(f"{destination}: exists; pass --specs-dir {directory} to add the target to that copy, or remove it")
        destination.parent.mkdir(parents=True, exist_ok=True)
        for sub in ("ops", "grids"):
            if (spec.path.parent / sub).is_dir() and not (destination.parent / sub).exists():
                shutil.copytree(spec.path.parent / sub, destination.parent / sub)
        catalog = spec.path.parent / "catalog.json"
        if catalog.is_file() and not (destination.parent / "catalog.json").exists():
            shutil.copy2(catalog, destination.parent / "catalog.json")
        shutil.copy2(spec.path, destination)
    lines = destination.read_text(encoding="utf-8").splitlines(keepends=True)
    if any(line.strip() == f'versions = "=={version}"' for line in lines):
        raise UsageError(f"{destination}: already has a target for =={version}")
    target = patching[0]
    start = target.line - 1
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"^\[\[(target|case|obsolete-when)\]\]", lines[i])), len(lines))
    block = lines[start:end]
    params = [row[0] for row in installed_signature(reader, target)]
    basis = resolution.basis
    notes = [
        f"# started by `fp4patch new {spec.id} --add-target` on {dist.name} {version} from the target of {basis.release if basis else '?'}\n",
        *(f"# changed: {c}\n" for c in (basis.changes if basis else ())),
        *(f"# changed: {(edited_function(target) or ('', '?'))[1]}(): parameter {name!r} added (default {default}; carried at it)\n"
          for name, default in (basis.carried if basis else ())),
        *([f"# moved: from {basis.moved[0]} to {basis.moved[1]}\n"] if basis and basis.moved else []),
        "# check: params and [target.operation.defaults] against the wrapper, the fake against its allocation (mirrors),\n",
        "# then `fp4patch diff --specs-dir DIR` and `fp4patch verify --trace --specs-dir DIR` after apply\n",
    ]
    out = []
    for line in block:
        if line.startswith("versions ="):
            line = f'versions = "=={version}"\n'
        elif line.startswith("file =") and basis is not None and basis.moved:
            line = f'file = "{target.file}"\n'  # where the function lives now (the target taken, moved there)
        elif line.strip().startswith("params =") and params and edited_function(target):
            line = re.sub(r"params = \[.*\]", "params = [" + ", ".join(f'"{p}"' for p in params) + "]", line)
        out.append(line)
    first_case = next((i for i, line in enumerate(lines) if line.startswith("[[case]]")), len(lines))
    new = [*lines[:first_case], *notes, *out, *([] if out[-1].strip() == "" else ["\n"]), *lines[first_case:]]
    try:
        destination.write_text("".join(new), encoding="utf-8")
    except OSError as exc:
        raise FileSystemError(f"{destination}: cannot write ({exc.strerror}); pass --specs-dir to a writable folder") from None
    return destination
