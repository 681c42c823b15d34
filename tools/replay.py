"""The replay (``python -m tools.compat --replay``, ``make compat``'s second step): each wheel release
after ``--from`` up to ``--to`` as if fp4patch had never seen it.

For each such release, in worker processes: the catalog is cut before it (:func:`cut_catalog`: its releases and
evidence, and every later one's, removed), each default spec is resolved by code on the release's unpacked sources
and, where the code needs it, checked on CPU with this interpreter's torch (:func:`replay_release`). Each cell gets
a tier (:func:`replay_tier`: ``same-code``, ``moved``, ``checked``, ``launcher``, ``carried``, ``refused``,
``declared``, ``by-specifier``) and is compared with the catalog's own target for that release
(:func:`agreement`). The tiers table is written into its section of docs/compatibility.md (:func:`render_replay`,
:func:`write_replay`; the section's markers are :mod:`tools.compat_report`'s, which the sweep keeps).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from fp4patch.catalog.catalog_file import Catalog, load_catalog
from fp4patch.catalog.releases import fetch, unpack
from fp4patch.catalog.spec import load_specs
from fp4patch.engine.coordinator import Engine, select_specs
from fp4patch.errors import Fp4PatchError
from fp4patch.target.environment import current, find_distribution, from_site_packages
from tools.compat_report import REPLAY_BEGIN, REPLAY_END


def cut_catalog(full: Catalog, version) -> Catalog:
    """``full`` as fp4patch had it before ``version`` was released: the releases before it, and the
    evidence of those releases only."""
    from fp4patch.catalog.catalog_file import Evidence

    return Catalog(
        full.distribution,
        [r for r in full.releases if r.version < version],
        full.path,
        {
            k: [Evidence(e.target, tuple(r for r in e.releases if r < version), e.code, e.signature) for e in entries if any(r < version for r in e.releases)]
            for k, entries in full.evidence.items()
        },
    )


def replay_release(version: str, specs_dir: str | None) -> dict[str, Any]:
    """What fp4patch would have done on ``version`` had it been unseen: the catalog cut before it
    (releases and evidence of ``version`` and later removed), each default spec resolved by code
    (:mod:`fp4patch.catalog.evidence`), a ``needs-check`` one checked on CPU with this interpreter's torch.
    Per spec: ``tier`` (``same-code``, ``checked``, ``refused``, ``declared``, ``by-specifier``,
    ``none``), ``detail``, the ``inherited`` target and the catalog's own ``truth`` target, and
    ``agrees``: ``same-target``, ``same-block`` (another target rendering the same op: same name),
    ``different-block`` or ``-`` (nothing applied)."""
    from packaging.version import Version

    from fp4patch.catalog.evidence import CHANGED
    from fp4patch.catalog.evidence import NEEDS_CHECK as NEEDS
    from fp4patch.states import DRIFTED as DRIFT
    from fp4patch.states import NOT_NEEDED as IDLE
    from fp4patch.states import OBSOLETE as GONE

    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    started = time.monotonic()
    v = Version(version)
    full = load_catalog("flashinfer-python", Path(specs_dir) if specs_dir else None)
    cut = cut_catalog(full, v)
    specs = load_specs(Path(specs_dir) if specs_dir else None)
    default = select_specs(specs, None)
    out: dict[str, Any] = {"version": version, "specs": {}, "error": ""}
    try:
        archive = fetch("flashinfer-python", version)
    except Fp4PatchError as exc:
        out["error"] = str(exc)
        return out
    with tempfile.TemporaryDirectory(prefix=f"fp4patch-replay-{version}-") as scratch:
        site = unpack(archive, Path(scratch) / "site-packages", sources_only=True)
        dist = find_distribution(from_site_packages(site), "flashinfer-python")
        evidenced = {k: {e.target for e in entries} for k, entries in full.evidence.items()}
        engine = Engine(dist, [s for s in specs if s.distribution == dist.name], lambda message: None, cut, current(), evidenced=evidenced)
        reports = {s.id: engine.report(s) for s in default}
        if any(r.state == NEEDS for r in reports.values()):
            engine.check_on_cpu(default)
            reports = {s.id: engine.report(s) for s in default}
        for spec in default:
            report, resolution = reports[spec.id], engine.resolve(spec)
            basis = resolution.basis
            truth = spec.targets_for(v)
            kind = basis.kind if basis else "none"
            if report.state in (IDLE, GONE) or any(t.status for t in resolution.targets):
                tier = "declared"
            elif report.state == DRIFT or kind == CHANGED:
                tier = "refused"
            else:
                tier = replay_tier(basis)
            applied = tier in APPLIED_TIERS
            agrees = agreement(spec, resolution, truth) if applied else "-"
            out["specs"][spec.id] = {
                "tier": tier, "detail": report.detail if tier == "refused" else (basis.describe() if basis else ""),
                "inherited": "; ".join(str(t.versions) for t in resolution.targets), "truth": "; ".join(str(t.versions) for t in truth),
                "agrees": agrees,
            }
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


#: The replay's tiers (:func:`replay_tier`), in the tiers table's order; those that apply a target.
TIERS = ["same-code", "moved", "checked", "launcher", "carried", "refused", "declared", "by-specifier"]
APPLIED_TIERS = ("same-code", "moved", "checked", "launcher", "carried", "by-specifier")


def replay_tier(basis) -> str:
    """The tier of a spec applied on ``basis`` (a :class:`~fp4patch.catalog.evidence.Basis`) in the replay: ``carried``
    (a parameter added with a default, carried with the compile-time guard), else ``launcher`` (checked on CPU,
    the outputs the CPU cannot see stood for by the C++ launcher's code), else ``moved`` (the function moved to
    another file), else ``checked`` / ``same-code`` / ``by-specifier`` as the basis's kind (``none``: no basis)."""
    from fp4patch.catalog.evidence import CHECKED

    if basis is None:
        return "none"
    if basis.carried:
        return "carried"
    if basis.launcher:
        return "launcher"
    if basis.moved:
        return "moved"
    return "checked" if basis.kind == CHECKED else basis.kind


