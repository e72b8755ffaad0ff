"""Uploads that need a worker to check them: zips, Hugging Face folders, TorchScript, ONNX with external data.

The request only stores the files (hashed, size-limited) and queues an import job; the worker unpacks
them safely, sniffs the format, checks it against the declared task and registers the version. A failed
import leaves no model, version or file behind.
"""

from __future__ import annotations

import shutil
import zipfile
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings
from django.db import transaction

from accounts.models import Team
from accounts.permissions import permission_require
from accounts.services import audit_record
from core.errors import PayloadTooLarge, ValidationFailed
from inference import queue, storage
from inference.live import publish_job
from inference.models import Job, JobKind, ModelVersion, Task
from inference.services.blobs import blobs_drop_unreferenced
from inference.services.registry import (
    NAME_RE,
    ModelRef,
    VersionFile,
    labels_parse,
    version_create,
)
from inference.validation.archives import ArchiveLimits, extract_zip
from inference.validation.formats import SAFE_SEGMENT, InvalidModel
from inference.validation.onnx_model import image_preprocessing

MAX_FILES = 64
KEEP_HF = (
    "config.json",
    "preprocessor_config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
    "chat_template.jinja",
)


def model_import_start(
    *,
    team: Team,
    actor,
    name: str,
    task: str,
    files: list[tuple[str, Iterable[bytes]]],
    labels_text: str = "",
    preprocessing: dict | None = None,
    input_shape: list[int] | None = None,
) -> Job:
    """Store the uploaded files and queue their import. `task` may be empty for a Hugging Face folder."""
    permission_require(team=team, user=actor, action="model.upload")
    if not NAME_RE.match(name or ""):
        raise ValidationFailed("model name must be lowercase letters, digits and dashes (max 63)")
    if task and task not in Task.values:
        raise ValidationFailed(f"unknown task {task!r}; choose one of {', '.join(Task.values)}")
    if not files or len(files) > MAX_FILES:
        raise ValidationFailed(f"upload 1 to {MAX_FILES} files")
    labels = labels_parse(labels_text)
    stored: list[dict[str, str | int]] = []
    budget = settings.MAX_UPLOAD_BYTES
    try:
        for filename, chunks in files:
            staged = storage.stage(chunks, max_bytes=budget)
            budget -= staged.size
            storage.commit(staged)
            stored.append(
                {"filename": Path(filename).name or "upload", "sha256": staged.sha256, "size": staged.size}
            )
    except storage.InsufficientStorage:
        blobs_drop_unreferenced([str(f["sha256"]) for f in stored])
        raise
    except PayloadTooLarge:
        blobs_drop_unreferenced([str(f["sha256"]) for f in stored])
        raise PayloadTooLarge(
            f"the upload is larger than the limit of {settings.MAX_UPLOAD_BYTES} bytes"
        ) from None
    options = {
        "name": name,
        "task": task,
        "files": stored,
        "labels": labels,
        "preprocessing": preprocessing or {},
        "input_shape": input_shape,
    }
    with transaction.atomic():
        job = Job.objects.create(
            team=team, kind=JobKind.IMPORT, source=None, options=options, created_by=actor
        )
        audit_record(
            team=team,
            actor=actor,
            action="model.import",
            target=name,
            data={"files": [f["filename"] for f in stored]},
        )
        publish_job(job)
        queue.job_run_later(job.pk)
    return job


def materialize(files: list[dict], folder: Path) -> Path:
    """Lay the uploaded files out in `folder`; a single zip that is not TorchScript is extracted safely."""
    if len(files) == 1 and _is_plain_zip(storage.blob_path(files[0]["sha256"])):
        limits = ArchiveLimits(
            max_total_bytes=settings.ARCHIVE_MAX_BYTES, max_files=settings.ARCHIVE_MAX_FILES
        )
        extract_zip(storage.blob_path(files[0]["sha256"]), folder, limits)
        inner = [p for p in folder.iterdir()]
        return inner[0] if len(inner) == 1 and inner[0].is_dir() else folder  # zip of one top folder
    folder.mkdir(parents=True)
    for f in files:
        shutil.copyfile(storage.blob_path(f["sha256"]), folder / Path(f["filename"]).name)
    return folder


