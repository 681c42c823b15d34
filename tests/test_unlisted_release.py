"""A FlashInfer release fp4patch does not list (issue 16): real wheels relabelled, and synthetic changes.

A relabelled release is a real wheel's sources with another version in its ``.dist-info`` (the
code untouched): 0.7.4 as 0.7.5, 0.7.5rc1, a dev nightly and a local label; 0.6.18.post1 as 0.6.19 and
as a post release. Each spec must take the target verified on the same code and say so; a release
where a function changed must be refused naming the function and what changed, nothing written.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from .conftest import release_site, run_cli, snapshot

DEFAULT_PATCHING = {  # default specs that patch a file on 0.7.4 (flashinfer-fp4-quantize-op-keywords is obsolete there)
    "block-scale-interleave-fullgraph", "bmm-fp8-fullgraph", "cuda-version-from-torch", "cutlass-fused-moe-fullgraph", "fp4-quantize-fullgraph", "fused-add-rmsnorm-quant-fullgraph",
    "mm-fp4-fullgraph", "mxfp8-grouped-quantize-fullgraph", "mxfp8-quantize-fullgraph", "nvfp4-batched-quantize-fullgraph",
    "nvfp4-quantize-fullgraph", "rmsnorm-quant-fullgraph", "scaled-fp4-grouped-quantize-fullgraph", "silu-and-mul-mxfp8-experts-quantize-fullgraph",
    "silu-and-mul-scaled-nvfp4-experts-quantize-fullgraph", "trtllm-fp4-block-scale-moe-fullgraph",
    "trtllm-fp4-block-scale-routed-moe-fullgraph", "trtllm-fp8-block-scale-moe-fullgraph", "trtllm-fp8-per-tensor-scale-moe-fullgraph",
}


def relabel(source: Path, target: Path, version: str) -> Path:
    """``target``: a hard-linked copy of the unpacked release ``source`` whose ``.dist-info`` says
    ``version`` (folder name, METADATA, RECORD rewritten as real files); the code is untouched."""
    shutil.copytree(source, target, symlinks=True, copy_function=os.link)
    (info,) = target.glob("flashinfer_python-*.dist-info")
    old = info.name.removeprefix("flashinfer_python-").removesuffix(".dist-info")
    new_info = target / f"flashinfer_python-{version}.dist-info"
    info.rename(new_info)
    for name, old_text, new_text in (("METADATA", f"Version: {old}\n", f"Version: {version}\n"), ("RECORD", info.name, new_info.name)):
        path = new_info / name
        text = path.read_text(encoding="utf-8")
        assert old_text in text
        path.unlink()  # a hard link into the shared unpack: replace, never write through
        path.write_text(text.replace(old_text, new_text), encoding="utf-8")
    return target


def replace_in(site: Path, relative: str, old: str, new: str) -> None:
    """Edit one source file of a linked copy (replacing the link by a new file), and its RECORD
    line, as a real next release's wheel would have it."""
    import base64
    import hashlib

    path = site / relative
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {relative}"
    path.unlink()
    data = text.replace(old, new, 1).encode("utf-8")
    path.write_bytes(data)
    (record,) = site.glob("flashinfer_python-*.dist-info/RECORD")
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    lines = [f"{relative},sha256={digest},{len(data)}" if line.startswith(f"{relative},") else line for line in record.read_text().splitlines()]
    record.unlink()
    record.write_text("\n".join(lines) + "\n")


def status(site: Path) -> dict[str, dict]:
    done = run_cli("status", "--site-packages", str(site), "--json", check=True)
    return {r["id"]: r for r in json.loads(done.stdout)["specs"]}


