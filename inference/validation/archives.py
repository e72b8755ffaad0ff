"""Safe extraction of an uploaded zip: no path tricks, no links, no bombs.

Sizes are checked twice: first from the central directory (cheap, refuses honest bombs before a
byte is written), then while streaming each entry out (headers can lie about sizes).

Before ``zipfile`` sees the archive (it builds an object of about 500 bytes for every central-directory
record, millions for a hostile upload), ``_directory_bounds`` reads the end-of-central-directory record
(and its zip64 form) and walks the central directory's fixed-size headers with constant memory: too
many entries, or a directory larger than the entries allowed could need, is refused first.
"""

from __future__ import annotations

import shutil
import stat
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from inference.validation.formats import InvalidModel

CHUNK = 1024 * 1024
EOCD = struct.Struct(
    "<4s4H2LH"
)  # signature, disk, cd disk, entries here, entries, cd size, cd offset, comment
ZIP64_LOCATOR = struct.Struct("<4sLQL")  # signature, disk, offset of the zip64 record, disks
ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")  # ..., entries here, entries, cd size, cd offset
CD_HEADER = struct.Struct("<4s6H3L5H2L")  # a central-directory record's fixed part (46 bytes)
CD_BYTES_PER_ENTRY = 512  # fixed part, a long name and the usual extra fields, with room to spare
TAIL_BYTES = EOCD.size + 0xFFFF  # the EOCD sits in the last 22 bytes plus a comment of at most 64 KiB


@dataclass(frozen=True)
class ArchiveLimits:
    max_total_bytes: int = 8 * 1024**3  # uncompressed, all entries together
    max_files: int = 1000
    max_ratio: float = 100.0  # uncompressed / compressed, per entry
    ratio_floor_bytes: int = 1024 * 1024  # small entries (config files) may compress better than this


def extract_zip(archive: Path, dest: Path, limits: ArchiveLimits = ArchiveLimits()) -> list[Path]:
    """Extract ``archive`` into ``dest`` (created; must not exist) and return the files written.

    Raises InvalidModel for a corrupt archive, a dangerous entry name, a link, an encrypted entry,
    too many files or a zip bomb; ``dest`` is removed again on any failure.
    """
    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(dest)
    check_directory(archive, limits)
    try:
        with zipfile.ZipFile(archive) as zf:
            entries = _checked_entries(zf, limits)
            dest.mkdir(parents=True)
            return _extract_all(zf, entries, dest, limits)
    except zipfile.BadZipFile:
        shutil.rmtree(dest, ignore_errors=True)
        raise InvalidModel("the upload is not a readable zip archive (corrupt or truncated)") from None
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def check_directory(archive: Path, limits: ArchiveLimits) -> int:
    """The number of central-directory entries, read without ``zipfile``; InvalidModel past the limits.

    Cheap whatever the archive holds: the EOCD (zip64 too) gives the count and the directory's size,
    refused above ``max_files`` entries or ``max_files * CD_BYTES_PER_ENTRY`` bytes; then the headers are
    walked one at a time (names are skipped, not read), so a count the EOCD understates is caught too.
    """
    bound = limits.max_files * CD_BYTES_PER_ENTRY + 0xFFFF
    with open(archive, "rb") as handle:
        count, size, start = _directory_bounds(handle)
        if count > limits.max_files:
            raise InvalidModel(_too_many(count, limits))
        if size > bound:
            raise InvalidModel(
                f"the archive's central directory is {size} bytes, more than {limits.max_files} entries need "
                f"(at most {bound} bytes): refused"
            )
        walked = _walk_directory(handle, start, size, limits.max_files)
    if walked > limits.max_files:
        raise InvalidModel(_too_many(walked, limits))
    return walked


def _too_many(count: int, limits: ArchiveLimits) -> str:
    return f"the archive has {count} entries; the limit is {limits.max_files}"


def _directory_bounds(handle) -> tuple[int, int, int]:
    """(entries, size, start offset) of the central directory, from the EOCD record or its zip64 form."""
    end = handle.seek(0, 2)
    tail_start = max(0, end - TAIL_BYTES)
    handle.seek(tail_start)
    tail = handle.read()
    at = tail.rfind(b"PK\x05\x06", 0, max(0, len(tail) - EOCD.size + 4))
    if at < 0:
        raise InvalidModel("the upload is not a readable zip archive (no end of central directory)")
    _, _, _, _, count, size, _, _ = EOCD.unpack_from(tail, at)
    eocd_at = tail_start + at
    record_at = eocd_at  # where the directory ends: the (zip64) end record follows it
    locator_at = at - ZIP64_LOCATOR.size
    if locator_at >= 0 and tail[locator_at : locator_at + 4] == b"PK\x06\x07":
        _, _, zip64_at, _ = ZIP64_LOCATOR.unpack_from(tail, locator_at)
        handle.seek(zip64_at)
        raw = handle.read(ZIP64_EOCD.size)
        if len(raw) < ZIP64_EOCD.size or raw[:4] != b"PK\x06\x06":
            raise InvalidModel("the upload is not a readable zip archive (corrupt zip64 end record)")
        fields = ZIP64_EOCD.unpack(raw)  # what zipfile reads then too (the EOCD holds 0xFFFF markers)
        count, size = max(fields[6], fields[7]), fields[8]
        record_at = zip64_at
    start = record_at - size
    if start < 0:
        raise InvalidModel("the upload is not a readable zip archive (central directory out of bounds)")
    return count, size, start


