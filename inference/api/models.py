"""Models and versions: upload (multipart), list, show, delete."""

from __future__ import annotations

import json

from ninja import File, Form, Router, Status
from ninja.files import UploadedFile

from console.errors import ValidationFailed
from inference import selectors
from inference.schemas import ModelOut, ModelVersionOut
from inference.services.registry import UploadedModel, model_version_delete, model_version_upload

router = Router(tags=["models"])


def _chunks(f: UploadedFile | None):
    return None if f is None else f.chunks(1024 * 1024)


def _read_text(f: UploadedFile | None, limit: int = 4 * 1024 * 1024) -> str:
    if f is None:
        return ""
    if f.size > limit:
        raise ValidationFailed("labels file is larger than 4 MiB")
    try:
        return f.read().decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationFailed("labels file is not UTF-8 text") from None


@router.get("", response=list[ModelOut])
def model_list(request):
    return list(selectors.models_for_team(team=request.auth.team))


@router.post("", response={201: ModelVersionOut})
def model_upload(
    request,
    name: Form[str],
    task: Form[str],
    file: File[UploadedFile],
    labels: Form[str] = "",
    preprocessing: Form[str] = "",
    description: Form[str] = "",
    labels_file: File[UploadedFile] = None,
    tokenizer: File[UploadedFile] = None,
):
    """Upload an ONNX model (with labels for classifiers, tokenizer.json for embedding models)."""
    try:
        pre = json.loads(preprocessing) if preprocessing.strip() else {}
    except json.JSONDecodeError:
        raise ValidationFailed("preprocessing must be a JSON object") from None
    if not isinstance(pre, dict):
        raise ValidationFailed("preprocessing must be a JSON object")
    upload = UploadedModel(
        name=name.strip(), task=task.strip(), model_chunks=_chunks(file), labels_text=labels or _read_text(labels_file),
        tokenizer_chunks=_chunks(tokenizer), preprocessing=pre, description=description,
    )
    version = model_version_upload(team=request.auth.team, actor=request.auth.user, upload=upload)
    return Status(201, version)


@router.get("/{name}", response=ModelOut)
def model_show(request, name: str):
    return selectors.model_get(team=request.auth.team, name=name)


@router.delete("/versions/{version_id}", response={204: None})
def version_delete(request, version_id: int):
    version = selectors.version_get(team=request.auth.team, version_id=version_id)
    model_version_delete(team=request.auth.team, actor=request.auth.user, version=version)
    return Status(204, None)
