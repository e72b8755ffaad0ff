"""M-H: dataset uploads no longer cost the console memory or decoding time.

A zip whose central directory lists more entries than allowed is refused from its end records, before
``zipfile`` builds an object per entry (the console's peak RSS stays flat while refusing one of 300,000
entries, which ``zipfile`` would hold as about 140 MB). Images are decoded in a sandbox child under the
sandbox's memory limit: a decompression bomb within the pixel limit exhausts the child, not the console.
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
import zlib
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from PIL import Image

from core.errors import ValidationFailed
from evalsets.models import Dataset
from evalsets.services import dataset_create
from inference.sandbox import Sandbox, SandboxLimits
from inference.validation.archives import ArchiveLimits, check_directory
from inference.validation.formats import InvalidModel

pytestmark = pytest.mark.django_db


def cd_only_zip(path: Path, entries: int, *, eocd_count: int | None = None) -> Path:
    """A zip of ``entries`` central-directory records and no file data (zip64 end records past 65,535)."""
    records = bytearray()
    for i in range(entries):
        name = f"{i:x}.png".encode()
        records += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, 0, 0, 0,
                               len(name), 0, 0, 0, 0, 0, 0) + name  # fmt: skip
    count = entries if eocd_count is None else eocd_count
    with path.open("wb") as out:
        out.write(records)
        size = len(records)
        if count > 0xFFFF:
            zip64_at = size
            out.write(struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, size, 0))
            out.write(struct.pack("<4sLQL", b"PK\x06\x07", 0, zip64_at, 1))
            out.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))
        else:
            out.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, size, 0, 0))
    return path


def peak_rss_reset() -> None:
    """Reset this process's VmHWM (Linux: writing 5 to clear_refs), so the next reading is a delta."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def file_chunks(path: Path):
    with path.open("rb") as handle:
        while chunk := handle.read(1024 * 1024):
            yield chunk


def test_one_entry_over_the_limit_is_a_422_naming_the_count(owner_client, settings, tmp_path):
    settings.DATASET_MAX_ITEMS = 100  # the archive limit is max_items + 64
    content = cd_only_zip(tmp_path / "cd.zip", 165).read_bytes()
    body = {"name": "cd", "kind": "images", "file": SimpleUploadedFile("cd.zip", content)}
    response = owner_client.post("/api/v1/datasets", body, format="multipart")
    assert response.status_code == 422, response.content
    assert response.json()["error"]["message"] == "the archive has 165 entries; the limit is 164"
    assert not Dataset.objects.exists()


def test_a_large_cd_only_zip_is_refused_without_the_console_growing(owner, team, tmp_path):
    archive = cd_only_zip(tmp_path / "big.zip", 300_000)  # ~ 26 MB on disk, ~140 MB as ZipInfo objects
    peak_rss_reset()
    before = peak_rss_bytes()
    with pytest.raises(ValidationFailed, match="the archive has 300000 entries; the limit is 20064"):
        dataset_create(team=team, actor=owner, name="cd", kind="images", chunks=file_chunks(archive))
    grown = peak_rss_bytes() - before
    assert grown < 24 * 1024**2, f"the console's peak RSS grew by {grown / 1024**2:.0f} MiB"


def test_an_eocd_that_understates_the_count_is_caught_by_walking_the_directory(tmp_path):
    archive = cd_only_zip(tmp_path / "liar.zip", 500, eocd_count=3)
    with pytest.raises(InvalidModel, match="the archive has 101 entries; the limit is 100"):
        check_directory(archive, ArchiveLimits(max_files=100))
    with zipfile.ZipFile(archive) as zf:  # what zipfile would have read: every record, whatever the EOCD says
        assert len(zf.infolist()) == 500


def test_an_oversized_central_directory_is_refused_before_zipfile(tmp_path):
    archive = tmp_path / "long-names.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for i in range(2):  # two entries, as allowed, but a directory far larger than two entries need
            zf.writestr(zipfile.ZipInfo(f"{i}-" + "n" * 60_000), b"")
    with pytest.raises(InvalidModel, match="central directory is .* bytes, more than 2 entries need"):
        check_directory(archive, ArchiveLimits(max_files=2))


def bomb_png(side: int) -> bytes:
    """A solid PNG of side x side RGB pixels, built row by row (a few hundred KB, GBs decoded)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    packer, row, parts = zlib.compressobj(9), b"\x00" * (1 + 3 * side), []
    for _ in range(side):
        parts.append(packer.compress(row))
    parts.append(packer.flush())
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", b"".join(parts)) + chunk(b"IEND", b"")
    )


def test_a_decompression_bomb_exhausts_the_child_not_the_console(owner, team, settings, tmp_path):
    settings.SANDBOX_MEMORY_BYTES = 512 * 1024**2
    settings.DATASET_MAX_IMAGE_PIXELS = 150_000_000  # within the pixel limit: only memory stops it
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("cat/bomb.png", bomb_png(12_000))  # 432 MB of pixels decoded
        zf.writestr("dog/ok.png", bomb_png(8))
    peak_rss_reset()
    before = peak_rss_bytes()
    with pytest.raises(ValidationFailed, match="could not be checked: .*512 MiB memory limit"):
        dataset_create(team=team, actor=owner, name="bomb", kind="images", chunks=file_chunks(archive))
    grown = peak_rss_bytes() - before
    assert grown < 64 * 1024**2, f"the console's peak RSS grew by {grown / 1024**2:.0f} MiB"
    assert not Dataset.objects.exists()


def test_the_set_is_decoded_in_another_process(tmp_path):
    archive = tmp_path / "set.zip"
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (1, 2, 3)).save(buffer, "PNG")
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("cat/a.png", buffer.getvalue())
        zf.writestr("dog/b.png", buffer.getvalue())
    with Sandbox(SandboxLimits(memory_bytes=1024**3, cpu_seconds=60, timeout_s=60)) as box:
        found = box.call(
            "check_image_set",
            {
                "archive": str(box.put("set.zip", archive)),
                "work": str(box.out),
                "limits": {
                    "max_items": 10,
                    "max_expanded_bytes": 1024**2,
                    "max_image_pixels": 1024,
                    "max_total_pixels": 4096,
                },
            },  # fmt: skip
        )
    assert found["pid"] != os.getpid()
    assert found["item_count"] == 2 and found["class_counts"] == {"cat": 1, "dog": 1}


def test_pixels_are_bounded_per_set(owner_client, settings):
    settings.DATASET_MAX_TOTAL_PIXELS = 10_000
    buffer = io.BytesIO()
    Image.new("RGB", (60, 60), (9, 9, 9)).save(buffer, "PNG")  # 3,600 pixels each
    content = io.BytesIO()
    with zipfile.ZipFile(content, "w") as zf:
        for i in range(3):
            zf.writestr(f"cat/{i}.png", buffer.getvalue())
            zf.writestr(f"dog/{i}.png", buffer.getvalue())
    body = {"name": "px", "kind": "images", "file": SimpleUploadedFile("px.zip", content.getvalue())}
    response = owner_client.post("/api/v1/datasets", body, format="multipart")
    assert response.status_code == 422, response.content
    assert "more than 10000 pixels together" in response.json()["error"]["message"]