def agreement(spec, resolution, truth: list) -> str:
    """How what the replay applied (``resolution``'s targets) compares with the catalog's own ``truth`` targets
    for the release: ``same-target``; ``same-block`` (another target rendering the same op: same name; for a
    carried target, the truth's op with each carried parameter bound to its default, as the guard allows no
    other value, and left out of the release data's parameter lists such as ``mutates``); ``different-block``
    (the applied op differs from the one verified for that release)."""
    from dataclasses import replace

    from fp4patch.ops.cache import render_cached

    def names(targets, drop: frozenset[str] = frozenset()) -> list[str]:
        out = []
        for t in targets:
            if t.status:
                continue
            for kind, kwargs in t.operation_specs:
                if kind != "custom-op":
                    continue
                op = kwargs["target"]
                if op.carried:  # the op as verified: the guard aside
                    op = replace(op, carried=(), carried_release="", carried_from="")
                if drop & set(op.params):  # the truth at the default: the carried parameters absent, named by no release list
                    release = {k: [x for x in v if x not in drop] if isinstance(v, list) else v for k, v in op.release.items()}
                    op = replace(op, params=tuple(p for p in op.params if p not in drop),
                                 defaults={k: v for k, v in op.defaults.items() if k not in drop}, release=release)
                out.append(render_cached(op).op_name)
        return out

    carried = frozenset(name for t in resolution.targets for kind, kw in t.operation_specs if kind == "custom-op" for name, _ in kw["target"].carried)
    same_file = [t.file for t in resolution.targets] == [t.file for t in truth]
    if not carried and same_file and [str(t.versions) for t in resolution.targets] == [str(t.versions) for t in truth]:
        return "same-target"
    return "same-block" if names(resolution.targets) == names(truth, carried) else "different-block"


