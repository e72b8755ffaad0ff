"""Registering model versions from uploads."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import transaction

from accounts.models import Team
from accounts.services import audit_record, require_writer
from core.errors import Conflict, ValidationFailed
from inference import storage
from inference.models import Artifact, ModelVersion, RegisteredModel, Task
from inference.validation.onnx_model import check_task, image_preprocessing, inspect_onnx

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
MAX_LABELS_BYTES = 4 * 1024 * 1024


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
    generation: dict = field(default_factory=dict)  # text generation: cache layout, context, eos, chat template


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
    from tokenizers import Tokenizer

    try:
        Tokenizer.from_file(str(path))
    except Exception:
        raise ValidationFailed("tokenizer file is not a valid tokenizer.json") from None


def _validate(upload: UploadedModel, model_file: storage.StagedFile, tok: storage.StagedFile | None) -> dict:
    if not NAME_RE.match(upload.name):
        raise ValidationFailed("model name must be lowercase letters, digits and dashes (max 63)")
    if upload.task not in Task.values:
        raise ValidationFailed(f"unknown task {upload.task!r}; choose one of {', '.join(Task.values)}")
    info = inspect_onnx(model_file.path)
    labels = labels_parse(upload.labels_text)
    check_task(upload.task, info, labels=labels)
    runtime: dict = {}
    pre: dict = {}
    if upload.task == Task.IMAGE_CLASSIFICATION:
        pre = image_preprocessing(info, upload.preprocessing)
    else:
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
            raise ValidationFailed(f"a text generation model needs `generation` settings: {', '.join(sorted(missing))}")
        past = [i for i in info["inputs"] if i["name"].startswith("past_key_values.") and i["name"].endswith(".key")]
        if len(past) != upload.generation["num_layers"]:
            raise ValidationFailed(f"the graph has {len(past)} key/value cache inputs but num_layers is "
                                   f"{upload.generation['num_layers']}")
        return {"generation": upload.generation}
    return {"max_length": 256}


def model_version_upload(*, team: Team, actor, upload: UploadedModel) -> ModelVersion:
    """Stage, validate and store an uploaded ONNX model as a new version. Nothing is kept if any check fails."""
    require_writer(team=team, user=actor)
    staged: list[storage.StagedFile] = []
    try:
        model_file = storage.stage(upload.model_chunks, max_bytes=settings.MAX_UPLOAD_BYTES)
        staged.append(model_file)
        tok = None
        if upload.tokenizer_chunks is not None:
            tok = storage.stage(upload.tokenizer_chunks, max_bytes=64 * 1024 * 1024)
            staged.append(tok)
        checked = _validate(upload, model_file, tok)
        if checked["labels"]:
            # Labels travel as a file like the model, so node heartbeats stay small.
            staged.append(storage.stage([json.dumps(checked["labels"]).encode()], max_bytes=MAX_LABELS_BYTES * 2))
        return _register(team=team, actor=actor, upload=upload, model_file=model_file, tok=tok, checked=checked,
                         labels_file=staged[-1] if checked["labels"] else None)
    finally:
        for item in staged:
            item.discard()  # no-op once committed into the store


def _register(*, team, actor, upload, model_file, tok, checked, labels_file=None) -> ModelVersion:
    created_blobs: list[Path] = []
    try:
        with transaction.atomic():
            model, _ = RegisteredModel.objects.select_for_update().get_or_create(
                team=team, name=upload.name,
                defaults={"task": upload.task, "created_by": actor, "description": upload.description},
            )
            if model.task != upload.task:
                raise Conflict(f"model {upload.name!r} already exists with task {model.task}")
            number = (model.versions.order_by("-number").values_list("number", flat=True).first() or 0) + 1
            version = ModelVersion.objects.create(
                model=model, number=number, sha256=model_file.sha256, size_bytes=model_file.size,
                inputs=checked["info"]["inputs"], outputs=checked["info"]["outputs"], labels=checked["labels"],
                preprocessing=checked["preprocessing"], runtime_config=checked["runtime"], created_by=actor,
                lineage={"source": "upload", "opset": checked["info"]["opset"]},
            )
            files = [("model", "model.onnx", model_file)] + ([("tokenizer", "tokenizer.json", tok)] if tok else [])
            files += [("labels", "labels.json", labels_file)] if labels_file else []
            for role, filename, staged in files:
                Artifact.objects.create(version=version, role=role, filename=filename,
                                        sha256=staged.sha256, size_bytes=staged.size)
                path, created = storage.commit(staged)
                if created:
                    created_blobs.append(path)
            audit_record(team=team, actor=actor, action="model_version.create", target=str(version),
                         data={"sha256": model_file.sha256, "size": model_file.size})
    except BaseException:
        for path in created_blobs:  # the rows are gone with the rollback; so are the files they added
            path.unlink(missing_ok=True)
        raise
    return version


def model_version_delete(*, team: Team, actor, version: ModelVersion) -> None:
    """Delete a version that no deployment uses. Blobs are left for the periodic collector (shared content)."""
    require_writer(team=team, user=actor)
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


def version_derive(*, parent: ModelVersion, actor, model_path: Path, precision: str, lineage: dict,
                   report: dict, tokenizer_path: Path | None = None, labels: list[str] | None = None,
                   preprocessing: dict | None = None, runtime_config: dict | None = None) -> ModelVersion:
    """Register a job's ONNX output as the next version of the parent's model.

    Companion files (tokenizer, labels) are the parent's unless given: an export from a Hugging Face
    folder brings its own tokenizer.json and the labels from its config.
    """
    labels = parent.labels if labels is None else labels
    new_files = [("model", "model.onnx", model_path)] + ([("tokenizer", "tokenizer.json", tokenizer_path)]
                                                         if tokenizer_path else [])
    if labels:
        labels_path = model_path.parent / "labels.json"
        labels_path.write_text(json.dumps(labels))
        new_files.append(("labels", "labels.json", labels_path))
    staged = [(role, name, storage.stage_file(path, max_bytes=settings.MAX_UPLOAD_BYTES)) for role, name, path in new_files]
    try:
        info = inspect_onnx(staged[0][2].path)
        check_task(parent.model.task, info, labels=labels)
        with transaction.atomic():
            model = RegisteredModel.objects.select_for_update().get(pk=parent.model_id)
            number = (model.versions.order_by("-number").values_list("number", flat=True).first() or 0) + 1
            version = ModelVersion.objects.create(
                model=model, number=number, sha256=staged[0][2].sha256, size_bytes=staged[0][2].size,
                precision=precision, inputs=info["inputs"], outputs=info["outputs"], labels=labels,
                preprocessing=parent.preprocessing if preprocessing is None else preprocessing,
                runtime_config=parent.runtime_config if runtime_config is None else runtime_config,
                parent=parent, lineage=lineage, report=report, created_by=actor,
            )
            for role, name, item in staged:
                Artifact.objects.create(version=version, role=role, filename=name, sha256=item.sha256,
                                        size_bytes=item.size)
                storage.commit(item)
            if tokenizer_path is None:
                for companion in parent.artifacts.filter(role="tokenizer"):  # same content, stored once
                    Artifact.objects.create(version=version, role="tokenizer", filename=companion.filename,
                                            sha256=companion.sha256, size_bytes=companion.size_bytes)
            audit_record(team=model.team, actor=actor, action="model_version.derive", target=str(version),
                         data={"parent": str(parent), "kind": lineage.get("kind", "")})
        return version
    finally:
        for _, _, item in staged:
            item.discard()
