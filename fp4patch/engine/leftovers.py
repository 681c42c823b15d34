"""State fp4patch left behind for a distribution that is gone or was reinstalled, and its removal.

``pip uninstall`` removes the files listed in the distribution's RECORD; ``<site-packages>/.fp4patch/``
is not among them, so the backups and manifest of an ``apply`` stay. An
upgrade (or any reinstall that writes a different RECORD) leaves them too, describing files
that are no longer there. :func:`find` tells each state directory apart:

- ``gone``: no distribution of that name in that site-packages any more;
- ``stale``: the distribution there is another install than the one the manifest was written
  for: another version, or (manifests from fp4patch 0.x on) another RECORD;
- ``current``: it belongs to the installed distribution (``revert`` is the command for it);
- ``interrupted``: an ``apply``/``revert`` journal of the installed distribution (``apply``
  finishes it).

:func:`clean` (``fp4patch clean``) removes ``gone`` and ``stale`` ones, never installed files;
:func:`stale_note` is the line ``status`` prints for a ``stale`` one, :func:`gone_note` what the
"not installed" error adds for a ``gone`` one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import FileSystemError
from ..locations import STATE_DIR
from .install_record import record_sha256

if TYPE_CHECKING:
    from ..target.environment import TargetEnvironment
    from .advice import Advice

GONE, STALE, CURRENT, INTERRUPTED = "gone", "stale", "current", "interrupted"


@dataclass(frozen=True)
class StateDir:
    """One ``<site-packages>/.fp4patch/<distribution>/`` directory.

    Attributes:
        path: the directory.
        site_packages: the site-packages it is in.
        distribution: its name (canonical, as fp4patch writes it).
        recorded_version: the version its manifest (or journal) was written for, "" when neither is readable.
        installed_version: the version of that distribution in that site-packages now, "" when none.
        kind: ``gone``, ``stale``, ``current`` or ``interrupted`` (module docstring).
        reason: one line saying why, for messages.
    """

    path: Path
    site_packages: Path
    distribution: str
    recorded_version: str
    installed_version: str
    kind: str
    reason: str

    def to_json(self) -> dict:
        """As ``fp4patch clean --json`` prints it."""
        return {"path": str(self.path), "distribution": self.distribution, "recorded_version": self.recorded_version,
                "installed_version": self.installed_version, "kind": self.kind, "reason": self.reason}


def _recorded(path: Path) -> tuple[str, str | None, bool]:
    """``(version, RECORD sha256 or None, journal present)`` as the state directory records them."""
    for name in ("manifest.json", "journal.json"):
        try:
            data = json.loads((path / name).read_text(encoding="utf-8"))
            return str(data.get("version", "")), data.get("record_sha256"), (path / "journal.json").exists()
        except (OSError, ValueError, AttributeError):
            continue
    return "", None, (path / "journal.json").exists()


def describe(path: Path) -> StateDir:
    """What the state directory ``path`` (``<site-packages>/.fp4patch/<distribution>``) belongs to."""
    from importlib import metadata

    site_packages, name = path.parent.parent, path.name
    version, record, journal = _recorded(path)
    installed = next(iter(metadata.distributions(name=name, path=[str(site_packages)])), None)
    what = f"fp4patch's record of {name} {version or '(unreadable)'} in {path}"
    if installed is None:
        return StateDir(path, site_packages, name, version, "", GONE, f"{what}: {name} is no longer installed there (uninstalled?)")
    now = installed.version or ""
    if version != now:
        return StateDir(path, site_packages, name, version, now, STALE, f"{what}: {name} {now} is installed there now (upgraded or reinstalled)")
    if record is not None and record != record_sha256(installed):
        return StateDir(path, site_packages, name, version, now, STALE, f"{what}: {name} {now} was reinstalled since (its RECORD differs)")
    if journal:
        return StateDir(path, site_packages, name, version, now, INTERRUPTED, f"{what}: an interrupted apply/revert; `fp4patch apply` finishes it")
    return StateDir(path, site_packages, name, version, now, CURRENT, f"{what}: the patches applied to the installed {name}; `fp4patch revert` removes them")


def find(env: TargetEnvironment, name: str | None = None) -> list[StateDir]:
    """Every state directory in the directories of ``env.paths`` (only ``name``'s when given)."""
    from packaging.utils import canonicalize_name

    found = []
    seen = set()
    for entry in env.paths:
        state = Path(entry) / STATE_DIR
        if not state.is_dir() or state.resolve() in seen:
            continue
        seen.add(state.resolve())
        for path in sorted(p for p in state.iterdir() if p.is_dir()):
            if name is None or canonicalize_name(path.name) == canonicalize_name(name):
                found.append(describe(path))
    return found


def gone_note(env: TargetEnvironment, name: str) -> str:
    """For the "not installed" error: ``; <what fp4patch left> — `fp4patch clean` removes it`` when
    state of ``name`` is left in ``env``, else ""."""
    left = [s for s in find(env, name) if s.kind == GONE]
    if not left:
        return ""
    import shlex

    return f"; {left[0].reason} — `{shlex.join(['fp4patch', 'clean', *env.options])}` removes it"


def stale_note(root: Path, advice: Advice) -> str | None:
    """One line when the state directory ``root`` (``<site-packages>/.fp4patch/<distribution>``)
    was written for another install of the distribution (``stale``: upgraded, or reinstalled with
    another RECORD): what it is, and the ``apply`` and ``clean`` commands (worded by ``advice``,
    :class:`fp4patch.engine.advice.Advice`: the options the command was given) that replace or remove it.
    None otherwise (also when there is none, or it cannot be read). ``root``: a :class:`~pathlib.Path`. Reads
    only."""
    if not root.is_dir():
        return None
    state = describe(root)
    if state.kind != STALE:
        return None
    return f"{state.reason}; `{advice.command('apply')}` replaces it, `{advice.command('clean')}` removes it"


def clean(env: TargetEnvironment, notify=None) -> tuple[list[StateDir], list[StateDir]]:
    """Remove every ``gone`` or ``stale`` state directory in ``env`` (under its distribution's lock),
    and ``.fp4patch`` itself when nothing else is in it. Installed files are never touched.
    Returns ``(removed, kept)``.

    Raises:
        FileSystemError: a directory cannot be removed (read-only site-packages); the ones
            listed before it are removed.
    """
    import shutil

    from .lock import UnwritableLock, environment_lock

    removed, kept = [], []
    for state in find(env):
        if state.kind not in (GONE, STALE):
            kept.append(state)
            continue
        lock_path = state.path.parent / f"{state.distribution}.lock"
        try:
            lock = environment_lock(lock_path, f"{state.distribution} in {state.site_packages}", notify or (lambda _: None), remove_when=lambda: True)
            lock.__enter__()
        except UnwritableLock as exc:
            raise FileSystemError(f"{state.path}: cannot remove ({exc}); make {state.site_packages} writable") from None
        try:
            again = describe(state.path)  # under the lock: an apply may have replaced it meanwhile
            if again.kind not in (GONE, STALE):
                kept.append(again)
                continue
            try:
                shutil.rmtree(state.path)
            except OSError as exc:
                raise FileSystemError(f"{state.path}: cannot remove ({exc.strerror}); make {state.site_packages} writable") from None
            removed.append(state)
        finally:
            lock.__exit__(None, None, None)
        root = state.path.parent
        try:
            if root.is_dir() and not any(root.iterdir()):
                root.rmdir()
        except OSError:
            pass
    return removed, kept
