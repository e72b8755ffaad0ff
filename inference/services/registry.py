"""The registry's writes: uploads, derived versions, and ``version_create``, the one way a version is stored."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import transaction
from tokenizers import Tokenizer

from accounts.models import Team
from accounts.permissions import permission_require
from accounts.services import audit_record
from core.errors import Conflict, ValidationFailed
from inference import storage
from inference.models import Artifact, ModelVersion, RegisteredModel, Task
from inference.services.blobs import blobs_drop_unreferenced
from inference.validation.formats import InvalidModel
from inference.validation.onnx_model import check_task, image_preprocessing, inspect_onnx

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
MAX_LABELS_BYTES = 4 * 1024 * 1024  # labels as people send them (text)
MAX_LABELS_FILE_BYTES = 16 * 1024 * 1024  # the labels.json every version stores (JSON quoting adds bytes)


@dataclass
class UploadedModel:
    """What a person sent: the model file and optional companions, as chunk iterators."""

    name: str
    task: str
    model_chunks: Iterable[bytes]
    labels_text: str = ""
    tokenizer_chunks: Iterable[bytes] | None = None
    preprocessing: dict = field(default_factory=dict)
    description: str = ""
    generation: dict = field(
        default_factory=dict
    )  # text generation: cache layout, context, eos, chat template


def labels_parse(text: str) -> list[str]:
    """Labels as a JSON list of strings or one label per line."""
    text = (text or "").strip()
    if not text:
        return []
    if len(text.encode()) > MAX_LABELS_BYTES:
        raise ValidationFailed("labels are larger than 4 MiB")
    if text.startswith("["):
        try:
            labels = json.loads(text)
        except json.JSONDecodeError:
            raise ValidationFailed("labels look like JSON but do not parse") from None
        if not all(isinstance(x, str) for x in labels):
            raise ValidationFailed("labels JSON must be a list of strings")
        return labels
    return [line.strip() for line in text.splitlines() if line.strip()]


def _check_tokenizer(path: Path) -> None:
    try:
        Tokenizer.from_file(str(path))
    except Exception:
        raise ValidationFailed("tokenizer file is not a valid tokenizer.json") from None


def _validate(upload: UploadedModel, model_file: storage.StagedFile, tok: storage.StagedFile | None) -> dict:
    if not NAME_RE.match(upload.name):
        raise ValidationFailed("model name must be lowercase letters, digits and dashes (max 63)")
    if upload.task not in Task.values:
        raise ValidationFailed(f"unknown task {upload.task!r}; choose one of {', '.join(Task.values)}")
    labels = labels_parse(upload.labels_text)
    try:  # checked in the request: a bad graph is the caller's 422, not a server error
        info = inspect_onnx(model_file.path)
        check_task(upload.task, info, labels=labels)
        pre = (
            image_preprocessing(info, upload.preprocessing)
            if upload.task == Task.IMAGE_CLASSIFICATION
            else {}
        )
    except InvalidModel as exc:
        raise ValidationFailed(str(exc)) from None
    runtime: dict = {}
    if upload.task != Task.IMAGE_CLASSIFICATION:
        if tok is None:
            raise ValidationFailed(f"a {upload.task} model needs its tokenizer.json")
        _check_tokenizer(tok.path)
        runtime = _text_runtime(upload, info)
    return {"info": info, "labels": labels, "preprocessing": pre, "runtime": runtime}


GENERATION_KEYS = {"num_layers", "num_kv_heads", "head_dim", "context_length"}


def _text_runtime(upload: UploadedModel, info: dict) -> dict:
    if upload.task == Task.FEATURE_EXTRACTION:
        return {"max_length": 256, "pooling": "mean", "normalize": True}
    if upload.task == Task.TEXT_GENERATION:
        missing = GENERATION_KEYS - set(upload.generation)
        if missing:
            raise ValidationFailed(
                f"a text generation model needs `generation` settings: {', '.join(sorted(missing))}"
            )
        past = [
            i
            for i in info["inputs"]
            if i["name"].startswith("past_key_values.") and i["name"].endswith(".key")
        ]
        if len(past) != upload.generation["num_layers"]:
            raise ValidationFailed(
                f"the graph has {len(past)} key/value cache inputs but num_layers is "
                f"{upload.generation['num_layers']}"
            )
        return {"generation": upload.generation}
    return {"max_length": 256}


@dataclass(frozen=True)
class ModelRef:
    """The model a new version joins; created with these fields if the team has none of that name."""

    team: Team
    name: str
    task: str
    description: str = ""


@dataclass(frozen=True)
class VersionFile:
    """One file of a new version: a path to store, a file already staged, or content already stored."""

    role: str
    filename: str
    path: Path | None = None
    staged: storage.StagedFile | None = None
    sha256: str = ""  # with size: content already in the store (a companion shared with another version)
    size: int = 0

    @classmethod
    def kept(cls, artifact: Artifact) -> VersionFile:
        return cls(artifact.role, artifact.filename, sha256=artifact.sha256, size=artifact.size_bytes)


def version_create(
    *,
    model: ModelRef,
    files: list[VersionFile],
    labels: list[str],
    fields: dict,
    actor,
    action: str,
    audit_data: dict | None = None,
) -> ModelVersion:
    """Store ``files`` (the first one is the version's main file) as the model's next version.

    The one way a version comes to be (uploads, imports and job outputs all call it): stages what is
    not staged yet, writes the labels file, numbers the version under a lock on the model row, commits
    the blobs and records ``action`` in the audit log. On any failure nothing is left behind.
    ``fields`` are ModelVersion fields; ``size_bytes`` defaults to the main file's size.
    """
    staged: list[storage.StagedFile] = []
    try:
        entries = [_stage(f, staged) for f in files]
        if labels:  # labels travel as a file like the model, so node heartbeats stay small
            labels_file = storage.stage([json.dumps(labels).encode()], max_bytes=MAX_LABELS_FILE_BYTES)
            staged.append(labels_file)
            entries.append(
                VersionFile(
                    "labels",
                    "labels.json",
                    staged=labels_file,
                    sha256=labels_file.sha256,
                    size=labels_file.size,
                )
            )
        return _store(
            model=model,
            entries=entries,
            labels=labels,
            fields=fields,
            actor=actor,
            action=action,
            audit_data=audit_data,
        )
    finally:
        for item in staged:
            item.discard()  # no-op once committed into the store


def _stage(file: VersionFile, staged: list[storage.StagedFile]) -> VersionFile:
    item = file.staged
    if item is None and file.path is not None:
        item = storage.stage_file(file.path, max_bytes=settings.MAX_UPLOAD_BYTES)
        staged.append(item)
    if item is None:
        return file
    return VersionFile(file.role, file.filename, staged=item, sha256=item.sha256, size=item.size)


def _store(
    *,
    model: ModelRef,
    entries: list[VersionFile],
    labels: list[str],
    fields: dict,
    actor,
    action: str,
    audit_data: dict | None,
) -> ModelVersion:
    created_blobs: list[Path] = []
    try:
        with transaction.atomic():
            row, _ = RegisteredModel.objects.select_for_update().get_or_create(
                team=model.team,
                name=model.name,
                defaults={"task": model.task, "created_by": actor, "description": model.description},
            )
            if row.task != model.task:
                raise Conflict(f"model {model.name!r} already exists with task {row.task}")
            # The row lock makes this read-then-write safe; the (model, number) constraint backs it up.
            number = (row.versions.order_by("-number").values_list("number", flat=True).first() or 0) + 1
            version = ModelVersion.objects.create(
                model=row,
                number=number,
                sha256=entries[0].sha256,
                labels=labels,
                created_by=actor,
                **({"size_bytes": entries[0].size} | fields),
            )
            for entry in entries:
                Artifact.objects.create(
                    version=version,
                    role=entry.role,
                    filename=entry.filename,
                    sha256=entry.sha256,
                    size_bytes=entry.size,
                )
                if entry.staged is not None:
                    path, created = storage.commit(entry.staged)
                    if created:
                        created_blobs.append(path)
            audit_record(
                team=model.team, actor=actor, action=action, target=str(version), data=audit_data or {}
            )
    except BaseException:
        for path in created_blobs:  # the rows are gone with the rollback; so are the files they added
            path.unlink(missing_ok=True)
        raise
    return version


def model_version_upload(*, team: Team, actor, upload: UploadedModel) -> ModelVersion:
    """Stage, validate and store an uploaded ONNX model as a new version. Nothing is kept if any check fails."""
    permission_require(team=team, user=actor, action="model.upload")
    staged: list[storage.StagedFile] = []
    try:
        model_file = storage.stage(upload.model_chunks, max_bytes=settings.MAX_UPLOAD_BYTES)
        staged.append(model_file)
        tok = None
        if upload.tokenizer_chunks is not None:
            tok = storage.stage(upload.tokenizer_chunks, max_bytes=64 * 1024 * 1024)
            staged.append(tok)
        checked = _validate(upload, model_file, tok)
        files = [VersionFile("model", "model.onnx", staged=model_file)]
        files += [VersionFile("tokenizer", "tokenizer.json", staged=tok)] if tok else []
        fields = {
            "inputs": checked["info"]["inputs"],
            "outputs": checked["info"]["outputs"],
            "preprocessing": checked["preprocessing"],
            "runtime_config": checked["runtime"],
            "lineage": {"source": "upload", "opset": checked["info"]["opset"]},
        }
        return version_create(
            model=ModelRef(team=team, name=upload.name, task=upload.task, description=upload.description),
            files=files,
            labels=checked["labels"],
            fields=fields,
            actor=actor,
            action="model_version.create",
            audit_data={"sha256": model_file.sha256, "size": model_file.size},
        )
    finally:
        for item in staged:
            item.discard()  # no-op once committed into the store


def model_version_delete(*, team: Team, actor, version: ModelVersion) -> None:
    """Delete a version that no deployment uses. Blobs are left for the periodic collector (shared content)."""
    permission_require(team=team, user=actor, action="model.delete")
    if version.deployments.exists():
        raise Conflict("this version is deployed; delete or update its deployments first")
    label = str(version)
    with transaction.atomic():
        model = version.model
        version.delete()
        if not model.versions.exists():
            model.delete()
        audit_record(team=team, actor=actor, action="model_version.delete", target=label)


def version_file(version: ModelVersion, role: str) -> Path | None:
    """Path in the store of a version's file with `role` ("model", "tokenizer", "labels"), or None."""
    artifact = next((a for a in version.artifacts.all() if a.role == role), None)
    return storage.blob_path(artifact.sha256) if artifact else None


def version_derive(
    *,
    parent: ModelVersion,
    actor,
    model_path: Path,
    precision: str,
    lineage: dict,
    report: dict,
    tokenizer_path: Path | None = None,
    labels: list[str] | None = None,
    preprocessing: dict | None = None,
    runtime_config: dict | None = None,
) -> ModelVersion:
    """Register a job's ONNX output as the next version of the parent's model.

    Companion files (tokenizer, labels) are the parent's unless given: an export from a Hugging Face
    folder brings its own tokenizer.json and the labels from its config.
    """
    labels = parent.labels if labels is None else labels
    info = inspect_onnx(model_path)
    check_task(parent.model.task, info, labels=labels)
    files = [VersionFile("model", "model.onnx", path=model_path)]
    if tokenizer_path:
        files.append(VersionFile("tokenizer", "tokenizer.json", path=tokenizer_path))
    else:  # the parent's tokenizer: same content, stored once
        files += [VersionFile.kept(a) for a in parent.artifacts.all() if a.role == "tokenizer"]
    fields = {
        "precision": precision,
        "inputs": info["inputs"],
        "outputs": info["outputs"],
        "parent": parent,
        "preprocessing": parent.preprocessing if preprocessing is None else preprocessing,
        "runtime_config": parent.runtime_config if runtime_config is None else runtime_config,
        "lineage": lineage,
        "report": report,
    }
    model = parent.model
    return version_create(
        model=ModelRef(team=model.team, name=model.name, task=model.task),
        files=files,
        labels=labels,
        fields=fields,
        actor=actor,
        action="model_version.derive",
        audit_data={"parent": str(parent), "kind": lineage.get("kind", "")},
    )


def version_discard(*, version: ModelVersion) -> None:
    """Remove a version nobody asked to keep (a job's output the job no longer vouches for).

    Its model goes too if this was its only version; its files go unless another version holds them.
    """
    label, model, shas = str(version), version.model, list(version.artifacts.values_list("sha256", flat=True))
    with transaction.atomic():
        version.delete()
        if not model.versions.exists():
            model.delete()
        audit_record(team=model.team, actor=None, action="model_version.discard", target=label)
        transaction.on_commit(lambda: blobs_drop_unreferenced(shas))
