"""What an ``apply`` or ``revert`` would write, worked out in memory; never writes.

- :func:`plan_file`: one file's new bytes — every operation of the ``(spec, target)`` pairs run over
  its libcst tree — checked to compile (:func:`check_result`), as a :class:`FilePlan`;
- :func:`check_apply`: the preflight of an apply's plans: no symbolic link, no file changed since
  fp4patch patched it, a first patch only on the bytes RECORD lists
  (:func:`fp4patch.engine.install_record.check_baseline`);
- :func:`apply_change` / :func:`revert_change`: the :class:`Change` that carries out the plans — the
  journal (:class:`fp4patch.engine.manifest.Journal`: new bytes, backups, the manifest afterwards), the
  bytes to put back on a write error, the manifest before — for :func:`fp4patch.engine.journal.run`.

Plans never write (as libcst's codemod runner transforms in memory and its CLI alone writes): the
engine orders lock, recovery, plan, preflight and journal (:mod:`fp4patch.engine`).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import DriftError, FileSystemError
from .files import check_writable, read_bytes, sha256
from .install_record import check_baseline, record_sha256
from .manifest import FileRecord, Journal, JournalFile, Manifest

if TYPE_CHECKING:
    from ..catalog.evidence import Basis
    from ..catalog.spec import Spec, Target
    from ..target.environment import InstalledDistribution
    from .advice import Advice
    from .manifest import ManifestStore
    from .sources import Sources


@dataclass
class FilePlan:
    """One file to patch: what is on disk now and what it becomes."""

    relative: str
    path: Path
    current: bytes
    patched: bytes
    specs: list[str]
    encoding: str = "utf-8"
    #: The libcst tree of ``patched`` without its set stamp (what the operations left), when this plan made it; it
    #: lacks the blocks added at the end as text, ``appended`` (:func:`appended_text`).
    module: Any = field(default=None, repr=False, compare=False)
    appended: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def changes(self) -> bool:
        """True when ``patched`` differs from ``current``."""
        return self.current != self.patched

    def unified_diff(self) -> str:
        """Unified diff ``a/<relative>`` → ``b/<relative>`` (empty when nothing changes)."""
        old = self.current.decode(self.encoding, errors="surrogateescape").splitlines(keepends=True)
        new = self.patched.decode(self.encoding, errors="surrogateescape").splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, new, f"a/{self.relative}", f"b/{self.relative}"))


@dataclass
class Change:
    """What one ``apply`` or ``revert`` writes, ready for :func:`fp4patch.engine.journal.run`.

    Attributes:
        journal: every write, recorded before the first.
        undo: ``(path, bytes before)`` of each target file written, put back on a write error.
        previous: the manifest before (saved again on a write error); None: there was none.
        paths: the target files written, which :meth:`check_writable` checks.
    """

    journal: Journal
    undo: list[tuple[Path, bytes]]
    previous: Manifest | None
    paths: list[Path]

    def check_writable(self, store: ManifestStore) -> None:
        """Every target file, and the manifest directory (or its nearest existing parent), must
        accept writes.

        Raises:
            FileSystemError: one does not (read-only file or site-packages); nothing written.
        """
        for path in self.paths:
            check_writable(path)
        directory = store.root
        while not directory.exists():
            directory = directory.parent
        check_writable(directory / "manifest.json")


def plan_file(sources: Sources, relative: str, pairs: list[tuple[Spec, Target]], base: bytes | None = None, check: bool = True) -> FilePlan:
    """``relative`` (site-packages-relative) with the operations of every ``(spec, target)`` of
    ``pairs`` applied in order, on the installed file (read through ``sources``) or on ``base``
    (a revert's original bytes, re-patched with the specs that stay). ``check``: the result must compile
    (:func:`check_result`); a caller that stamps the result checks the stamped bytes instead.

    Raises:
        DriftError: the file is not valid Python, or (``check``) the result does not compile.
    """
    import libcst as cst

    path = sources.dist.locate(relative)
    if base is None:
        loaded = sources.load_module(path)
        assert loaded is not None
        current, module = loaded
    else:
        current, module = base, cst.parse_module(base)
    from ..codemods.base import OpState

    appended: list[str] = []  # rendered op blocks to add at the end, as text (see appended_text)
    textual = _appends_as_text(module)
    for _, target in pairs:
        for op in target.operations:
            text = appended_text(op) if textual else None
            if text is not None:
                if op.cached_check(module).state is OpState.APPLICABLE and text not in appended:
                    appended.append(text)
                continue
            module = op.apply(module)
    patched = module.bytes  # libcst prints a parsed tree as its source: only what the operations changed differs
    if appended:  # in the file's encoding, without a second byte-order mark (utf-8-sig writes one per encode)
        encoding = "utf-8" if module.encoding.lower().replace("_", "-") == "utf-8-sig" else module.encoding
        patched += "".join("\n\n" + text for text in appended).encode(encoding)
    if check:
        check_result(path, patched)
    # the tree lacks the blocks appended as text: it serves the reports after apply (Sources.seed), never a plan
    return FilePlan(relative, path, current, patched, sorted({s.id for s, _ in pairs}), module.encoding, module, tuple(appended))


def _appends_as_text(module) -> bool:
    """Whether a rendered op block appended at the end of ``module`` prints as its own text (:func:`appended_text`):
    libcst writes an appended statement with the module's newline and indent, and before the module's footer; the
    text is the same when those are ``\\n`` and four spaces and there is no footer (every FlashInfer file). Else the
    block goes through the tree."""
    import codecs

    wide = codecs.lookup(module.encoding).name.startswith(("utf-16", "utf-32"))  # a byte-order mark per encode
    return module.default_newline == "\n" and module.default_indent == "    " and module.has_trailing_newline and not module.footer and not wide


def appended_text(op) -> str | None:
    """The text libcst writes for ``op`` when it is a block appended at the end (an ``append-to-module``, position
    ``end``: every rendered op block) whose text libcst prints as written, or None (the operation edits the tree).

    Parsing a block into libcst nodes and printing them again was about half of a first ``apply``'s time on 0.7.4
    (18 blocks, 9,500 lines): the block is added as the text it was rendered as, which is what libcst prints for
    it — two blank lines, then its statements, each line as written (the renderer writes a block with four-space
    indents, ``\\n`` newlines, no blank or comment line after its last statement); tests/test_rendered_bytes.py
    and tests/test_plan_text.py compare the two.
    """
    from ..codemods.append_to_module import AppendToModule

    if not isinstance(op, AppendToModule) or op.position != "end":
        return None
    import textwrap

    text = textwrap.dedent(op.code).strip("\n") + "\n"
    lines = text.splitlines()
    indented = next((line for line in lines if line[:1] in (" ", "\t")), "    x")
    if "\r" in text or not indented.startswith("    ") or indented[4:5] in (" ", "\t") or lines[-1].lstrip().startswith("#"):
        return None
    return text


def stamp_set(sources: Sources, plans: dict[str, FilePlan], manifest: Manifest | None) -> tuple[dict[str, FilePlan], str | None]:
    """``plans`` (each file's patched bytes without a stamp) with every file of the set that the apply leaves
    patched stamped with the set's token (:mod:`fp4patch.engine.set_stamp`), and that token (None: no file is patched).

    The set: each planned file whose result differs from its original (the record's, else the file as it is), and
    each file ``manifest`` (this install's record) holds as patched by specs not planned now; the latter get a plan
    of their own when their stamp changes (the set's token names all of its contents), which the preflight
    (:func:`check_apply`) checks like any other write.

    Raises:
        FileSystemError: a recorded file cannot be read.
    """
    from dataclasses import replace

    from .set_stamp import restamp, strip

    records = manifest.files if manifest else {}
    unstamped: dict[str, bytes] = {}
    for relative, plan in plans.items():
        record = records.get(relative)
        original = record.original_sha256 if record else sha256(strip(plan.current))
        if sha256(plan.patched) != original:
            unstamped[relative] = plan.patched
    present: dict[str, bytes] = {}
    for relative in records:
        path = sources.dist.locate(relative)
        if relative not in plans and path.is_file():
            present[relative] = read_bytes(path)
            unstamped[relative] = strip(present[relative])
    if not unstamped:
        return plans, None
    token, stamped = restamp(unstamped, sources.store.path.relative_to(sources.dist.site_packages).as_posix())
    out = dict(plans)
    for relative, data in stamped.items():
        if relative in plans:
            out[relative] = replace(plans[relative], patched=data)
        elif data != present[relative]:
            out[relative] = FilePlan(relative, sources.dist.locate(relative), present[relative], data, sorted(records[relative].specs))
    return out, token


def check_result(path: Path, data: bytes) -> None:
    """The patched bytes must compile (CPython); else nothing is written.

    Not parsed again with libcst: the bytes are libcst's own printing of a tree made of parsed
    source and parsed snippets, which libcst reads back (its round-trip guarantee); compiling is the
    check that the edit is valid Python (a re-parse cost about 0.1 CPU-second per file).

    Raises:
        DriftError: ``data`` does not compile.
    """
    from .bytecode import compiled

    try:
        compiled(data, str(path))  # kept: the bytecode checks after the write compile the same bytes (bytecode.stale)
    except (SyntaxError, ValueError) as exc:
        raise DriftError(f"{path}: patched result does not compile ({exc}); the spec's code is wrong for this version — nothing written") from None


def linked_component(site_packages: Path, path: Path) -> Path | None:
    """The first symbolic link on the way from ``site_packages`` down to ``path`` (a folder of it, e.g. a package
    folder linked into a shared cache, or the file itself), or None. ``site_packages`` itself, and whatever leads to
    it (a venv's ``lib64 -> lib``, a linked venv), is not looked at: only what lies below it is written through. A
    ``path`` outside ``site_packages`` is checked alone."""
    try:
        parts = path.relative_to(site_packages).parts
    except ValueError:
        return path if path.is_symlink() else None
    current = site_packages
    for part in parts:
        current = current / part
        if current.is_symlink():
            return current
    return None


def link_refusal(dist: InstalledDistribution, paths: Iterable[Path], python: str | None = None) -> str | None:
    """Why ``apply`` refuses to write ``paths`` (files of ``dist`` it would change), or None: the symbolic links on
    their way down from site-packages (:func:`linked_component`: the file, or a folder of it), every one named once,
    with the reinstall that gives regular files. A write through a linked folder would change the shared copy the link
    leads to as surely as one through a linked file. ``status`` and ``verify`` say the same before an ``apply`` is tried
    (:meth:`fp4patch.engine.Engine.apply_refusal`). ``python``: as in :func:`check_apply`. Hard links are not refused:
    the atomic rename that writes a file gives it a new inode and leaves the other names alone."""
    links = list(dict.fromkeys(filter(None, (linked_component(dist.site_packages, path) for path in paths))))
    if not links:
        return None
    # uv's --link-mode=symlink links every file of the install into uv's cache: name them all at once
    # and the reinstall that gives regular files (never write through a link into a shared cache).
    pinned = f"{dist.name}=={dist.version}"
    what = (
        f"{links[0]}: is a symbolic link to {os.readlink(links[0])}"
        if len(links) == 1
        else f"{', '.join(map(str, links))}: are symbolic links (first to {os.readlink(links[0])})"
    )
    import shlex

    # name the environment in the advice: a bare `uv pip install` outside a venv finds none, and a bare
    # `pip` is whichever one PATH has
    uv = ["uv", "pip", "install", *(["--python", python] if python else []), "--reinstall", "--no-deps", "--link-mode=copy", pinned]
    pip = [*([python, "-m", "pip"] if python else ["pip"]), "install", "--force-reinstall", "--no-deps", pinned]
    return (
        f"{what}; fp4patch patches regular files only — reinstall with copies "
        f"(`{shlex.join(uv)}`; pip installs copies: `{shlex.join(pip)}`), or replace each link by a copy of what it links to, then apply"
    )


def check_apply(
    dist: InstalledDistribution,
    plans: dict[str, FilePlan],
    manifest: Manifest | None,
    allow_modified: bool,
    notify: Callable[[str], None],
    advice: Advice,
    python: str | None = None,
) -> set[str]:
    """The preflight of an apply: each file ``plans`` change must be a regular file that holds what
    fp4patch last wrote there (``manifest``: this install's record, None when there is none), or the
    original bytes again (reinstalled since: it is patched afresh, said on ``notify``), or, patched
    for the first time, the bytes RECORD lists (unless ``allow_modified``). Returns the files
    reinstalled since.

    Args:
        dist (InstalledDistribution): the installed distribution.
        plans (dict[str, FilePlan]): site-packages-relative path -> its plan.
        manifest (Manifest | None): this install's record; None when there is none.
        allow_modified (bool): patch a file that differs from RECORD anyway.
        notify (Callable[[str], None]): where the "reinstalled?" notes go.
        advice (Advice): words the commands the messages advise (:class:`fp4patch.engine.advice.Advice`).
        python (str | None): the target interpreter the user named (``--python``), which the reinstall advice
            then names too.

    Raises:
        FileSystemError: a symbolic link (every one named, with the reinstall that gives copies), a
            file changed since fp4patch patched it, or one that differs from RECORD; nothing written.
    """
    writes = [p for p in plans.values() if p.changes]
    refused = link_refusal(dist, [plan.path for plan in writes], python)
    if refused:
        raise FileSystemError(refused)
    records = manifest.files if manifest else {}
    reinstalled: set[str] = set()
    for plan in writes:
        record = records.get(plan.relative)
        current = sha256(plan.current)
        if record and current == record.original_sha256 != record.patched_sha256:
            reinstalled.add(plan.relative)  # reinstalled since apply: patch it afresh
            notify(f"{plan.path}: holds the original bytes again (reinstalled?); patching it afresh")
        elif record and current != record.patched_sha256:
            raise FileSystemError(
                f"{plan.path}: changed since fp4patch patched it; run `{advice.command('revert', '--force')}` (puts the installed originals "
                f"back), then `{advice.command('apply')}`"
            )
        elif not record and not allow_modified:
            check_baseline(dist, plan.relative, plan.path, plan.current)
    return reinstalled


@dataclass(frozen=True, kw_only=True)
class ApplyRequest:
    """What an ``apply`` writes and records (:func:`apply_change`).

    Attributes:
        plans: the planned files, checked by :func:`check_apply`.
        manifest: this install's record, None when there is none.
        reinstalled: the files :func:`check_apply` found reinstalled since the record (their old record is dropped).
        requested: the spec ids the journal names.
        taken: each spec applied and the basis it was resolved on (kept in the manifest unless the release is
            listed: "as verified on 0.7.4, same code").
        set_token: the token the planned files are stamped with (:func:`stamp_set`), recorded in the manifest, which
            the journal writes after every file (the set is whole from then on); None keeps the record's.
    """

    plans: dict[str, FilePlan]
    manifest: Manifest | None
    reinstalled: set[str]
    requested: list[str]
    taken: dict[str, Basis | None]
    set_token: str | None = None


def apply_change(dist: InstalledDistribution, store: ManifestStore, request: ApplyRequest) -> Change | None:
    """The :class:`Change` that writes ``request.plans`` to ``dist`` and records them in a new manifest in ``store``:
    the record's specs and files with ``request.taken``, and each planned file's hashes, specs and mode.

    None when there is nothing to write: no file changes and the manifest would not either, or
    every selected spec is obsolete, not needed or already in the files.
    """
    plans, manifest, reinstalled, requested, taken, set_token = (
        request.plans, request.manifest, request.reinstalled, request.requested, request.taken, request.set_token
    )
    writes = [p for p in plans.values() if p.changes]
    manifest = manifest or Manifest(dist.name, str(dist.version))
    previous = manifest if store.path.exists() else None
    applied_ids = sorted(set(manifest.specs) | set(taken))
    basis = dict(manifest.basis)
    for spec_id, resolved in taken.items():
        if resolved is not None and resolved.kind not in ("listed", "no-target"):
            basis[spec_id] = resolved.to_record()  # the evidence it was applied on ("as verified on 0.7.4, same code")
    new_manifest = Manifest(
        dist.name, str(dist.version), applied_ids, dict(manifest.files), record_sha256=record_sha256(dist.dist), basis=basis,
        set_token=set_token if set_token is not None else manifest.set_token,
    )
    for plan in plans.values():
        old = None if plan.relative in reinstalled else manifest.files.get(plan.relative)
        original = old.original_sha256 if old else sha256(plan.current)
        if old is None and not plan.changes:
            continue  # already patched by hand or upstream: nothing to restore
        mode = plan.path.stat().st_mode & 0o7777
        specs_in = sorted(set(old.specs if old else []) | set(plan.specs))
        new_manifest.files[plan.relative] = FileRecord(original, sha256(plan.patched), specs_in, mode)
    if not writes and store.path.exists() and new_manifest == manifest:
        return None  # nothing to do, and nothing to record: no write at all
    if not writes and not new_manifest.files:
        return None  # every selected spec is obsolete, not needed, or already in the files
    fresh = [p for p in writes if p.relative not in manifest.files or p.relative in reinstalled]
    journal = Journal(
        "apply",
        dist.name,
        str(dist.version),
        requested,
        files=[
            JournalFile(p.relative, sha256(p.current), sha256(p.patched), p.path.stat().st_mode & 0o7777, Journal.encode(p.patched))
            for p in writes
        ],
        backups={p.relative: Journal.encode(p.current) for p in fresh},
        manifest=asdict(new_manifest),
    )
    return Change(journal, [(p.path, p.current) for p in writes], previous, [p.path for p in writes])


def revert_change(
    sources: Sources,
    manifest: Manifest,
    removing: set[str],
    remaining: list[Spec],
    kept: Mapping[str, list[tuple[Spec, Target]]],
    force: bool,
    notify: Callable[[str], None],
    already_original: list[str],
) -> tuple[Change, list[str]]:
    """The :class:`Change` that removes the specs ``removing`` from this install's ``manifest``, and
    the site-packages-relative files it restores or rewrites.

    Each file that holds a removed spec gets its original back (fp4patch's backup), re-patched with
    ``kept[relative]``, the ``(spec, target)`` pairs of the ``remaining`` specs in that file (``kept``:
    ``Mapping[str, list[tuple[Spec, Target]]]``, site-packages-relative file -> pairs in the order of
    ``remaining``; a file missing from it keeps none). A file
    already holding its original bytes with nothing kept only loses its record (said on ``notify``,
    appended to ``already_original``, as found). The manifest afterwards keeps the remaining specs
    and their basis; None (removed with every backup) when no file is left.

    Raises:
        FileSystemError: a file whose sha256 is not the recorded patched one (unless ``force``), or
            a backup altered since (sha256 mismatch); nothing written.
        DriftError: a remaining spec's result does not compile.
    """
    dist, store = sources.dist, sources.store
    writes, records, touched, dropped = [], dict(manifest.files), [], []
    for relative, record in manifest.files.items():
        if not removing & set(record.specs):
            continue
        path = dist.locate(relative)
        current = read_bytes(path) if path.exists() else b""
        keep = kept.get(relative, [])
        if sha256(current) == record.original_sha256 and not keep:
            notify(f"{path}: already holds the original bytes (reinstalled?); dropping its record")
            del records[relative]
            dropped.append(relative)
            already_original.append(relative)
            continue
        touched.append(relative)
        if sha256(current) != record.patched_sha256 and not force:
            raise FileSystemError(
                f"{path}: changed since apply (sha256 differs from the manifest); not restoring — "
                f"reinstall {dist.name}, or use --force to restore the backup anyway"
            )
        original = store.read_backup(relative)
        if sha256(original) != record.original_sha256:
            raise FileSystemError(f"{store.backup_path(relative)}: backup altered (sha256 mismatch); reinstall {dist.name}")
        if keep:
            new = plan_file(sources, relative, keep, base=original).patched
            records[relative] = FileRecord(record.original_sha256, sha256(new), sorted({s.id for s, _ in keep}), record.mode)
        else:
            new = original
            del records[relative]
            dropped.append(relative)
        writes.append((relative, path, current, new, record.mode))
    token = None
    if records:  # the files that stay patched are a new set: each gets its stamp (set_stamp), the manifest its token
        from .set_stamp import restamp, strip

        new_bytes = {relative: new for relative, _, _, new, _ in writes}
        present = {}
        for relative, record in records.items():
            if relative not in new_bytes:
                path = dist.locate(relative)
                present[relative] = read_bytes(path) if path.is_file() else b""
                if sha256(present[relative]) != record.patched_sha256 and not force:
                    raise FileSystemError(
                        f"{path}: changed since apply (sha256 differs from the manifest); not rewriting it with the specs that "
                        f"stay — reinstall {dist.name}, or use --force"
                    )
        unstamped = {r: strip(new_bytes[r] if r in new_bytes else present[r]) for r in records}
        token, stamped = restamp(unstamped, store.path.relative_to(dist.site_packages).as_posix())
        writes = [(r, path, cur, stamped.get(r, new), mode) for r, path, cur, new, mode in writes]
        for relative, data in stamped.items():
            records[relative] = replace(records[relative], patched_sha256=sha256(data))
            if relative in present and data != present[relative]:
                writes.append((relative, dist.locate(relative), present[relative], data, records[relative].mode))
    kept_basis = {k: v for k, v in manifest.basis.items() if k in {s.id for s in remaining}}
    new_manifest = (
        Manifest(
            manifest.distribution, manifest.version, sorted(s.id for s in remaining), records, record_sha256=manifest.record_sha256,
            basis=kept_basis, set_token=token,
        )
        if records
        else None
    )
    journal = Journal(
        "revert",
        dist.name,
        str(dist.version),
        sorted(removing),
        files=[JournalFile(rel, sha256(cur), sha256(new), mode, Journal.encode(new)) for rel, _, cur, new, mode in writes],
        manifest=asdict(new_manifest) if new_manifest else None,
        drop_backups=dropped if new_manifest else [],
    )
    return Change(journal, [(path, cur) for _, path, cur, _, _ in writes], manifest, [path for _, path, *_ in writes]), touched
