"""Checking an uploaded image set (a zip) and writing it in the normalised layout, Django-free.

This runs in the sandbox child (``inference.sandbox.tasks.check_image_set``), not in the console: an
image set can hold 20,000 images, each decoded here, under the sandbox's memory and CPU limits. Layouts:
folders named by class (``cat/1.jpg``, optionally inside one wrapping folder), a flat folder of images
(unlabelled), or images plus a top-level ``.csv`` of ``file,label``. The zip is extracted with the model
uploads' rules (``inference.validation.archives``: entry count and directory size read first, no
traversal, links, bombs, encrypted or duplicate entries). Pixels are bounded per image before it is
decoded, and per set. The normalised form is a zip of ``<label>/<file>`` (flat when unlabelled).

Every refusal is an ``InvalidModel`` (the validation family's refusal; ``evalsets`` answers it as a 422).
"""

from __future__ import annotations

import base64
import csv
import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from PIL import Image, UnidentifiedImageError

from inference.validation.archives import ArchiveLimits, extract_zip
from inference.validation.formats import InvalidModel

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
IMAGE_FORMATS = ("JPEG", "PNG", "WEBP")
JUNK = ("__MACOSX", ".DS_Store", "Thumbs.db")  # what archivers add; skipped, not refused
THUMBNAILS, THUMBNAIL_PX = 8, 96
MAX_LABEL_CHARS = 100


@dataclass(frozen=True)
class DatasetLimits:
    max_items: int = 20_000
    max_expanded_bytes: int = 4 * 1024**3
    max_image_pixels: int = 40_000_000
    max_total_pixels: int = 8_000_000_000  # all images of one set together (what decoding costs)


@dataclass
class Checked:
    """A checked dataset: the normalised file to store and what the page shows."""

    path: Path
    item_count: int
    labelled: bool
    class_counts: dict[str, int] = field(default_factory=dict)
    samples: list[dict] = field(default_factory=list)


def refuse(message: str) -> InvalidModel:
    return InvalidModel(message)


# ---- image sets --------------------------------------------------------------------------------------
def check_image_archive(archive: Path, work: Path, limits: DatasetLimits) -> Checked:
    """Extract ``archive`` under ``work``, check layout and images, write ``work/normalised.zip``."""
    if not zipfile.is_zipfile(archive):
        raise refuse("an image set is a zip archive (folders named by class, or images and a labels CSV)")
    try:
        files = extract_zip(
            archive,
            work / "raw",
            ArchiveLimits(max_total_bytes=limits.max_expanded_bytes, max_files=limits.max_items + 64),
        )
    except InvalidModel as exc:
        raise refuse(str(exc)) from None
    raw = work / "raw"
    names = sorted(str(p.relative_to(raw).as_posix()) for p in files)
    names = [n for n in names if not _junk(n)]
    csvs = [n for n in names if "/" not in n and n.lower().endswith(".csv")]
    if len(csvs) > 1:
        raise refuse(f"the archive has several CSV files at its top level ({', '.join(csvs)}); send one")
    if csvs:
        labels = _csv_labels(raw / csvs[0], csvs[0], [n for n in names if n != csvs[0]])
    else:
        labels = _folder_labels(names, _folders(archive))
    if not labels:
        raise refuse("the archive holds no images")
    if len(labels) > limits.max_items:
        raise refuse(f"the set has {len(labels)} images; the limit is {limits.max_items}")
    Image.MAX_IMAGE_PIXELS = limits.max_image_pixels  # Pillow's own bomb check, at our limit
    pixels = 0
    for name in sorted(labels):
        pixels += _check_image(raw / name, name, limits)
        if pixels > limits.max_total_pixels:
            raise refuse(
                f"the set's images hold more than {limits.max_total_pixels} pixels together (the limit); "
                "send fewer or smaller images"
            )
    return _write_images(raw, labels, work / "normalised.zip")


