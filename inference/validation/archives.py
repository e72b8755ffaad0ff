"""Safe extraction of an uploaded zip: no path tricks, no links, no bombs.

Sizes are checked twice: first from the central directory (cheap, refuses honest bombs before a
byte is written), then while streaming each entry out (headers can lie about sizes).
"""

from __future__ import annotations

import shutil
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from inference.validation.formats import InvalidModel

CHUNK = 1024 * 1024


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


def _checked_entries(zf: zipfile.ZipFile, limits: ArchiveLimits) -> list[zipfile.ZipInfo]:
    infos = zf.infolist()
    if len(infos) > limits.max_files:
        raise InvalidModel(f"the archive has {len(infos)} entries; the limit is {limits.max_files}")
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
