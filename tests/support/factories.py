"""Request bodies and uploads for tests: images and zipped model folders (models: ``tiny_models``)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from PIL import Image


def image_bytes(colour=(255, 0, 0), size=(64, 48), fmt="JPEG") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format=fmt)
    return buf.getvalue()


def zip_folder(folder: Path, archive: Path) -> Path:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(folder))
    return archive
