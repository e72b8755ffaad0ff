"""Content-addressed storage for model files: `<STORAGE_DIR>/sha256/<ab>/<hash>`.

Files are hashed while written to a temporary file beside their final place, then renamed into place
atomically, so a reader never sees a half-written file and identical content is stored once.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from django.conf import settings

from core.errors import ApplicationError, PayloadTooLarge

CHUNK = 1024 * 1024
FREE_CHECK_EVERY = 64 * CHUNK


class InsufficientStorage(ApplicationError):
    """The store's disk is (nearly) full: 507, and the partial file is removed."""

    status, type = 507, "insufficient_storage"


def _check_free(folder: Path) -> None:
    if shutil.disk_usage(folder).free < settings.STORAGE_MIN_FREE_BYTES:
        raise InsufficientStorage(
            "the model store is out of space; nothing was stored (ask an operator to free space)"
        )


class StoredFile(Protocol):
    """What linking needs of a version's file (an ``Artifact`` row): its name and its content hash."""

    filename: str
    sha256: str


@dataclass
class StagedFile:
    """A file written and hashed but not yet in the store."""

    path: Path
    sha256: str
    size: int

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


def root() -> Path:
    return Path(settings.STORAGE_DIR)


def blob_path(sha256: str) -> Path:
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ValueError("not a sha256 hex digest")
    return root() / "sha256" / sha256[:2] / sha256


def stage(chunks: Iterable[bytes], *, max_bytes: int) -> StagedFile:
    """Write `chunks` to a temporary file while hashing; refuse more than `max_bytes` (partial file removed)."""
    tmp_dir = root() / "tmp"
    tmp_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    _check_free(tmp_dir)
    fd, name = tempfile.mkstemp(dir=tmp_dir, prefix="upload-")
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise PayloadTooLarge(f"file is larger than the limit of {max_bytes} bytes")
                if size % FREE_CHECK_EVERY < len(chunk):
                    _check_free(tmp_dir)
                digest.update(chunk)
                out.write(chunk)
    except OSError as exc:
        path.unlink(missing_ok=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise InsufficientStorage("the model store is out of space; nothing was stored") from None
        raise
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return StagedFile(path=path, sha256=digest.hexdigest(), size=size)


def stage_file(path: Path, *, max_bytes: int) -> StagedFile:
    with open(path, "rb") as src:
        return stage(iter(lambda: src.read(CHUNK), b""), max_bytes=max_bytes)


def commit(staged: StagedFile) -> tuple[Path, bool]:
    """Move a staged file into the store. Returns (path, created); an existing identical blob is kept."""
    final = blob_path(staged.sha256)
    try:
        os.utime(final)  # a reused blob counts as new for the collector's grace period (services.blobs)
    except FileNotFoundError:
        pass
    else:
        staged.discard()
        return final, False
    final.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(staged.path, 0o440)  # stored content never changes; jobs hard-link it read-only
    os.replace(staged.path, final)
    return final, True


def exists(sha256: str) -> bool:
    return blob_path(sha256).exists()


def link_artifacts(artifacts: Iterable[StoredFile], folder: Path) -> Path:
    """Lay stored files out under their names: hard links into the store, copies across filesystems.

    Not symbolic links: the format checks refuse links, as they should for anything uploaded.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for artifact in artifacts:
        target = folder / Path(artifact.filename).name
        try:
            os.link(blob_path(artifact.sha256), target)
        except OSError:
            shutil.copyfile(blob_path(artifact.sha256), target)
    return folder


def linked_base() -> Path:
    """``<STORAGE_DIR>/linked``, private to the worker's user (0700): no one else can plant files there."""
    base = root() / "linked"
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o700)
    return base


def _holds(folder: Path, artifacts: list[StoredFile]) -> bool:
    """Whether ``folder`` holds exactly these files with these contents (checked before every reuse)."""
    try:
        names = {p.name for p in folder.iterdir()}
    except OSError:
        return False
    if names != {Path(a.filename).name for a in artifacts}:
        return False
    for artifact in artifacts:
        path = folder / Path(artifact.filename).name
        if path.is_symlink() or not path.is_file():
            return False
        with open(path, "rb") as handle:
            if hashlib.file_digest(handle, "sha256").hexdigest() != artifact.sha256:
                return False
    return True


def linked_folder(artifacts: Iterable[StoredFile]) -> Path:
    """One folder per set of files (reused by later jobs), e.g. an ONNX model beside its external data.

    Versions never change, so the folder is built once, under a temporary name, and renamed into place;
    a job racing to build the same one keeps whichever landed first. Every reuse checks the contents'
    hashes: a folder that does not hold exactly the version's files is removed and rebuilt.
    """
    artifacts = list(artifacts)
    base = linked_base()
    # Named by content, not by id: ids repeat across databases, contents do not.
    content = hashlib.sha256("".join(sorted(a.sha256 + a.filename for a in artifacts)).encode())
    folder = base / content.hexdigest()[:32]
    if folder.exists():
        if _holds(folder, artifacts):
            return folder
        shutil.rmtree(folder, ignore_errors=True)
    building = Path(tempfile.mkdtemp(prefix=".building-", dir=base))
    link_artifacts(artifacts, building)
    try:
        os.rename(building, folder)
    except OSError:  # built meanwhile by another job
        shutil.rmtree(building, ignore_errors=True)
    return folder