@pytest.mark.parametrize("source, version", [("0.7.4", "0.7.5"), ("0.6.18.post1", "0.6.19")])
def test_a_relabelled_release_applies_as_verified_on_the_same_code_and_reverts_byte_identical(
    source: str, version: str, tmp_path: Path, tmp_path_factory
) -> None:
    site = relabel(release_site(source, tmp_path_factory, sources_only=True), tmp_path / "site", version)
    pristine = snapshot(site)
    reports = status(site)
    patching = {i for i, r in reports.items() if r["default"] and r["state"] == "applicable"}
    assert patching >= ({s for s in DEFAULT_PATCHING if "mxfp8-experts" not in s} if source != "0.7.4" else DEFAULT_PATCHING), reports
    for spec_id in patching:
        basis = reports[spec_id]["basis"]
        assert (basis["kind"], basis["release"]) == ("same-code", source), (spec_id, basis)
        assert basis["description"] == f"as verified on {source}, same code"
    done = run_cli("apply", "--site-packages", str(site))
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())  # long lines wrap at the log width
    assert f"{version}: " in said and f"as verified on {source}, same code" in said
    assert "verify --opcheck" in said  # the kernels are not fingerprinted: said once
    manifest = json.loads((site / ".fp4patch" / "flashinfer-python" / "manifest.json").read_text())
    assert {k for k, b in manifest["basis"].items() if b["kind"] == "same-code"} >= patching
    verified = run_cli("verify", "--site-packages", str(site))
    assert verified.returncode == 0 and "verify: ok" in verified.stdout, verified.stdout + verified.stderr
    after = status(site)
    assert all(after[i]["state"] == "applied" and after[i]["basis"]["kind"] == "same-code" for i in patching)
    run_cli("revert", "--site-packages", str(site), check=True)
    assert snapshot(site) == pristine


@pytest.mark.parametrize("version", ["0.8.0.dev20261201", "0.7.5rc1", "0.7.4+cu130", "0.7.4.post1"])
def test_pre_dev_post_and_local_labels_are_placed_by_their_code(version: str, tmp_path: Path, tmp_path_factory) -> None:
    """Every kind of version the catalog does not list (a nightly, a release candidate, a local
    label, a post release) takes 0.7.4's targets on the evidence of its code, as the relabel above."""
    site = relabel(release_site("0.7.4", tmp_path_factory, sources_only=True), tmp_path / "site", version)
    reports = status(site)
    bases = {i: (r["state"], r["basis"]["kind"], r["basis"]["release"]) for i, r in reports.items() if i in DEFAULT_PATCHING}
    assert set(bases.values()) == {("applicable", "same-code", "0.7.4")}, bases


@pytest.mark.slow
def test_the_next_release_with_identical_code_passes_verify_trace(tmp_path: Path, tmp_path_factory) -> None:
    """Issue 16's "done when": 0.7.4 relabelled 0.7.5, `apply` and then `verify --trace` (CPU, fake CUDA tensors)."""
    site = relabel(release_site("0.7.4", tmp_path_factory, bytecode=True), tmp_path / "site", "0.7.5")
    run_cli("apply", "--site-packages", str(site), check=True)
    done = run_cli("verify", "--site-packages", str(site), "--trace")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "fullgraph trace: 33/33 cases passed" in done.stdout and "verify: ok" in done.stdout


