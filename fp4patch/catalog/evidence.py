"""Which target a spec takes on the installed release, and on what evidence.

A release the catalog lists (``catalog.json``: every release on the registry when fp4patch was
made) takes the targets whose version specifier contains it, as written in the spec. Any other
release — newer, a pre-, dev or post release, a local label such as ``0.7.4+cu130`` — is placed by
its code, in this order (:func:`resolve`):

1. **same code**: a target whose recorded evidence (the code ``make compat`` verified it on:
   :class:`fp4patch.catalog.Evidence`) equals the installed code piece for piece
   (:mod:`fp4patch.catalog.fingerprint`) is taken as it is: "as verified on 0.7.4, same code";
2. a target without any recorded evidence (a spec of your own, ``--specs-dir``) or a declaration
   (``not-needed``/``unsupported``) whose specifier contains the release: as the spec says;
3. otherwise the nearest release the catalog lists at or below it decides: its declaration
   holds ("as declared for 0.5.3"); its patching target is taken only if the edited function's
   signature equals the one it was verified with (else ``drifted``, naming each parameter added,
   removed or renamed) — and then the code that differs must be checked before it is applied
   (``needs-check``: the fake against the wrapper's own allocation on CPU and the fullgraph trace,
   :mod:`fp4patch.checks.cpu_check`), after which it is "checked on CPU for 0.7.5". Two changes of the
   signature or the place are carried rather than refused:

   * **a parameter added with a default** (:func:`carriable`): the nearest target is *carried*
     (:func:`carried_target`): its redirect also takes the new parameter, and refuses under compile
     any value but the wrapper's default with fp4patch's own first line (eager calls never see it);
     the op, its fake and its check are the verified release's, at that default: "carried with
     ``sf_round_up`` new in 0.7.5, checked at its default";
   * **a function moved to another file** (:func:`moved_target`): the target is applied at the file
     that defines the function now, its pieces read there ("moved from ... to ..."), as the same
     code when they equal the evidence, else checked on CPU.

A fingerprint covers FlashInfer's Python only, never its C++ kernels: a target taken on evidence
says so and points at ``fp4patch verify --opcheck`` on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from packaging.version import Version

from .fingerprint import ModuleReader, fingerprint, signature, signature_changes, split_piece

if TYPE_CHECKING:
    from .catalog_file import Catalog, Evidence
    from .spec import Spec, Target

#: The kinds of :class:`Basis`.
LISTED = "listed"  # a catalog release: the spec's specifiers place it
SAME_CODE = "same-code"  # unlisted; the code equals a verified release's
BY_SPECIFIER = "by-specifier"  # unlisted; a target without evidence, or a declaration, whose specifier contains it
DECLARED = "declared"  # unlisted; the nearest listed release's declaration (not-needed / unsupported)
NEEDS_CHECK = "needs-check"  # unlisted; the nearest release's target, code differs, signature equal: check before applying
CHECKED = "checked"  # a needs-check target whose CPU check passed
CHANGED = "changed"  # unlisted; the code differs in a way no check can accept (a signature change, a failed check)
NO_TARGET = "no-target"  # nothing places it

#: Bases on which the installed code was not read by ``make compat``: the C++ kernels are not compared.
INHERITED = frozenset({SAME_CODE, CHECKED, NEEDS_CHECK})

OPCHECK_NOTE = "the C++ kernels are not fingerprinted: run `fp4patch verify --opcheck` on a GPU"


@dataclass(frozen=True)
class Basis:
    """Why a spec's targets apply to the installed release.

    Attributes:
        kind: one of the module constants (``listed``, ``same-code``, ``needs-check``...).
        version: the installed version.
        release: the catalog release it rests on (the verified release with the same code, the
            nearest listed release) as a string; "" for ``listed`` and ``by-specifier``.
        changes: for ``needs-check``/``checked``/``changed``, what differs from ``release``: piece
            names (``fp4_quantize``, ``get_fp4_quantization_module.fp4_quantize_sm100``) and
            signature changes (``fp4_quantize(): parameter 'x' added``), or the failed check.
        digest: the installed code's fingerprint digest (one per target, ``+``-joined) or "".
        target: the taken target's version specifier (``str(SpecifierSet)``), "" when none.
        carried: ``(name, default)`` of each parameter the installed wrapper added with a default
            since ``release`` (the default as its source text, ``"False"``): the target is carried
            (:func:`carried_target`), checked at those defaults only.
        moved: ``(file the target names, file that defines the function now)`` when upstream moved
            the edited function (:func:`moved_target`); ``()`` otherwise.
        launcher: the C++ pieces (``path.cu:Class.method``, :mod:`fp4patch.catalog.native`) whose equality with
            ``release``'s stood in for the outputs the CPU check cannot see (set by :mod:`fp4patch.checks.cpu_check`).
        unchecked: for ``needs-check``, why the CPU check could not run where ``apply`` ran it (no torch in
            that interpreter) and what to do; "" when it was not tried. The spec stays ``needs-check``.
    """

    kind: str
    version: str
    release: str = ""
    changes: tuple[str, ...] = ()
    digest: str = ""
    target: str = ""
    carried: tuple[tuple[str, str], ...] = ()
    moved: tuple[str, ...] = ()
    launcher: tuple[str, ...] = ()
    unchecked: str = ""

    @property
    def inherited(self) -> bool:
        """True when the targets were taken on evidence for a release the catalog does not list."""
        return self.kind in INHERITED

    def describe(self, spec_id: str = "") -> str:
        """One phrase for text output ("" for a listed release): "as verified on 0.7.4, same code"."""
        what = "; ".join(self.changes[:4]) + (f" (and {len(self.changes) - 4} more)" if len(self.changes) > 4 else "")
        extra = "".join(f"; {p}" for p in self.notes())
        if self.kind == SAME_CODE:
            return f"as verified on {self.release}, same code{extra}"
        if self.kind == CHECKED:
            head = f"{self.carried_phrase()}, checked at {'its default' if len(self.carried) == 1 else 'their defaults'}" if self.carried else f"checked on CPU for {self.version}"
            return f"{head} ({self.release}'s target; differs in {what}){extra}" if what else f"{head} ({self.release}'s target){extra}"
        if self.kind == NEEDS_CHECK:
            differs = f"differs from {self.release}, the nearest verified release, in {what}" if what else f"differs from {self.release}'s verified code"
            if self.carried:
                differs = f"{self.carried_phrase()}, to be checked at {'its default' if len(self.carried) == 1 else 'their defaults'}; {differs}"
            if self.unchecked:
                return f"{differs}{extra}; {self.unchecked}"
            return f"{differs}{extra}; `fp4patch apply` checks it on CPU before patching"
        if self.kind == CHANGED:
            return f"{what} (against {self.release}, the nearest verified release)" if self.release else what
        if self.kind == DECLARED:
            return f"as declared for {self.release}, the nearest release fp4patch knows"
        if self.kind == BY_SPECIFIER:
            return f"{self.version} is not a release fp4patch knows; taken by the spec's version specifier (no evidence recorded for this target)"
        return ""

    def carried_phrase(self) -> str:
        """``carried with `sf_round_up` new in 0.7.5`` ("" when nothing is carried)."""
        if not self.carried:
            return ""
        names = ", ".join(f"`{name}`" for name, _ in self.carried)
        return f"carried with {names} new in {self.version}"

    def notes(self) -> list[str]:
        """The phrases a carried target adds beyond its kind: where it moved, what the C++ launcher's evidence stood for."""
        notes = []
        if self.moved:
            notes.append(f"moved from {self.moved[0]} to {self.moved[1]}")
        if self.launcher:
            by_file: dict[str, list[str]] = {}
            for piece in self.launcher:
                file, qualname = split_piece(piece, "")
                by_file.setdefault(file, []).append(qualname.partition("[")[0])
            where = "; ".join(f"{file or 'the module'}: {', '.join(dict.fromkeys(names))}" for file, names in by_file.items())
            notes.append(f"the outputs the C++ launcher allocates as verified on {self.release} (the same allocation in {where})")
        return notes

    def to_json(self) -> dict:
        """As ``--json`` prints it (``basis`` of a spec report; see docs/json-schema.json)."""
        return {
            "kind": self.kind,
            "version": self.version,
            "release": self.release,
            "changes": list(self.changes),
            "target": self.target,
            "carried": [{"name": name, "default": default} for name, default in self.carried],
            "moved": list(self.moved),
            "launcher": list(self.launcher),
            "unchecked": self.unchecked,
            "description": self.describe(),
        }

    @classmethod
    def from_json(cls, data: dict) -> Basis:
        return cls(
            data["kind"], data.get("version", ""), data.get("release", ""), tuple(data.get("changes", ())), data.get("digest", ""), data.get("target", ""),
            tuple((c["name"], c["default"]) for c in data.get("carried", ())), tuple(data.get("moved", ())), tuple(data.get("launcher", ())),
            data.get("unchecked", ""),
        )

    def to_record(self) -> dict:
        """As the manifest keeps it (with the digest, which ``--json`` leaves out)."""
        return {**self.to_json(), "digest": self.digest}