def _junk(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return parts[0] in JUNK or parts[-1] in JUNK or parts[-1].startswith("._")


def _folders(archive: Path) -> set[str]:
    """Folders the archive names (directory entries and parents of files): empty ones count."""
    with zipfile.ZipFile(archive) as zf:
        found: set[str] = set()
        for name in zf.namelist():
            parts = PurePosixPath(name).parts
            found.update("/".join(parts[:i]) for i in range(1, len(parts) if not name.endswith("/") else 0))
            if name.endswith("/"):
                found.add(name.rstrip("/"))
    return {f for f in found if f and not _junk(f)}


def _folder_labels(names: list[str], folders: set[str]) -> dict[str, str]:
    """file -> label from ``<class>/<file>`` (one wrapping folder allowed); '' for a flat, unlabelled set."""
    depth = {len(PurePosixPath(n).parts) for n in names}
    prefix = ""
    tops = {PurePosixPath(n).parts[0] for n in names} | {PurePosixPath(f).parts[0] for f in folders}
    if names and min(depth) >= 3 and len(tops) == 1:
        prefix = tops.pop() + "/"  # a zipped folder: <set>/<class>/<file>
        depth = {d - 1 for d in depth}
    top_files = [n for n in names if len(PurePosixPath(n[len(prefix) :]).parts) == 1]
    if depth == {1} and not {f for f in folders if "/" not in f}:
        return {n: "" for n in names}  # flat folder: unlabelled
    if top_files:
        raise refuse(
            f"{len(top_files)} file(s) sit at the top level beside the class folders ({top_files[0]}): put every "
            "image in the folder of its class, or add a labels CSV"
        )
    nested = [n for n in names if len(PurePosixPath(n[len(prefix) :]).parts) > 2]
    if nested:
        raise refuse(f"{nested[0]} is nested too deep: use <class>/<image> (one folder per class)")
    classes = {f[len(prefix) :] for f in folders if f.startswith(prefix) and f != prefix.rstrip("/")}
    classes = {c for c in classes if "/" not in c}
    labels = {n: PurePosixPath(n[len(prefix) :]).parts[0] for n in names}
    empty = sorted(classes - set(labels.values()))
    if empty:
        raise refuse(f"the class folder {empty[0]!r} holds no images")
    for label in set(labels.values()):
        _check_label(label, f"the folder {label!r}")
    return labels


def _csv_labels(path: Path, csv_name: str, names: list[str]) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise refuse(f"{csv_name} is not UTF-8 text") from None
    rows = [row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
    if rows and [c.strip().lower() for c in rows[0]][:2] in (["file", "label"], ["filename", "label"]):
        rows = rows[1:]
    present = set(names)
    labels: dict[str, str] = {}
    for number, row in enumerate(rows, start=1):
        if len(row) != 2 or not row[0].strip() or not row[1].strip():
            raise refuse(f"{csv_name} row {number}: expected two columns, file and label")
        file, label = row[0].strip().lstrip("./"), row[1].strip()
        if file not in present:
            raise refuse(f"{csv_name} row {number} names {file!r}, which the archive does not hold")
        if file in labels:
            raise refuse(f"{csv_name} names {file!r} twice")
        _check_label(label, f"{csv_name} row {number}: the label {label!r}")
        labels[file] = label
    unlisted = sorted(present - set(labels))
    if unlisted:
        raise refuse(f"{len(unlisted)} file(s) in the archive are not in {csv_name} (e.g. {unlisted[0]!r})")
    return labels


def _check_label(label: str, where: str) -> None:
    if len(label) > MAX_LABEL_CHARS or label in (".", "..") or label.startswith("."):
        raise refuse(
            f"{where} is not a usable class name (at most {MAX_LABEL_CHARS} characters, no leading dot)"
        )
    if any(c in label for c in "/\\") or not label.isprintable():
        raise refuse(f"{where} is not a usable class name (no slashes or control characters)")


def _check_image(path: Path, name: str, limits: DatasetLimits) -> int:
    """Open, bound and decode one image; the pixels it holds."""
    if not name.lower().endswith(IMAGE_SUFFIXES):
        raise refuse(f"{name} is not an image: an image set holds JPEG, PNG or WebP files only")
    try:
        with Image.open(path) as image:
            if image.format not in IMAGE_FORMATS:
                raise refuse(f"{name} is a {image.format} file; use JPEG, PNG or WebP")
            width, height = image.size
            if width * height > limits.max_image_pixels:
                raise refuse(
                    f"{name} is {width}x{height} pixels; the limit is {limits.max_image_pixels} pixels"
                )
            image.load()  # decodes: a truncated or corrupt file fails here, not in a job
            return width * height
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        raise refuse(f"{name} is not a readable image (JPEG, PNG or WebP)") from None


def _write_images(raw: Path, labels: dict[str, str], out: Path) -> Checked:
    counts: dict[str, int] = {}
    used: set[str] = set()
    samples: list[dict] = []
    firsts = {label: name for name, label in sorted(labels.items(), reverse=True)}  # first file per class
    chosen = set(sorted(firsts.values())[:THUMBNAILS])
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:
        for index, (name, label) in enumerate(sorted(labels.items())):
            base = PurePosixPath(name).name
            target = f"{label}/{base}" if label else base
            if target.lower() in used:
                target = f"{label}/{index:05d}-{base}" if label else f"{index:05d}-{base}"
            used.add(target.lower())
            zf.write(raw / name, target)
            counts[label] = counts.get(label, 0) + 1
            if name in chosen:
                samples.append({"label": label, "name": target, "thumbnail": _thumbnail(raw / name)})
    labelled = any(labels.values())
    return Checked(out, len(labels), labelled, counts if labelled else {}, samples)


def _thumbnail(path: Path) -> str:
    with Image.open(path) as image:
        small = image.convert("RGB")
        small.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
        buffer = io.BytesIO()
        small.save(buffer, "JPEG", quality=70)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()