def _walk_directory(handle, start: int, size: int, max_files: int) -> int:
    """Count central-directory records from ``start``, stopping one past ``max_files``; names are skipped."""
    handle.seek(start)
    count, done = 0, 0
    while done + CD_HEADER.size <= size and count <= max_files:
        fixed = handle.read(CD_HEADER.size)
        if len(fixed) < CD_HEADER.size or fixed[:4] != b"PK\x01\x02":
            break  # what follows is zipfile's to judge (prepended data shifts offsets; it copes)
        fields = CD_HEADER.unpack(fixed)
        skip = fields[10] + fields[11] + fields[12]  # name, extra field and comment lengths
        handle.seek(skip, 1)
        done += CD_HEADER.size + skip
        count += 1
    return count


def _checked_entries(zf: zipfile.ZipFile, limits: ArchiveLimits) -> list[zipfile.ZipInfo]:
    infos = zf.infolist()
    if len(infos) > limits.max_files:
        raise InvalidModel(_too_many(len(infos), limits))
    seen: set[str] = set()
    total = 0
    files = []
    for info in infos:
        name = _safe_name(info)
        if name.lower() in seen:
            raise InvalidModel(f"the archive has the entry {name!r} twice")
        seen.add(name.lower())
        if info.is_dir():
            continue
        total += info.file_size
        _check_ratio(info.filename, info.file_size, info.compress_size, limits)
        files.append(info)
    if total > limits.max_total_bytes:
        raise InvalidModel(_too_large(limits))
    return files


def _safe_name(info: zipfile.ZipInfo) -> str:
    name = info.filename
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise InvalidModel(f"the archive entry {name!r} is a symbolic link; links are not allowed")
    if info.flag_bits & 0x1:
        raise InvalidModel(f"the archive entry {name!r} is encrypted")
    if "\\" in name or "\x00" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise InvalidModel(f"the archive entry {name!r} has an absolute or non-portable path")
    parts = PurePosixPath(name).parts
    if not parts or any(part in ("..", ".") for part in parts):
        raise InvalidModel(f"the archive entry {name!r} points outside the archive folder ('..')")
    return name.rstrip("/")


def _check_ratio(name: str, size: int, compressed: int, limits: ArchiveLimits) -> None:
    if size > limits.ratio_floor_bytes and size > limits.max_ratio * max(compressed, 1):
        raise InvalidModel(
            f"the archive entry {name!r} expands {size / max(compressed, 1):.0f}x "
            f"(limit {limits.max_ratio:.0f}x): refused as a zip bomb"
        )


def _too_large(limits: ArchiveLimits) -> str:
    return f"the archive expands to more than {limits.max_total_bytes // 1024**2} MiB: refused as a zip bomb"


def _extract_all(zf, entries, dest: Path, limits: ArchiveLimits) -> list[Path]:
    written: list[Path] = []
    total = 0
    for info in entries:
        target = dest.joinpath(*PurePosixPath(info.filename).parts)
        if not target.resolve().is_relative_to(dest.resolve()):
            raise InvalidModel(f"the archive entry {info.filename!r} points outside the archive folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        total += _extract_one(zf, info, target, limits, budget=limits.max_total_bytes - total)
        written.append(target)
    return written


def _extract_one(zf, info: zipfile.ZipInfo, target: Path, limits: ArchiveLimits, budget: int) -> int:
    size = 0
    try:
        with zf.open(info) as src, open(target, "xb") as out:
            while chunk := src.read(CHUNK):
                size += len(chunk)
                # Headers can lie: keep counting what really comes out.
                if size > info.file_size:
                    raise InvalidModel(f"the archive entry {info.filename!r} is larger than its header says")
                if size > budget:
                    raise InvalidModel(_too_large(limits))
                _check_ratio(info.filename, size, info.compress_size, limits)
                out.write(chunk)
    except (zlib.error, EOFError, NotImplementedError) as exc:
        raise InvalidModel(f"the archive entry {info.filename!r} cannot be read: {exc}") from None
    except FileExistsError:
        raise InvalidModel(f"the archive has the entry {info.filename!r} twice") from None
    return size