@dataclass
class Resolution:
    """The targets a spec takes on the installed release, and why (:attr:`basis`)."""

    targets: list = field(default_factory=list)
    basis: Basis | None = None


def _evidence_of(catalog: Catalog, spec: Spec, target: Target) -> list[Evidence]:
    return [e for e in catalog.evidence.get(spec.id, []) if e.target == str(target.versions)]


def _nearest_release(entry: Evidence, version: Version) -> Version:
    """The release of ``entry`` nearest to ``version``: the newest at or below it, else the oldest."""
    below = [r for r in entry.releases if r <= version]
    return max(below) if below else entry.releases[0]


def _closest(entries: list[Evidence], version: Version) -> Evidence:
    """The entry verified on the newest release at or below ``version`` (else the one verified on the oldest above it)."""
    below = [e for e in entries if e.releases[0] <= version]
    if below:
        return max(below, key=lambda e: _nearest_release(e, version))
    return min(entries, key=lambda e: e.releases[0])


def edited_function(target: Target) -> tuple[str, str] | None:
    """``(file, function)`` whose signature a target's evidence records: its custom-op's wrapper,
    else the first function its operations edit; None when it edits none."""
    named = [(kind, kwargs["function"]) for kind, kwargs in target.operation_specs if kwargs.get("function")]
    if not named:
        return None
    custom = [f for kind, f in named if kind == "custom-op"]
    function = custom[0] if custom else named[0][1]
    return split_piece(function, target.file)