def test_a_new_parameter_is_refused_naming_the_function_and_nothing_is_written(tmp_path: Path, tmp_path_factory) -> None:
    """A parameter added without a default (every call must pass it, fp4patch's op does not take it): refused.
    One added with a default is carried instead (tests/test_next_release.py)."""
    site = relabel(release_site("0.7.4", tmp_path_factory, sources_only=True), tmp_path / "site", "0.7.5")
    replace_in(
        site, "flashinfer/quantization/fp8_quantization.py",
        "    *,\n    batch_invariant: bool = False,\n) -> Tuple[torch.Tensor, torch.Tensor]:",
        "    *,\n    batch_invariant: bool = False,\n    scale_rounding: str,\n) -> Tuple[torch.Tensor, torch.Tensor]:",
    )
    before = snapshot(site)
    reports = status(site)
    mxfp8 = reports["mxfp8-quantize-fullgraph"]
    assert mxfp8["state"] == "drifted" and mxfp8["basis"]["kind"] == "changed"
    assert "mxfp8_quantize(): parameter 'scale_rounding' added without a default" in mxfp8["detail"]
    assert "(against 0.7.4, the nearest verified release)" in mxfp8["detail"]
    assert reports["fp4-quantize-fullgraph"]["basis"]["kind"] == "same-code"  # the others keep their evidence
    done = run_cli("apply", "--site-packages", str(site))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert "mxfp8-quantize-fullgraph: drifted" in lines[0] and "parameter 'scale_rounding' added" in lines[0]
    assert "nothing written" in lines[0] and "--skip mxfp8-quantize-fullgraph" in lines[0]
    assert snapshot(site) == before and not (site / ".fp4patch").exists()
    assert "--show-changes" in lines[0]
    shown = run_cli("verify", "--site-packages", str(site), "--show-changes")
    assert "--- 0.7.4/flashinfer/quantization/fp8_quantization.py (mxfp8_quantize)" in shown.stderr
    assert "+    scale_rounding: str," in shown.stderr and shown.returncode == 1
    # left out by name: the rest applies, and the changed function is never patched with the old schema
    done = run_cli("apply", "--site-packages", str(site), "--skip", "mxfp8-quantize-fullgraph")
    assert done.returncode == 0, done.stderr
    text = (site / "flashinfer/quantization/fp8_quantization.py").read_text()
    assert "_fp4patch_register_mxfp8_grouped_quantize" in text and "_fp4patch_register_mxfp8_quantize()" not in text
    assert run_cli("verify", "--site-packages", str(site), "--skip", "mxfp8-quantize-fullgraph").returncode == 0
    assert run_cli("verify", "--site-packages", str(site)).returncode == 1  # the default selection still names it
    run_cli("revert", "--site-packages", str(site), check=True)
    assert snapshot(site) == before


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("backend: str = \"auto\",\n    # Appended last", "backend: str = \"cuda\",\n    # Appended last", "default of 'backend' is 'cuda', was 'auto'"),
        ("    global_scale: Optional[torch.Tensor] = None,\n    sf_vec_size: int = 16,\n    sf_use_ue8m0",
         "    scale: Optional[torch.Tensor] = None,\n    sf_vec_size: int = 16,\n    sf_use_ue8m0", "parameter 'global_scale' renamed to 'scale'"),
        ("    *,\n    batch_invariant: bool = False,\n) -> Tuple[torch.Tensor, torch.Tensor]:\n    r\"\"\"Quantize input tensor to FP4",
         ") -> Tuple[torch.Tensor, torch.Tensor]:\n    r\"\"\"Quantize input tensor to FP4", "parameter 'batch_invariant' removed"),
    ],
    ids=["default", "renamed", "removed"],
)
def test_a_signature_change_is_named(old: str, new: str, expected: str, tmp_path: Path, tmp_path_factory) -> None:
    site = relabel(release_site("0.7.4", tmp_path_factory, sources_only=True), tmp_path / "site", "0.7.5")
    replace_in(site, "flashinfer/quantization/fp4_quantization.py", old, new)
    report = status(site)["fp4-quantize-fullgraph"]
    assert report["state"] == "drifted" and f"fp4_quantize(): {expected}" in report["detail"], report["detail"]


def test_a_comment_and_reformatting_keep_the_evidence(tmp_path: Path, tmp_path_factory) -> None:
    """Comments, blank lines, line breaks and docstrings are not code: the fingerprint stays."""
    site = relabel(release_site("0.7.4", tmp_path_factory, sources_only=True), tmp_path / "site", "0.7.5")
    replace_in(site, "flashinfer/quantization/fp4_quantization.py", "    if sf_vec_size != 16 and sf_vec_size != 32:\n",
               "    # a comment a new release added\n\n    if (\n        sf_vec_size != 16\n        and sf_vec_size != 32\n    ):\n")
    replace_in(site, "flashinfer/quantization/fp4_quantization.py", 'r"""Quantize input tensor to FP4 format.', 'r"""Quantise an input tensor to FP4.')
    report = status(site)["fp4-quantize-fullgraph"]
    assert report["state"] == "applicable" and report["basis"]["kind"] == "same-code", report


