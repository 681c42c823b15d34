"""Which target a spec takes on the installed release, and on what evidence.

A release the catalog lists (``catalog.json``: every release on the registry when fp4patch was
made) takes the targets whose version specifier contains it, as written in the spec. Any other
release — newer, a pre-, dev or post release, a local label such as ``0.7.4+cu130`` — is placed by
its code, in this order (:func:`resolve`):

1. **same code**: a target whose recorded evidence (the code ``make compat`` verified it on:
   :class:`fp4patch.catalog.Evidence`) equals the installed code piece for piece
   (:mod:`fp4patch.fingerprint`) is taken as it is: "as verified on 0.7.4, same code";
2. a target without any recorded evidence (a spec of your own, ``--specs-dir``) or a declaration
   (``not-needed``/``unsupported``) whose specifier contains the release: as the spec says;
3. otherwise the nearest release the catalog lists at or below it decides: its declaration
   holds ("as declared for 0.5.3"); its patching target is taken only if the edited function's
   signature equals the one it was verified with (else ``drifted``, naming each parameter added,
   removed or renamed) — and then the code that differs must be checked before it is applied
   (``needs-check``: the fake against the wrapper's own allocation on CPU and the fullgraph trace,
   :mod:`fp4patch.cpu_check`), after which it is "checked on CPU for 0.7.5".

A fingerprint covers FlashInfer's Python only, never its C++ kernels: a target taken on evidence
says so and points at ``fp4patch verify --opcheck`` on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from packaging.version import Version

from .fingerprint import ModuleReader, fingerprint, signature, signature_changes, split_piece

if TYPE_CHECKING:
    from .catalog import Catalog, Evidence
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
    """

    kind: str
    version: str
    release: str = ""
    changes: tuple[str, ...] = ()
    digest: str = ""
    target: str = ""

    @property
    def inherited(self) -> bool:
        """True when the targets were taken on evidence for a release the catalog does not list."""
        return self.kind in INHERITED

    def describe(self, spec_id: str = "") -> str:
        """One phrase for text output ("" for a listed release): "as verified on 0.7.4, same code"."""
        what = "; ".join(self.changes[:4]) + (f" (and {len(self.changes) - 4} more)" if len(self.changes) > 4 else "")
        if self.kind == SAME_CODE:
            return f"as verified on {self.release}, same code"
        if self.kind == CHECKED:
            return f"checked on CPU for {self.version} ({self.release}'s target; differs in {what})" if what else f"checked on CPU for {self.version}"
        if self.kind == NEEDS_CHECK:
            differs = f"differs from {self.release}, the nearest verified release, in {what}" if what else f"differs from {self.release}'s verified code"
            return f"{differs}; `fp4patch apply` checks it on CPU before patching"
        if self.kind == CHANGED:
            return f"{what} (against {self.release}, the nearest verified release)" if self.release else what
        if self.kind == DECLARED:
            return f"as declared for {self.release}, the nearest release fp4patch knows"
        if self.kind == BY_SPECIFIER:
            return f"{self.version} is not a release fp4patch knows; taken by the spec's version specifier (no evidence recorded for this target)"
        return ""

    def to_json(self) -> dict:
        """As ``--json`` prints it (``basis`` of a spec report; see docs/json-schema.json)."""
        return {
            "kind": self.kind,
            "version": self.version,
            "release": self.release,
            "changes": list(self.changes),
            "target": self.target,
            "description": self.describe(),
        }

    @classmethod
    def from_json(cls, data: dict) -> Basis:
        return cls(data["kind"], data.get("version", ""), data.get("release", ""), tuple(data.get("changes", ())), data.get("digest", ""), data.get("target", ""))

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
    # 1. same code as a verified release
    matches = []
    for target in patching:
        entries = _evidence_of(catalog, spec, target)
        if not entries:
            continue
        pieces = fingerprint(reader, target).pieces
        for entry in entries:
            if entry.code == pieces:
                matches.append((entry, target))
    if matches:
        entry = _closest([e for e, _ in matches], version)
        target = next(t for e, t in matches if e is entry)
        release = str(_nearest_release(entry, version))
        return Resolution([target], Basis(SAME_CODE, v, release, digest=fingerprint(reader, target).digest, target=str(target.versions)))
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
    for target in targets:
        entries = _evidence_of(catalog, spec, target)
        installed = fingerprint(reader, target)
        digests.append(installed.digest)
        if not entries:
            changes.append(f"{target.file}: no evidence recorded for this target")
            continue
        entry = _closest(entries, version)
        release = str(_nearest_release(entry, version))
        changes += installed.changed(entry.code)
        edited = edited_function(target)
        if edited:
            where, nodes = reader.locate(*edited)
            if nodes and where != edited[0]:  # the module imports it now: upstream moved the function
                moved = f"{edited[1]}() is no longer defined in {edited[0]}: this release defines it in {where} (a new target is needed)"
                return Resolution(targets, Basis(CHANGED, v, release, (moved,), "+".join(digests), _label(targets)))
        if edited and entry.signature:
            now = installed_signature(reader, target)
            verified = [list(row) for row in entry.signature]
            if not now:
                return Resolution(targets, Basis(CHANGED, v, release, (f"{edited[1]}() not found in {edited[0]}",), "+".join(digests), _label(targets)))
            moved = signature_changes(now, verified, edited[1])
            if moved:
                return Resolution(targets, Basis(CHANGED, v, release, tuple(moved), "+".join(digests), _label(targets)))
    return Resolution(targets, Basis(NEEDS_CHECK, v, release, tuple(dict.fromkeys(changes)), "+".join(digests), _label(targets)))


def _label(targets: list) -> str:
    return "; ".join(str(t.versions) for t in targets)


def changed_hunks(engine, spec: Spec, scratch) -> str:
    """The hunks of the code ``spec``'s targets depend on, from the nearest verified release (its
    archive fetched into the download cache, :func:`fp4patch.releases.fetch`, and unpacked into
    ``scratch``, a directory) to the installed files; "" when the spec's basis names no release or
    no piece differs.

    Raises:
        EnvironmentProblem: the verified release cannot be downloaded.
    """
    from pathlib import Path

    from .fingerprint import ModuleReader, hunks, target_pieces
    from .releases import fetch, unpack

    resolution = engine.resolve(spec)
    basis = resolution.basis
    if basis is None or basis.kind not in (NEEDS_CHECK, CHECKED, CHANGED) or not basis.release:
        return ""
    site = Path(scratch) / basis.release
    if not site.is_dir():
        unpack(fetch(engine.dist.name, basis.release), site, sources_only=True)
    verified = ModuleReader(site)
    installed = ModuleReader(engine.dist.site_packages, engine.sources.released_bytes)
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