def installed_signature(reader: ModuleReader, target: Target) -> list[list[str]]:
    """The installed signature of the function :func:`edited_function` names ([] when none or missing)."""
    edited = edited_function(target)
    return signature(reader.function_node(*edited)) if edited else []


def resolve(spec: Spec, version: Version, catalog: Catalog, reader: ModuleReader, evidenced: set[str] | None = None) -> Resolution:
    """The targets of ``spec`` for the installed ``version`` and their :class:`Basis` (module docstring).

    ``reader`` reads the installed files as released (fp4patch's backup of a file it patched).
    ``evidenced``: the target specifiers that count as carrying evidence in step 2 (default: those
    with an entry in ``catalog``; ``make compat``'s replay of past releases passes every target the
    full catalog has evidence for, so that a target added for a later release is not taken by its
    specifier). Never raises for missing files or names: they are pieces that differ.
    """
    v = str(version)
    if catalog.lists(version):
        targets = spec.targets_for(version)
        return Resolution(targets, Basis(LISTED if targets else NO_TARGET, v, target=_label(targets)))
    patching = [t for t in spec.targets if not t.status]
    # 1. same code as a verified release (read where the function is defined now: upstream may have moved it)
    matches = []
    for target in patching:
        entries = _evidence_of(catalog, spec, target)
        if not entries:
            continue
        placed, moved = moved_target(reader, target, search=False)  # (the nearest target alone is searched for, below)
        pieces = fingerprint(reader, placed).pieces
        for entry in entries:
            if entry.code == pieces:
                matches.append((entry, placed, moved))
    if matches:
        entry = _closest([e for e, _, _ in matches], version)
        placed, moved = next((t, m) for e, t, m in matches if e is entry)
        release = str(_nearest_release(entry, version))
        return Resolution([placed], Basis(SAME_CODE, v, release, digest=fingerprint(reader, placed).digest, target=str(placed.versions), moved=moved))
    # 2. what the spec itself says for this version: declarations, targets without evidence
    if evidenced is None:
        evidenced = {e.target for e in catalog.evidence.get(spec.id, [])}
    contained = [t for t in spec.targets_for(version) if t.status or str(t.versions) not in evidenced]
    if contained:
        return Resolution(contained, Basis(BY_SPECIFIER, v, target=_label(contained)))
    # 3. the nearest listed release decides
    nearest = catalog.nearest(version)
    targets = spec.targets_for(nearest.version) if nearest else []
    if not targets:
        return Resolution([], Basis(NO_TARGET, v, str(nearest.version) if nearest else ""))
    if any(t.status for t in targets):
        return Resolution([t for t in targets if t.status], Basis(DECLARED, v, str(nearest.version), target=_label(targets)))
    changes: list[str] = []
    digests = []
    release = str(nearest.version)
    placed_targets: list[Target] = []
    carried: list[tuple[str, str]] = []
    moves: tuple[str, ...] = ()
    for target in targets:
        entries = _evidence_of(catalog, spec, target)
        placed, moved = moved_target(reader, target) if len(targets) == 1 else (target, ())
        installed = fingerprint(reader, placed)
        digests.append(installed.digest)
        if not entries:
            changes.append(f"{target.file}: no evidence recorded for this target")
            placed_targets.append(placed)
            continue
        entry = _closest(entries, version)
        release = str(_nearest_release(entry, version))
        changes += installed.changed(entry.code)
        moves = moves or moved
        edited = edited_function(placed)
        if edited:
            where, nodes = reader.locate(*edited)
            if nodes and where != edited[0]:  # defined in another file, and not found there by itself: ambiguous
                moved_note = f"{edited[1]}() is no longer defined in {edited[0]}: this release defines it in {where} (a new target is needed)"
                return Resolution(targets, Basis(CHANGED, v, release, (moved_note,), "+".join(digests), _label(targets)))
        if edited and entry.signature:
            now = installed_signature(reader, placed)
            verified = [list(row) for row in entry.signature]
            if not now:
                return Resolution(targets, Basis(CHANGED, v, release, (f"{edited[1]}() not found in {edited[0]}",), "+".join(digests), _label(targets)))
            differs = signature_changes(now, verified, edited[1])
            if differs:
                adds, refusals = carriable(now, verified, edited[1], placed)
                if refusals or len(targets) != 1:
                    return Resolution(targets, Basis(CHANGED, v, release, tuple(refusals or differs), "+".join(digests), _label(targets)))
                carried += adds
                placed = carried_target(placed, adds, v, release)
        placed_targets.append(placed)
    return Resolution(
        placed_targets,
        Basis(NEEDS_CHECK, v, release, tuple(dict.fromkeys(changes)), "+".join(digests), _label(targets), tuple(carried), moves),
    )