def test_a_changed_mirror_needs_a_check_and_diff_says_so(tmp_path: Path, tmp_path_factory) -> None:
    """The scale-factor size helper the fakes mirror changed: the specs using it need a CPU check
    (status says which piece differs); the others keep their evidence."""
    site = relabel(release_site("0.7.4", tmp_path_factory, sources_only=True), tmp_path / "site", "0.7.5")
    replace_in(site, "flashinfer/quantization/fp4_quantization.py", "def _compute_swizzled_layout_sf_size(total_row, total_column, row_size=128):\n",
               "def _compute_swizzled_layout_sf_size(total_row, total_column, row_size=128):\n    total_row = total_row + 0\n")
    reports = status(site)
    batched = reports["nvfp4-batched-quantize-fullgraph"]
    assert batched["state"] == "needs-check" and "_compute_swizzled_layout_sf_size" in batched["basis"]["changes"], batched
    assert "`fp4patch apply` checks it on CPU before patching" in batched["detail"]
    assert reports["bmm-fp8-fullgraph"]["basis"]["kind"] == "same-code"
    done = run_cli("diff", "--site-packages", str(site), "--spec", "nvfp4-batched-quantize-fullgraph")
    assert done.returncode == 0 and "+_fp4patch_nvfp4_batched_quantize_entry = " in done.stdout
    assert "checks them on CPU first" in done.stderr