def _is_plain_zip(path: Path) -> bool:
    with open(path, "rb") as handle:
        if handle.read(4) != b"PK\x03\x04":
            return False
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except zipfile.BadZipFile:
        return True  # let extraction report it as a corrupt archive
    return not any(n.endswith("constants.pkl") or n.endswith("data.pkl") for n in names)


FORMATS = ("onnx", "torchscript", "huggingface")


def _kept_name(folder: Path, name: object) -> str:
    """A file name the sandbox reported: plain segments naming a regular file in ``folder``."""
    if not isinstance(name, str) or not all(
        SAFE_SEGMENT.match(part) and part not in (".", "..") for part in name.split("/")
    ):
        raise InvalidModel(f"the check reported an unusable file name {str(name)[:100]!r}")
    path = folder / name
    if path.is_symlink() or not path.is_file():
        raise InvalidModel(f"the check reported {name!r}, which is not a file of the upload")
    return name


def import_info_checked(raw: dict, folder: Path) -> dict:
    """The sandbox's description of an upload, trusted only after checking it: names, types, task."""
    info = dict(raw)
    if info.get("format") not in FORMATS:
        raise InvalidModel("the check reported an unknown format")
    if info["format"] != "huggingface":
        info["path"] = folder / _kept_name(folder, info.get("path"))
    info["weights"] = [_kept_name(folder, n) for n in info.get("weights") or []]
    info["external_data"] = [_kept_name(folder, n) for n in info.get("external_data") or []]
    labels = info.get("labels") or []
    if not (isinstance(labels, list) and all(isinstance(label, str) for label in labels)):
        raise InvalidModel("the check reported labels that are not strings")
    if info.get("task") not in (None, "", *Task.values):
        raise InvalidModel("the check reported an unknown task")
    for key in ("preprocessing", "details"):
        if info.get(key) is not None and not isinstance(info[key], dict):
            raise InvalidModel(f"the check reported a malformed {key}")
    return info


def keep_files(info: dict, folder: Path) -> list[tuple[str, str, Path]]:
    """(role, filename, path) of the files a version keeps, by format."""
    if info["format"] == "huggingface":
        names = [n for n in KEEP_HF if (folder / n).is_file()] + list(info["weights"])
        return [("tokenizer" if n == "tokenizer.json" else "hf", n, folder / n) for n in names]
    if info["format"] == "torchscript":
        return [("model", "model.pt", info["path"])]
    model = [("model", "model.onnx", info["path"])]
    return model + [("external-data", n, info["path"].parent / n) for n in info.get("external_data", [])]


def register_import(*, job: Job, info: dict, folder: Path) -> ModelVersion:
    """Create the model and version for a checked upload; store each kept file by content."""
    opts = job.options
    task = opts["task"] or info.get("task") or ""
    pre = opts["preprocessing"] or info.get("preprocessing") or {}
    files = keep_files(info, folder)
    fields = {
        "format": info["format"],
        "size_bytes": sum(p.stat().st_size for _, _, p in files),
        "preprocessing": pre,
        "lineage": {
            "source": "import",
            "job": job.pk,
            "files": [f["filename"] for f in opts["files"]],
            "architecture": info.get("architecture", ""),
        },
        "runtime_config": {"input_shape": opts.get("input_shape")} if opts.get("input_shape") else {},
    }
    if "details" in info:  # a checked ONNX graph: record its signature as an upload does
        fields |= {"inputs": info["details"]["inputs"], "outputs": info["details"]["outputs"]}
        if task == Task.IMAGE_CLASSIFICATION:
            fields["preprocessing"] = image_preprocessing(info["details"], pre)
    # The main file (the one hashed into the version) comes first: the model, or a Hugging Face file.
    files.sort(key=lambda f: f[0] not in ("model", "hf"))
    return version_create(
        model=ModelRef(team=job.team, name=opts["name"], task=task),
        actor=job.created_by,
        files=[VersionFile(role, filename, path=path) for role, filename, path in files],
        labels=opts["labels"] or info.get("labels") or [],
        fields=fields,
        action="model_version.create",
        audit_data={"format": info["format"], "job": job.pk},
    )


def import_cleanup(job: Job) -> None:
    """After an import ends, successfully or not, remove upload blobs nothing else holds: no version or
    dataset of any team, no other job (another team's pending import of the same bytes; review L-B)."""
    blobs_drop_unreferenced([f["sha256"] for f in job.options.get("files", [])], ignore_job=job.pk)