# ---------------------------------------------------------------------------- carried targets
def _default_comparable(code: str) -> bool:
    """True when a parameter's default (its source text) is a value the carried redirect can compare a
    caller's argument with while Dynamo traces: a literal (``False``, ``None``, ``16``, ``'auto'``, a tuple
    of those) or a dotted name (``SfLayout.layout_128x4``), evaluated in the wrapper's module."""
    import ast

    try:
        node = ast.parse(code, mode="eval").body
    except SyntaxError:
        return False
    try:
        ast.literal_eval(node)
        return True
    except ValueError:
        pass
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _same_default(a: str, b: str) -> bool:
    """Whether two defaults' source texts are the same value (literals by value, else the same expression)."""
    import ast

    try:
        return ast.literal_eval(a) == ast.literal_eval(b) and type(ast.literal_eval(a)) is type(ast.literal_eval(b))
    except (ValueError, SyntaxError):
        try:
            return ast.dump(ast.parse(a, mode="eval")) == ast.dump(ast.parse(b, mode="eval"))
        except SyntaxError:
            return False


def carriable(installed: list[list[str]], verified: list[list[str]], function: str, target: Target) -> tuple[list[tuple[str, str]], list[str]]:
    """Whether a wrapper whose parameters changed from ``verified`` to ``installed`` (rows of
    :func:`fp4patch.catalog.fingerprint.signature`) can keep ``target`` (a spec :class:`~fp4patch.catalog.spec.Target`):
    ``(carried, refusals)``.

    It can when the only change is parameters added, each with a default the redirect can compare with
    (:func:`_default_comparable`), to a ``custom-op`` whose wrapper is ``function``: ``carried`` lists them
    as ``(name, default source text)``, ``refusals`` is empty. Otherwise ``refusals`` names every change that
    stops it (the phrases of :func:`fp4patch.catalog.fingerprint.signature_changes`, with the reason for an added
    parameter that cannot be carried): a parameter removed, renamed, reordered, of another kind or with
    another default; one added without a default, as ``*args``/``**kwargs``, with a default that is not a
    constant, or that the op source knows with another default (the fake binds it to that one on releases
    without it) or models release by release (a key of its ``RELEASE`` named for it: ``output_check`` for
    ``output``, ``backends`` for ``backend``); or a target that is not a ``custom-op`` of ``function``. Never raises.
    """
    from .fingerprint import signature_changes

    changes = signature_changes(installed, verified, function)
    old = {row[0] for row in verified}
    added = [row for row in installed if row[0] not in old]
    others = [c for c in changes if not any(c == f"{function}(): parameter {row[0]!r} added" for row in added)]
    ops = [kwargs["target"] for kind, kwargs in target.operation_specs if kind == "custom-op" and kwargs["function"] == function]
    if not ops:
        return [], changes
    op = ops[0]
    if others:
        return [], changes
    from ..ops.render import release_data, source_defaults

    known = source_defaults(op)
    modelled = sorted(release_data(op))
    carried, refusals = [], []
    for name, kind, default in added:
        phrase = f"{function}(): parameter {name!r} added"
        keys = [k for k in modelled if k == name or k.startswith(name)]
        if kind in ("*args", "**kwargs"):
            refusals.append(f"{phrase} as {kind}, which fp4patch cannot carry")
        elif not default:
            refusals.append(f"{phrase} without a default (a call must pass it, and {op.spec_id or 'the spec'}'s op does not take it)")
        elif not _default_comparable(default):
            refusals.append(f"{phrase} with the default {default}, which fp4patch cannot compare a call's argument with")
        elif name in known and not _same_default(known[name], default):
            refusals.append(
                f"{phrase} with the default {default}; the op binds it to {known[name]} on releases without it, so its fake would not mirror the default"
            )
        elif name in known and keys:  # e.g. output_check for output: how the parameter behaves is data of each release
            refusals.append(
                f"{phrase}; the op models it release by release ({', '.join(keys)} of its RELEASE), and the nearest release's "
                "data describe a release without it"
            )
        else:
            carried.append((name, default))
    return (carried, []) if not refusals else ([], refusals)


