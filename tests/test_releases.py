"""The sdist fp4patch packs from the tree pip unpacked, and unpacking a bad archive."""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path

import pytest

from fp4patch.errors import EnvironmentProblem
from fp4patch.catalog.releases import _pack_unpacked_sdist, unpack


def _tree(root: Path) -> None:
    """What pip leaves after a failed metadata step of flashinfer-python 0.2.6: the sdist's files plus
    a ``build/`` with a link to an absolute path (made by its setup.py)."""
    sdist = root / "pip-req-build" / "flashinfer_python-0.2.6"
    (sdist / "flashinfer").mkdir(parents=True)
    (sdist / "flashinfer" / "__init__.py").write_text("__version__ = '0.2.6'\n")
    (sdist / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.2.6\n")
    (sdist / "build").mkdir()
    os.symlink("/tmp", sdist / "build" / "aot-ops-package-dir")
    os.symlink("/etc/hostname", sdist / "flashinfer" / "outside")


def test_the_packed_sdist_leaves_out_build_leftovers_and_links_out_of_the_tree(tmp_path: Path) -> None:
    _tree(tmp_path / "scratch")
    archive = _pack_unpacked_sdist(tmp_path / "scratch", "flashinfer-python", "0.2.6", tmp_path)
    assert archive is not None and archive.name == "flashinfer_python-0.2.6.tar.gz"
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "flashinfer_python-0.2.6/flashinfer/__init__.py" in names
    assert not [n for n in names if "/build" in n or n.endswith("/outside")], names
    site = unpack(archive, tmp_path / "site")
    assert (site / "flashinfer" / "__init__.py").is_file()


def test_an_archive_with_an_absolute_link_is_a_one_line_error(tmp_path: Path) -> None:
    archive = tmp_path / "flashinfer_python-0.2.6.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        link = tarfile.TarInfo("flashinfer_python-0.2.6/build/aot-ops-package-dir")
        link.type, link.linkname = tarfile.SYMTYPE, "/tmp"
        tar.addfile(link)
    with pytest.raises(EnvironmentProblem, match="cannot unpack .*download it again"):
        unpack(archive, tmp_path / "site")


def test_a_damaged_archive_is_one_line_that_says_how_to_get_a_good_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wheel whose member does not inflate, and a junk sdist (tarfile's error spans a line per compression it tried):
    one line each; a file fp4patch downloaded is fetched again, a file the user gave is downloaded again."""
    import zipfile

    wheel = tmp_path / "flashinfer_python-0.6.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("flashinfer/__init__.py", "x = 1\n" * 2000)
    data = bytearray(wheel.read_bytes())
    data[60:80] = b"\xff" * 20  # inside the member's compressed bytes
    wheel.write_bytes(bytes(data))
    with pytest.raises(EnvironmentProblem, match=f"^{re.escape(str(wheel))}: cannot unpack: not a wheel .*; download it again$"):
        unpack(wheel, tmp_path / "site")
    cache = tmp_path / "cache"
    cache.mkdir()
    sdist = cache / "flashinfer_python-0.6.0.tar.gz"
    sdist.write_bytes(b"junk\n" * 100)
    monkeypatch.setenv("FP4PATCH_CACHE", str(cache))
    with pytest.raises(EnvironmentProblem) as raised:
        unpack(sdist, tmp_path / "site2")
    assert "\n" not in str(raised.value) and str(raised.value).endswith("; delete it from the cache and fetch the release again"), raised.value
