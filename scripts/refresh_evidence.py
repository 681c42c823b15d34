#!/usr/bin/env python3
"""Take again the fingerprints the catalog's evidence records, after a spec's ``mirrors`` changed.

``make compat`` writes the evidence (``patches/flashinfer-python/catalog.json``: per spec, the code each
target was verified on) while it applies, traces and reverts every release. When a spec only gains or
loses a piece in ``mirrors`` (issue 24: the C++ launcher code of the TRT-LLM-Gen MoE ops), the releases
it was verified on stay verified; what changes is what is recorded about their code. This script
fingerprints each listed release of each evidence entry of the named specs again
(:func:`fp4patch.catalog.fingerprint.fingerprint` on the release's unpacked sources: Python and the C++ files the
mirrors name) and writes the entries back, split where releases that shared one code before now differ
(and merged where they agree). Releases, targets and signatures are kept; nothing is verified anew.

    python scripts/refresh_evidence.py trtllm-fp4-block-scale-moe-fullgraph [...]   # or --all

Exit codes: 0 written; 2 an unknown spec id or a release that cannot be fetched (nothing written).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fp4patch.catalog.catalog_file import evidence_text, load_catalog
from fp4patch.engine.files import atomic_write
from fp4patch.errors import Fp4PatchError
from fp4patch.catalog.fingerprint import ModuleReader, fingerprint, native_files
from fp4patch.catalog.releases import fetch, unpack
from fp4patch.catalog.spec import load_specs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", help="spec ids whose evidence to fingerprint again")
    parser.add_argument("--all", action="store_true", help="every spec with evidence")
    args = parser.parse_args(argv)
    catalog = load_catalog("flashinfer-python")
    specs = {s.id: s for s in load_specs(None)}
    ids = sorted(catalog.evidence) if args.all else args.specs
    unknown = [i for i in ids if i not in specs or i not in catalog.evidence]
    if unknown or not ids:
        print(f"refresh_evidence: {unknown[0] if unknown else '(none)'}: not a spec with evidence in {catalog.path}; name one, or --all", file=sys.stderr)
        return 2
    keep = frozenset(native_files(specs.values()))
    evidence = dict(catalog.evidence)
    with tempfile.TemporaryDirectory(prefix="fp4patch-refresh-") as scratch:
        readers: dict[str, ModuleReader] = {}

        def reader(version: str) -> ModuleReader:
            if version not in readers:
                site = unpack(fetch("flashinfer-python", version), Path(scratch) / version, sources_only=True, keep=keep)
                readers[version] = ModuleReader(site)
            return readers[version]

        for spec_id in ids:
            by_target = {str(t.versions): t for t in specs[spec_id].targets if not t.status}
            rows: dict[tuple, list] = {}
            for entry in catalog.evidence[spec_id]:
                target = by_target.get(entry.target)
                if target is None:  # a target the spec no longer has: kept as it was
                    rows.setdefault((entry.target, tuple(entry.code.items()), entry.signature, id(entry)), []).append((entry, None))
                    continue
                for version in entry.releases:
                    try:
                        pieces = fingerprint(reader(str(version)), target).pieces
                    except Fp4PatchError as exc:
                        print(f"refresh_evidence: {spec_id} {version}: {exc}", file=sys.stderr)
                        return 2
                    rows.setdefault((entry.target, tuple(pieces.items()), entry.signature), []).append((entry, version))
            out = []
            for key, members in rows.items():
                first = members[0][0]
                if members[0][1] is None:
                    out.append(first)
                    continue
                out.append(replace(first, releases=tuple(sorted(v for _, v in members)), code=dict(key[1])))
            evidence[spec_id] = sorted(out, key=lambda e: e.releases[0])
            print(f"{spec_id}: {len(catalog.evidence[spec_id])} -> {len(evidence[spec_id])} evidence entries")
    atomic_write(catalog.path, evidence_text(catalog.path, evidence).encode("utf-8"))
    print(f"wrote {catalog.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