def carried_target(target: Target, carried: list[tuple[str, str]] | tuple[tuple[str, str], ...], version: str, release: str) -> Target:
    """``target`` carried to a release whose wrapper added the parameters ``carried`` (``(name, default)``,
    :func:`carriable`): its ``custom-op`` takes them as the wrapper's parameters too, and the redirect refuses,
    while compiling, a value other than the default (:func:`fp4patch.ops.render.render`; ``version``: the
    installed release, ``release``: the verified one, both named in that refusal). The op, its fake and its
    check are ``target``'s. ``target`` itself when nothing is carried."""
    from dataclasses import replace

    if not carried:
        return target
    names = tuple(name for name, _ in carried)
    specs = []
    for kind, kwargs in target.operation_specs:
        if kind == "custom-op":
            op = replace(kwargs["target"], carried=tuple(carried), carried_release=version, carried_from=release)
            kwargs = {**kwargs, "target": op, "anchor_params": (*kwargs["anchor_params"], *names)}
        specs.append((kind, kwargs))
    return replace(target, operation_specs=specs, _operations=None)


# ---------------------------------------------------------------------------- moved targets
def moved_target(reader: ModuleReader, target: Target, search: bool = True) -> tuple[Target, tuple[str, ...]]:
    """``(target, ())``, or, when the function ``target`` edits is no longer defined in its ``file`` but in
    another file of the same package (the old module importing it from there, or, with ``search``, not at
    all: every module of the package is looked at), ``(target at that file, (old file, new file))``: the same
    operations, callers and mirrors, read and applied where the function is now. A function defined in several
    other files is not moved (the caller then reports it as changed). Reads only."""
    from dataclasses import replace

    edited = edited_function(target)
    if edited is None or target.status:
        return target, ()
    file, name = edited
    if file != target.file:
        return target, ()
    tree = reader.tree(file)
    if tree is not None and _defines(tree, name):
        return target, ()
    where, nodes = reader.locate(file, name)
    if not nodes or where == file:
        found = _search_definition(reader, file, name) if search else None
        if found is None:
            return target, ()
        where = found
    return replace(target, file=where, _operations=None), (file, where)


