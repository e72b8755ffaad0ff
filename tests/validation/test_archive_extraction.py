"""Uploaded zips: refused when corrupt, escaping their folder, linking, or expanding like a bomb."""

from __future__ import annotations

import stat
import zipfile

import pytest

from inference.validation.archives import ArchiveLimits, extract_zip
from inference.validation.formats import InvalidModel


def _zip(path, entries: dict[str, bytes], compression=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return path


def test_a_clean_archive_is_extracted_with_its_folders(tmp_path):
    archive = _zip(tmp_path / "ok.zip", {"model/config.json": b"{}", "model/weights.bin": b"x" * 100})
    files = extract_zip(archive, tmp_path / "out")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in files) == [
        "model/config.json",
        "model/weights.bin",
    ]
    assert (tmp_path / "out/model/weights.bin").read_bytes() == b"x" * 100


def test_a_corrupt_archive_is_refused(tmp_path):
    archive = tmp_path / "bad.zip"
    archive.write_bytes(b"PK\x03\x04 this is not really a zip")
    with pytest.raises(InvalidModel, match="not a readable zip"):
        extract_zip(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_truncated_entry_is_refused_and_nothing_is_left(tmp_path):
    archive = _zip(tmp_path / "t.zip", {"a.bin": bytes(range(256)) * 4000})
    data = bytearray(archive.read_bytes())
    data[100:140] = b"\x00" * 40  # damage the compressed stream
    archive.write_bytes(bytes(data))
    with pytest.raises(InvalidModel):
        extract_zip(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "name", ["../evil.txt", "model/../../evil.txt", "/etc/evil.txt", "C:/evil.txt", "model\\..\\evil.txt"]
)
def test_entries_escaping_the_folder_are_refused(tmp_path, name):
    archive = _zip(tmp_path / "p.zip", {name: b"owned"})
    with pytest.raises(InvalidModel, match="outside the archive|absolute"):
        extract_zip(archive, tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists()


def test_a_symbolic_link_entry_is_refused(tmp_path):
    archive = tmp_path / "link.zip"
    info = zipfile.ZipInfo("model/link")
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(InvalidModel, match="symbolic link"):
        extract_zip(archive, tmp_path / "out")


def test_a_zip_bomb_by_compression_ratio_is_refused(tmp_path):
    archive = _zip(tmp_path / "ratio.zip", {"zeros.bin": b"\x00" * (20 * 1024 * 1024)})
    with pytest.raises(InvalidModel, match="zip bomb"):
        extract_zip(archive, tmp_path / "out")


def test_a_zip_bomb_by_total_size_is_refused(tmp_path):
    entries = {f"part{i}.bin": bytes(range(256)) * 1024 for i in range(5)}  # 5 x 256 KiB
    archive = _zip(tmp_path / "total.zip", entries)
    with pytest.raises(InvalidModel, match="more than 1 MiB"):
        extract_zip(archive, tmp_path / "out", ArchiveLimits(max_total_bytes=1024 * 1024))


def test_lying_headers_are_caught_while_extracting(tmp_path):
    archive = _zip(tmp_path / "lie.zip", {"zeros.bin": b"\x00" * (4 * 1024 * 1024)})
    data = archive.read_bytes()
    # Claim 1000 bytes uncompressed in both headers; the stream still inflates to 4 MiB.
    real = (4 * 1024 * 1024).to_bytes(4, "little")
    patched = data.replace(real, (1000).to_bytes(4, "little"))
    assert patched != data
    (tmp_path / "lie.zip").write_bytes(patched)
    with pytest.raises(InvalidModel, match="larger than its header|bomb|cannot be read|not a readable"):
        extract_zip(tmp_path / "lie.zip", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_too_many_files_are_refused(tmp_path):
    archive = _zip(tmp_path / "many.zip", {f"f{i}.txt": b"x" for i in range(30)})
    with pytest.raises(InvalidModel, match="30 entries; the limit is 20"):
        extract_zip(archive, tmp_path / "out", ArchiveLimits(max_files=20))


def test_duplicate_entries_are_refused(tmp_path):
    archive = tmp_path / "dup.zip"
    with zipfile.ZipFile(archive, "w") as zf, pytest.warns(UserWarning):
        zf.writestr("a.txt", b"1")
        zf.writestr("a.txt", b"2")
    with pytest.raises(InvalidModel, match="twice"):
        extract_zip(archive, tmp_path / "out")