def render_replay(results: list[dict[str, Any]], spec_ids: list[str], seconds: float) -> str:
    """The replay's Markdown section: per spec, how many steps each tier carried, and each step's cells."""
    tiers = TIERS
    lines = [
        REPLAY_BEGIN,
        "## Each release as if unseen (replay)",
        "",
        f"Generated by `make compat` (`python -m tools.compat --replay`), {len(results)} wheel releases in {seconds:.0f} s.",
        "For each wheel release after the first, the catalog is cut before it (its releases and evidence, and every later",
        "one's, removed) and each default spec is resolved by code as on a release fp4patch does not know: **same-code**",
        "(the code equals a verified release's: applied as verified), **moved** (the same, or checked, at the file the",
        "function moved to), **checked** (the nearest release's target, code differs, same signature, the CPU check",
        "passed: applied), **launcher** (checked, and the outputs the CPU cannot see, allocated by the C++ launcher, stood",
        "for by the launcher's allocation code, equal to the verified release's), **carried** (a parameter added with a",
        "default: the nearest target checked at that default, any other value refused under compile by fp4patch's guard),",
        "**refused** (another signature change, a changed launcher, or a failed check: not applied, nothing written),",
        "**declared** (not needed or unsupported there). `agrees` compares what was applied with the catalog's own target",
        "for the release: the same target, another target rendering the same op (same block; for a carried cell, the",
        "release's own op with the new parameter bound to its default), or a different block (the inherited op differs",
        "from the one verified for that release).",
        "",
        "| spec | " + " | ".join(tiers) + " | applied: same target / same block / different block |",
        "|---|" + "---|" * (len(tiers) + 1),
    ]
    totals = {t: 0 for t in tiers}
    for spec_id in spec_ids:
        cells = [r["specs"].get(spec_id) for r in results if not r["error"]]
        counts = {t: sum(1 for c in cells if c and c["tier"] == t) for t in tiers}
        for t in tiers:
            totals[t] += counts[t]
        agree = [sum(1 for c in cells if c and c["agrees"] == a) for a in ("same-target", "same-block", "different-block")]
        lines.append(f"| `{spec_id}` | " + " | ".join(str(counts[t]) for t in tiers) + f" | {agree[0]} / {agree[1]} / {agree[2]} |")
    lines.append("| all | " + " | ".join(str(totals[t]) for t in tiers) + " | |")
    carried = sum(1 for r in results if not r["error"] and all(c["tier"] in (*APPLIED_TIERS, "declared") for c in r["specs"].values()))
    lines += ["", f"Steps in which every default spec was carried (applied or declared, none refused): {carried} of {len([r for r in results if not r['error']])}.", ""]
    lines += ["| release | " + " | ".join(f"`{s}`" for s in spec_ids) + " |", "|---|" + "---|" * len(spec_ids)]
    for r in results:
        if r["error"]:
            lines.append(f"| {r['version']} | " + " | ".join(["error"] * len(spec_ids)) + " |")
            continue
        row = []
        for spec_id in spec_ids:
            c = r["specs"].get(spec_id)
            row.append("-" if not c else c["tier"] + ("" if c["agrees"] in ("-", "same-target") else f" ({c['agrees']})"))
        lines.append(f"| {r['version']} | " + " | ".join(row) + " |")
    refused = [(r["version"], s, c["detail"]) for r in results if not r["error"] for s, c in r["specs"].items() if c["tier"] == "refused"]
    if refused:
        lines += ["", "Refused, with the reason fp4patch gave:", ""]
        lines += [f"- {v} `{s}`: {' '.join(d.split())[:400]}" for v, s, d in refused]
    lines.append(REPLAY_END)
    return "\n".join(lines) + "\n"


def write_replay(path: Path, section: str) -> None:
    """Put the replay ``section`` into ``path`` (replacing an earlier one, else appended)."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if REPLAY_BEGIN in text and REPLAY_END in text:
        head, _, rest = text.partition(REPLAY_BEGIN)
        _, _, tail = rest.partition(REPLAY_END)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text, encoding="utf-8")


def replay(args: argparse.Namespace) -> int:
    """``--replay``: every wheel release after ``--from`` up to ``--to``, as if unseen (:func:`replay_release`)."""
    from packaging.version import Version

    catalog = load_catalog("flashinfer-python", args.specs_dir)
    last = Version(args.last) if args.last else catalog.latest.version
    versions = [str(r.version) for r in catalog.releases if r.archive == "wheel" and Version(args.first) < r.version <= last]
    specs = [s for s in select_specs(load_specs(args.specs_dir), None)]
    started = time.monotonic()
    results = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(replay_release, v, str(args.specs_dir) if args.specs_dir else None) for v in versions]
        for future in futures:
            result = future.result()
            results.append(result)
            cells = " ".join(f"{k}={c['tier']}" for k, c in result["specs"].items())
            print(f"{result['version']:>13} {result.get('seconds', 0):6.1f}s {result['error'] or cells}", flush=True)
    section = render_replay(results, [s.id for s in specs], time.monotonic() - started)
    write_replay(args.output, section)
    print(f"wrote the replay of {len(results)} releases into {args.output}")
    return 0
