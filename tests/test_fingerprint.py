"""Fingerprints of the code a target depends on, and the catalog's evidence against the real releases.

Before/after pairs for the canonical form (:mod:`fp4patch.catalog.fingerprint`): what must not change a
digest (comments, formatting, docstrings, a definition moved to another module unchanged) and what
must (a default, a decorator, a statement). Then the evidence ``make compat`` recorded in
``catalog.json``: each entry matches the real release's code (0.6.0, 0.7.4 and the other releases
``make test`` unpacks; every release in ``make test-eras``), and the entries are consistent with the
specs (every patching target has evidence, no two targets were verified on the same code).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fp4patch.catalog.catalog_file import load_catalog
from fp4patch.catalog.evidence import installed_signature
from fp4patch.catalog.fingerprint import MISSING, ModuleReader, fingerprint, signature_changes
from fp4patch.catalog.spec import load_specs

from .conftest import DIST, SPECS_DIR, release_params, release_site

BASE = '''
import functools


@functools.cache
def get_module():
    def kernel_entry(x, k: int = 16):
        """Allocate."""
        out = torch.empty((x.shape[0], k // 2), dtype=torch.uint8)  # packed
        return out

    return kernel_entry


def wrapper(x, k=16, *, backend="auto"):
    """The wrapper."""
    if backend not in ("auto", "cuda"):
        raise ValueError(f"Unknown backend: {backend}")
    return get_module()(x, k)
'''

SAME = [  # each gives the same digests as BASE
    ("comments and blank lines", BASE.replace("  # packed", "").replace("        return out", "\n        # done\n\n        return out")),
    ("line breaks", BASE.replace('raise ValueError(f"Unknown backend: {backend}")', 'raise ValueError(\n            f"Unknown backend: {backend}"\n        )')),
    ("docstrings", BASE.replace('"""The wrapper."""', '"""Quantize, with a longer docstring."""').replace('"""Allocate."""', '"""Allocate the outputs."""')),
    ("quotes", BASE.replace('backend="auto"', "backend='auto'")),
]
DIFFERENT = [  # each changes the digest of the named piece
    ("a default", BASE.replace('backend="auto"', 'backend="cuda"'), "wrapper"),
    ("a decorator", BASE.replace("def wrapper(", "@functools.cache\ndef wrapper("), "wrapper"),
    ("an allocation", BASE.replace("k // 2", "(k + 1) // 2"), "get_module.kernel_entry"),
    ("an error message", BASE.replace("Unknown backend", "Unsupported backend"), "wrapper"),
]


class _Target:
    """A stand-in spec target: one custom-op-like operation on ``mod.py`` with mirrors."""

    file = "mod.py"

    def __init__(self, mirrors=("get_module.kernel_entry",)):
        self.operation_specs = [("insert-at-function-start", {"function": "wrapper", "mirrors": tuple(mirrors)})]


def _pieces(tmp_path: Path, text: str, name: str = "a") -> dict[str, str]:
    site = tmp_path / name
    site.mkdir()
    (site / "mod.py").write_text(text, encoding="utf-8")
    return fingerprint(ModuleReader(site), _Target()).pieces


@pytest.mark.parametrize("name, text", SAME, ids=[n for n, _ in SAME])
def test_formatting_comments_and_docstrings_keep_the_digest(name: str, text: str, tmp_path: Path) -> None:
    assert _pieces(tmp_path, text, "after") == _pieces(tmp_path, BASE, "before")


@pytest.mark.parametrize("name, text, piece", DIFFERENT, ids=[n for n, _, _ in DIFFERENT])
def test_a_code_change_changes_the_digest_of_its_piece(name: str, text: str, piece: str, tmp_path: Path) -> None:
    before, after = _pieces(tmp_path, BASE, "before"), _pieces(tmp_path, text, "after")
    assert [p for p in before if before[p] != after[p]] == [piece]


def test_a_missing_piece_and_a_definition_moved_unchanged(tmp_path: Path) -> None:
    site = tmp_path / "moved"
    (site / "pkg").mkdir(parents=True)
    inner = BASE.split("def wrapper")[0]
    (site / "pkg" / "kernels.py").write_text(inner, encoding="utf-8")
    (site / "mod.py").write_text("from .pkg.kernels import get_module\n\n\ndef wrapper" + BASE.split("def wrapper")[1], encoding="utf-8")
    moved = fingerprint(ModuleReader(site), _Target()).pieces
    assert moved == _pieces(tmp_path, BASE)  # followed through `from ... import`: same code, same digest
    assert fingerprint(ModuleReader(site), _Target(["nowhere"])).pieces["nowhere"] == MISSING


def test_signature_changes_name_each_parameter() -> None:
    old = [["x", "positional", ""], ["k", "positional", "16"], ["backend", "keyword-only", "'auto'"]]
    assert signature_changes(old, old, "f") == []
    assert signature_changes([*old, ["y", "keyword-only", "0"]], old, "f") == ["f(): parameter 'y' added"]
    assert signature_changes(old[:2], old, "f") == ["f(): parameter 'backend' removed"]
    assert signature_changes([old[0], ["size", "positional", "16"], old[2]], old, "f") == ["f(): parameter 'k' renamed to 'size'"]
    assert signature_changes([old[0], ["k", "positional", "32"], old[2]], old, "f") == ["f(): default of 'k' is 32, was 16"]
    assert signature_changes([old[0], old[1], ["backend", "positional", "'auto'"]], old, "f") == ["f(): parameter 'backend' is positional, was keyword-only"]


# --------------------------------------------------------------------------- the catalog's evidence
SPECS = [s for s in load_specs(SPECS_DIR) if s.distribution == DIST]
CATALOG = load_catalog(DIST)
EVIDENCE_RELEASES = sorted({str(v) for entries in CATALOG.evidence.values() for e in entries for v in e.releases if CATALOG.get(v).archive == "wheel"},
                           key=lambda v: CATALOG.get(v).version)


@pytest.mark.parametrize("version", release_params(EVIDENCE_RELEASES, core=("0.5.3", "0.6.0", "0.6.18.post1", "0.7.4")))
def test_each_recorded_fingerprint_matches_the_real_release(version: str, tmp_path_factory) -> None:
    """What ``make compat`` recorded is the code of the real release (downloaded, unpacked): the
    evidence cannot go stale when a spec's mirrors or targets change without a new sweep."""
    site = release_site(version, tmp_path_factory, sources_only=True)
    reader = ModuleReader(site)
    checked = 0
    for spec in SPECS:
        for entry in CATALOG.evidence.get(spec.id, []):
            if CATALOG.get(version).version not in entry.releases:
                continue
            (target,) = [t for t in spec.targets if str(t.versions) == entry.target]
            assert fingerprint(reader, target).pieces == entry.code, f"{spec.id} on {version}: run make compat"
            assert [list(r) for r in entry.signature] == installed_signature(reader, target), f"{spec.id} on {version}"
            assert MISSING not in {entry.code[p] for p in entry.code if p == next(iter(entry.code))}, "the edited function itself is missing"
            checked += 1
    assert checked, f"no evidence recorded for {version}"