def test_a_partly_covered_known_release_applies_what_holds(tmp_path: Path, tmp_path_factory) -> None:
    """0.5.3: mm_fp4 and the MoE specs are declared unsupported; the default apply patches
    fp4_quantize and the quantizers, lists the others with their reasons, exit 0. --strict, or
    naming an unsupported spec, fails with nothing written."""
    site = tmp_path / "site"
    shutil.copytree(release_site("0.5.3", tmp_path_factory, sources_only=True), site, symlinks=True, copy_function=os.link)
    before = snapshot(site)
    for args in (("--strict",), ("--spec", "mm-fp4-fullgraph")):
        done = run_cli("apply", "--site-packages", str(site), *args)
        assert done.returncode == 1 and "mm-fp4-fullgraph: unsupported" in done.stderr and "nothing written" in done.stderr, done.stderr
        assert snapshot(site) == before
    done = run_cli("apply", "--site-packages", str(site), "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert "flashinfer/fp4_quantization.py" in payload["written"]
    assert {e["id"] for e in payload["left_out"]} == {
        "mm-fp4-fullgraph", "cutlass-fused-moe-fullgraph", "trtllm-fp4-block-scale-moe-fullgraph", "trtllm-fp4-block-scale-routed-moe-fullgraph",
        "trtllm-fp8-block-scale-moe-fullgraph", "trtllm-fp8-per-tensor-scale-moe-fullgraph"}
    assert "_fp4patch_register_fp4_quantize" in (site / "flashinfer/fp4_quantization.py").read_text()
    manifest = json.loads((site / ".fp4patch" / "flashinfer-python" / "manifest.json").read_text())
    assert "mm-fp4-fullgraph" not in manifest["specs"] and "fp4-quantize-fullgraph" in manifest["specs"]
    assert run_cli("verify", "--site-packages", str(site)).returncode == 0
    strict = run_cli("verify", "--site-packages", str(site), "--strict")
    assert strict.returncode == 1 and "unsupported: cutlass-fused-moe-fullgraph" in strict.stdout
    run_cli("revert", "--site-packages", str(site), check=True)
    assert snapshot(site) == before


def relabelled_wheel(directory: Path, launcher: bool = True) -> Path:
    """0.7.4's wheel relabelled 0.7.5: its Python sources, its .dist-info and (``launcher``) the C++ files the specs'
    fakes mirror (:func:`fp4patch.catalog.releases.fingerprinted_native`), as the next release's wheel would hold them."""
    import zipfile

    from fp4patch.catalog.releases import fetch, fingerprinted_native

    wheel = directory / "flashinfer_python-0.7.5-py3-none-any.whl"
    with zipfile.ZipFile(fetch("flashinfer-python", "0.7.4")) as old, zipfile.ZipFile(wheel, "w") as new:
        for name in old.namelist():
            if name.endswith(".py") or ".dist-info/" in name or (launcher and name in fingerprinted_native()):
                data = old.read(name)
                if name.endswith("dist-info/METADATA"):
                    data = data.replace(b"\nVersion: 0.7.4\n", b"\nVersion: 0.7.5\n")
                new.writestr(name.replace("flashinfer_python-0.7.4.dist-info", "flashinfer_python-0.7.5.dist-info"), data)
    return wheel


def test_verify_against_a_relabelled_wheel_reports_the_evidence_before_the_upgrade(tmp_path: Path) -> None:
    """``verify --wheel`` of the next release (0.7.4's Python sources and the C++ launcher files the specs'
    fakes mirror, relabelled 0.7.5): ok, each spec as verified on 0.7.4 — the same answers ``apply`` gives after
    the upgrade."""
    done = run_cli("verify", "--wheel", str(relabelled_wheel(tmp_path)), "--json")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    payload = json.loads(done.stdout)
    assert payload["version"] == "0.7.5" and payload["catalog"]["where"] == "newer" and payload["ok"]
    bases = {r["id"]: r["basis"]["description"] for r in payload["specs"] if r["id"] in DEFAULT_PATCHING}
    assert set(bases.values()) == {"as verified on 0.7.4, same code"}, bases
    assert {r["id"] for r in payload["after_apply"] if r["state"] == "applied"} >= DEFAULT_PATCHING


@pytest.mark.slow
def test_a_wheel_without_the_launcher_sources_is_refused_naming_the_missing_file(tmp_path: Path) -> None:
    """The same relabelled wheel without FlashInfer's C++ launcher source: the TRT-LLM-Gen MoE specs, whose
    do_finalize=False outputs only that file says how to size, are refused naming the missing file and what to do
    (not "the code changed"); the specs that do not mirror it are as verified on 0.7.4."""
    done = run_cli("verify", "--wheel", str(relabelled_wheel(tmp_path, launcher=False)))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr
    launcher = "flashinfer/data/csrc/trtllm_fused_moe_kernel_launcher.cu"
    refused = [line for line in done.stdout.splitlines() if line.startswith("will not apply:")]
    assert refused and all("moe" in line for line in refused), refused
    assert f"is missing from this install: {launcher}" in " ".join(done.stdout.split()), done.stdout[-3000:]
    assert "reinstall flashinfer-python" in done.stdout and "changed since 0.7.4" not in done.stdout


@pytest.mark.slow
def test_a_change_the_fake_does_not_depend_on_is_checked_on_cpu_and_applied(tmp_path: Path, tmp_path_factory) -> None:
    """The next release adds a log line to mxfp8_quantize (its code differs from every verified
    release, its signature does not): apply checks it on CPU — the fake against the wrapper's own
    allocation over the case grid, the fullgraph trace — and applies it "checked on CPU"."""
    site = relabel(release_site("0.7.4", tmp_path_factory, sources_only=True), tmp_path / "site", "0.7.5")
    replace_in(site, "flashinfer/quantization/fp8_quantization.py", "    sf_vec_size = 32\n\n    if sf_swizzle_layout is None:",
               "    sf_vec_size = 32\n    __import__(\"logging\").getLogger(__name__).debug(\"mxfp8_quantize %s\", tuple(input.shape))\n\n"
               "    if sf_swizzle_layout is None:")
    before = snapshot(site)
    assert status(site)["mxfp8-quantize-fullgraph"]["state"] == "needs-check"
    done = run_cli("apply", "--site-packages", str(site), "--spec", "mxfp8-quantize-fullgraph")
    assert done.returncode == 0, done.stderr
    assert "checking it on CPU in a temporary copy" in done.stderr
    assert "0.7.5: mxfp8-quantize-fullgraph checked on CPU for 0.7.5 (0.7.4's target; differs in mxfp8_quantize)" in done.stdout
    report = status(site)["mxfp8-quantize-fullgraph"]
    assert report["state"] == "applied" and report["basis"]["kind"] == "checked"
    assert run_cli("verify", "--site-packages", str(site), "--spec", "mxfp8-quantize-fullgraph").returncode == 0
    run_cli("revert", "--site-packages", str(site), check=True)
    assert snapshot(site) == before


@pytest.mark.slow
def test_a_changed_allocation_the_fake_mirrors_is_refused_naming_the_output(tmp_path: Path, tmp_path_factory) -> None:
    """The next release allocates mxfp8_quantize's linear scale factors twice as large: the CPU
    check finds the output that differs, apply refuses the spec, nothing is written."""
    site = relabel(release_site("0.7.4", tmp_path_factory, sources_only=True), tmp_path / "site", "0.7.5")
    replace_in(site, "flashinfer/quantization/fp8_quantization.py", "                out_sf_size = m * padded_k // 32\n",
               "                out_sf_size = m * padded_k // 16\n")
    before = snapshot(site)
    report = status(site)["mxfp8-quantize-fullgraph"]
    assert report["state"] == "needs-check" and "get_mxfp8_quantization_sm100_module.mxfp8_quantize_sm100" in report["basis"]["changes"]
    done = run_cli("apply", "--site-packages", str(site), "--spec", "mxfp8-quantize-fullgraph")
    line = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and "mxfp8-quantize-fullgraph: drifted" in line, done.stderr
    assert "the CPU check failed: mxfp8_quantize: the fake differs from the wrapper's own allocation" in line
    assert "output 1" in line and "nothing written" in line
    assert snapshot(site) == before and not (site / ".fp4patch").exists()


def test_new_add_target_starts_a_target_from_what_changed(tmp_path: Path, tmp_path_factory) -> None:
    site = relabel(release_site("0.7.4", tmp_path_factory, sources_only=True), tmp_path / "site", "0.7.5")
    replace_in(
        site, "flashinfer/quantization/fp8_quantization.py",
        "    *,\n    batch_invariant: bool = False,\n) -> Tuple[torch.Tensor, torch.Tensor]:",
        "    *,\n    batch_invariant: bool = False,\n    scale_rounding: str = \"nearest\",\n) -> Tuple[torch.Tensor, torch.Tensor]:",
    )
    specs = tmp_path / "myspecs"
    done = run_cli("new", "mxfp8-quantize-fullgraph", "--add-target", "--site-packages", str(site), "--specs-dir", str(specs))
    assert done.returncode == 0, done.stderr
    text = (specs / "flashinfer-python" / "mxfp8-quantize-fullgraph.toml").read_text()
    assert 'versions = "==0.7.5"' in text and "# changed: mxfp8_quantize(): parameter 'scale_rounding' added (default 'nearest'; carried at it)" in text
    assert '"batch_invariant", "scale_rounding"]' in text and (specs / "flashinfer-python" / "grids" / "mxfp8_quantize.py").is_file()
    # the next step is named: the op source must learn the parameter before the target loads
    nxt = run_cli("status", "--site-packages", str(site), "--specs-dir", str(specs))
    assert nxt.returncode == 2 and "scale_rounding of mxfp8_quantize() unknown to the op source" in nxt.stderr
    listed = run_cli("new", "mxfp8-quantize-fullgraph", "--add-target", "--site-packages", str(release_site("0.7.4", tmp_path_factory, sources_only=True)),
                     "--specs-dir", str(tmp_path / "other"))
    assert listed.returncode == 2 and "is a release fp4patch knows" in listed.stderr


@pytest.mark.slow
def test_a_check_that_cannot_run_for_lack_of_torch_says_so_and_what_to_do(tmp_path: Path, tmp_path_factory) -> None:
    """The CI recipe's tool venv has no torch: a release whose code differs cannot be checked there. That
    is said as such (with the --python / --skip advice), never as a failed check of the code."""
    import subprocess
    import sys

    site = relabel(release_site("0.7.4", tmp_path_factory, sources_only=True), tmp_path / "site", "0.7.5")
    replace_in(site, "flashinfer/quantization/fp8_quantization.py", "    sf_vec_size = 32\n\n    if sf_swizzle_layout is None:",
               "    sf_vec_size = 32\n    __import__(\"logging\").getLogger(__name__).debug(\"mxfp8_quantize %s\", tuple(input.shape))\n\n"
               "    if sf_swizzle_layout is None:")
    bare = tmp_path / "bare"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(bare)], check=True)
    python = bare / "bin" / "python"
    assert subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode != 0
    # the bare interpreter sees the relabelled site through a .pth file, as an installed FlashInfer
    (next((bare / "lib").glob("python3*")) / "site-packages" / "flashinfer-site.pth").write_text(str(site) + "\n")
    before = snapshot(site)
    done = run_cli("apply", "--python", str(python), "--spec", "mxfp8-quantize-fullgraph")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the CPU check could not run in" in done.stderr and "cannot import torch" in done.stderr, done.stderr
    assert "--skip mxfp8-quantize-fullgraph" in done.stderr and "pass `--python PATH`, an interpreter with torch" in done.stderr
    assert "the CPU check failed" not in done.stderr
    assert "mxfp8-quantize-fullgraph: needs-check:" in done.stderr and "drifted" not in done.stderr  # the word status uses
    assert snapshot(site) == before