def _defines(tree, name: str) -> bool:
    from .fingerprint import resolve as resolve_name

    return any(type(n).__name__ in ("FunctionDef", "AsyncFunctionDef") for n in resolve_name(tree, name))


def _search_definition(reader: ModuleReader, file: str, name: str) -> str | None:
    """The one file of ``file``'s top-level package (under ``reader.site_packages``) that defines function
    ``name`` at module level, or None (none, or several)."""
    package = file.split("/")[0]
    root = reader.site_packages / package
    if not root.is_dir():
        return None
    needle = f"def {name}(".encode()
    found = []
    for path in sorted(root.rglob("*.py")):  # once per command at most: the nearest target of a spec whose function left its file
        relative = path.relative_to(reader.site_packages).as_posix()
        data = reader.read(relative)
        if data is None or needle not in data:
            continue
        tree = reader.tree(relative)
        if tree is not None and _defines(tree, name):
            found.append(relative)
    return found[0] if len(found) == 1 else None


def _label(targets: list) -> str:
    return "; ".join(str(t.versions) for t in targets)


def changed_hunks(resolution: Resolution, dist, released_bytes, scratch) -> str:
    """The hunks of the code a spec's targets depend on (``resolution``: the spec's :class:`Resolution` on the
    installed release), from the nearest verified release (its archive fetched into the download cache,
    :func:`fp4patch.catalog.releases.fetch`, and unpacked into ``scratch``, a directory) to the installed files of ``dist``
    (an :class:`fp4patch.target.environment.InstalledDistribution`, read through ``released_bytes``, the command's
    ``Sources.released_bytes``: a patched file as released); "" when the basis names no release or no piece
    differs.

    Raises:
        EnvironmentProblem: the verified release cannot be downloaded.
    """
    from pathlib import Path

    from .fingerprint import ModuleReader, hunks, target_pieces
    from .releases import fetch, unpack

    basis = resolution.basis
    if basis is None or basis.kind not in (NEEDS_CHECK, CHECKED, CHANGED) or not basis.release:
        return ""
    site = Path(scratch) / basis.release
    if not site.is_dir():
        unpack(fetch(dist.name, basis.release), site, sources_only=True)
    verified = ModuleReader(site)
    installed = ModuleReader(dist.site_packages, released_bytes)
    out = []
    for target in resolution.targets:
        if target.status:
            continue
        pieces = target_pieces(target)
        named = [p for p in pieces if p in basis.changes]
        if not named:  # a signature change: the edited function
            edited = edited_function(target)
            named = [edited[1]] if edited else []
        out.append(hunks(installed, verified, named, target.file, basis.release))
    return "".join(out)
