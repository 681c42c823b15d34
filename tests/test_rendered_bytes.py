"""What fp4patch writes, byte for byte, against a list recorded when it last changed on purpose.

Two things are recorded in ``tests/data/rendered_bytes.json``:

- ``render``: for every ``custom-op`` operation of every built-in spec target, the op's name
  (``fp4patch::<function>_<fingerprint>``) and the sha256 of its rendered redirect and op block
  (:func:`fp4patch.ops.render.render`, through the op cache as ``apply`` uses it);
- ``apply``: for the real 0.6.0 and 0.7.4 wheels (their Python sources), the sha256 of every file
  the default ``apply`` writes and of the manifest it records, as :class:`fp4patch.engine.Engine`
  leaves them.

A refactoring (the engine's split into plan, journal, recovery, ... modules; a shorter renderer
docstring) must leave both unchanged. A change to a spec, an op source or the renderer that is
meant to change what lands in site-packages regenerates the list, and the diff of the JSON says
which ops and files changed::

    .venv/bin/python tests/test_rendered_bytes.py    # rewrites tests/data/rendered_bytes.json

(downloads nothing when ``~/.cache/fp4patch/releases`` holds the two wheels, as after ``make test``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

RECORDED = Path(__file__).resolve().parent / "data" / "rendered_bytes.json"
DIST = "flashinfer-python"
VERSIONS = ("0.6.0", "0.7.4")


def _sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def rendered() -> dict[str, dict[str, str]]:
    """``"<spec id> <target versions> <function>"`` → ``{"op", "redirect", "block"}`` for every custom-op operation."""
    from fp4patch.catalog.spec import load_specs

    out: dict[str, dict[str, str]] = {}
    for spec in load_specs():
        for target in spec.targets:
            ops = [kwargs["target"] for kind, kwargs in target.operation_specs if kind == "custom-op"]
            for op_target, result in zip(ops, target.custom_ops):
                key = f"{spec.id} {target.versions} {op_target.function}"
                assert key not in out, f"two custom-op operations named {key}"
                out[key] = {"op": result.op_name, "redirect": _sha256(result.redirect), "block": _sha256(result.block)}
    return out


def applied(site: Path) -> dict[str, str]:
    """Apply the default specs to ``site`` (a writable site-packages) in process; every file the
    apply wrote (site-packages-relative) and the manifest → sha256."""
    from fp4patch.engine.coordinator import Engine, select_specs
    from fp4patch.target.environment import find_distribution, from_site_packages
    from fp4patch.catalog.spec import load_specs

    specs = [s for s in load_specs() if s.distribution == DIST]
    engine = Engine(find_distribution(from_site_packages(site), DIST), specs, notify=lambda message: None)
    written = engine.apply(select_specs(specs, None))
    out = {plan.relative: _sha256(plan.path.read_bytes()) for plan in written}
    out[".fp4patch manifest"] = _sha256(engine.store.path.read_bytes())
    return dict(sorted(out.items()))


def _copy(source: Path, destination: Path) -> Path:
    shutil.copytree(source, destination, symlinks=True)
    return destination


def test_every_rendered_op_block_is_as_recorded() -> None:
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))["render"]
    now = rendered()
    assert sorted(now) == sorted(recorded), "the custom-op operations differ from the recorded list (regenerate: see the module docstring)"
    differ = [key for key in now if now[key] != recorded[key]]
    assert not differ, f"rendered differently from the recorded bytes: {differ[:5]} (regenerate when meant: see the module docstring)"


@pytest.mark.parametrize("version", VERSIONS)
def test_apply_writes_the_recorded_bytes(version: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    from .conftest import release_site

    site = _copy(release_site(version, tmp_path_factory, sources_only=True), tmp_path / "site-packages")
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))["apply"][version]
    assert applied(site) == recorded


def write() -> None:
    """Compute the lists on the checkout as it is and write :data:`RECORDED`."""
    from fp4patch.catalog.releases import fetch, unpack

    data: dict = {"render": rendered(), "apply": {}}
    for version in VERSIONS:
        with tempfile.TemporaryDirectory(prefix="fp4patch-rendered-") as scratch:
            site = unpack(fetch(DIST, version), Path(scratch) / "site-packages", sources_only=True)
            data["apply"][version] = applied(site)
    RECORDED.parent.mkdir(exist_ok=True)
    RECORDED.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {RECORDED}: {len(data['render'])} ops, {', '.join(f'{v}: {len(f)} files' for v, f in data['apply'].items())}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    write()