def test_the_evidence_is_consistent_with_the_specs() -> None:
    """Every evidence entry names an existing target containing each of its releases; every
    patching target of a built-in spec has evidence (so a release the catalog does not list is
    placed by code, never by a specifier written before it existed); two targets of a spec verified
    on the same code render the same op (else its mirrors miss what tells them apart: a release with
    that code could take the wrong one); every target places at least one release of the catalog."""
    for spec in SPECS:
        entries = CATALOG.evidence.get(spec.id, [])
        by_target = {str(t.versions): t for t in spec.targets}
        for entry in entries:
            assert entry.target in by_target, f"{spec.id}: evidence for a target the spec no longer has: {entry.target}"
            assert all(by_target[entry.target].contains(v) for v in entry.releases), f"{spec.id} {entry.target}"
        for target in spec.targets:
            assert any(target.contains(r.version) for r in CATALOG.releases), f"{spec.id}: target {target.versions} places no known release"
            if not target.status and any(CATALOG.get(r.version).archive == "wheel" for r in CATALOG.releases if target.contains(r.version)):
                assert any(e.target == str(target.versions) for e in entries), f"{spec.id}: no evidence for {target.versions}; run make compat"
        codes: dict[tuple, str] = {}
        for entry in entries:
            key = tuple(sorted(entry.code.items()))
            other = codes.setdefault(key, entry.target)
            if other != entry.target:
                ops = [[r.op_name for r in by_target[t].custom_ops] for t in (other, entry.target)]
                assert ops[0] == ops[1], f"{spec.id}: {other} and {entry.target} verified on the same code render other ops {ops}"


def test_a_function_that_moved_to_another_module_is_placed_where_it_lives_now(tmp_path_factory) -> None:
    """0.6.7 as if unseen (issue 24): fp4_quantize left flashinfer/fp4_quantization.py (which only re-exports it)
    for flashinfer/quantization/; the nearest target (0.6.6's) is taken at the new file, its pieces read there
    (fp4_quantize's own code is 0.6.6's; its callers changed, so it waits for the CPU check), and it says so."""
    from packaging.version import Version

    from fp4patch.catalog.evidence import NEEDS_CHECK, resolve
    from tools.replay import cut_catalog

    version = Version("0.6.7")
    spec = next(s for s in SPECS if s.id == "fp4-quantize-fullgraph")
    evidenced = {e.target for e in CATALOG.evidence[spec.id]}
    reader = ModuleReader(release_site("0.6.7", tmp_path_factory, sources_only=True))
    resolution = resolve(spec, version, cut_catalog(CATALOG, version), reader, evidenced)
    basis = resolution.basis
    assert basis.kind == NEEDS_CHECK and basis.release == "0.6.6", basis
    assert basis.moved == ("flashinfer/fp4_quantization.py", "flashinfer/quantization/fp4_quantization.py")
    assert [t.file for t in resolution.targets] == ["flashinfer/quantization/fp4_quantization.py"]
    assert "fp4_quantize" not in basis.changes and "nvfp4_quantize" in basis.changes, basis.changes
    assert "moved from flashinfer/fp4_quantization.py to flashinfer/quantization/fp4_quantization.py" in basis.describe()