"""Models and versions: upload (multipart), list, show, delete."""

from __future__ import annotations

import json
from collections.abc import Iterator

from ninja import File, Form, Router, Status
from ninja.files import UploadedFile

from core.errors import ValidationFailed
from core.schemas import strict_form
from inference import selectors
from inference.schemas import JobOut, ModelOut, ModelVersionOut
from inference.services.imports import model_import_start
from inference.services.registry import UploadedModel, model_version_delete, model_version_upload
from inference.validation.formats import PICKLE_MESSAGE

router = Router(tags=["models"])


def _chunks(f: UploadedFile) -> Iterator[bytes]:
    return f.chunks(1024 * 1024)


def _read_text(f: UploadedFile | None, limit: int = 4 * 1024 * 1024) -> str:
    if f is None:
        return ""
    if f.size is not None and f.size > limit:
        raise ValidationFailed("labels file is larger than 4 MiB")
    try:
        return f.read().decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationFailed("labels file is not UTF-8 text") from None


@router.get("", response=list[ModelOut])
def model_list(request):
    return list(selectors.models_for_team(team=request.auth.team))


@router.post("", response={201: ModelVersionOut, 202: JobOut})
@strict_form
def model_upload(
    request,
    name: Form[str],
    task: Form[str] = "",
    # ninja's idiom for an optional upload: `| None` in the annotation would turn each field of the
    # OpenAPI document into anyOf[binary, null], which loses the file picker of /api/v1/docs.
    file: File[UploadedFile] = None,  # type: ignore[assignment]
    files: File[list[UploadedFile]] = None,  # type: ignore[assignment]
    labels: Form[str] = "",
    preprocessing: Form[str] = "",
    description: Form[str] = "",
    input_shape: Form[str] = "",
    labels_file: File[UploadedFile] = None,  # type: ignore[assignment]
    tokenizer: File[UploadedFile] = None,  # type: ignore[assignment]
):
    """Upload a model.

    One ONNX file (`file`, with `labels` for classifiers and `tokenizer` for embedding models) is checked
    at once: 201 with the new version, or 422 with the reason. Anything else (a zip of a Hugging Face
    folder, several files such as `config.json` + `model.safetensors` + tokenizer files, ONNX with
    external data, TorchScript) is stored and checked by a worker: 202 with the import job to follow.
    """
    pre = _json_object(preprocessing, "preprocessing")
    uploads = ([file] if file else []) + list(files or [])
    if not uploads:
        raise ValidationFailed("send the model as `file` (or several `files`)")
    labels_text = labels or _read_text(labels_file)
    if len(uploads) == 1 and _sniff_head(uploads[0]) == "onnx":
        upload = UploadedModel(
            name=name.strip(),
            task=task.strip(),
            model_chunks=_chunks(uploads[0]),
            labels_text=labels_text,
            tokenizer_chunks=None if tokenizer is None else _chunks(tokenizer),
            preprocessing=pre,
            description=description,
        )
        return Status(
            201, model_version_upload(team=request.auth.team, actor=request.auth.user, upload=upload)
        )
    shape = _json_list(input_shape, "input_shape")
    extra = [tokenizer] if tokenizer else []
    job = model_import_start(
        team=request.auth.team,
        actor=request.auth.user,
        name=name.strip(),
        task=task.strip(),
        files=[(f.name or "", _chunks(f)) for f in uploads + extra],
        labels_text=labels_text,
        preprocessing=pre,
        input_shape=shape,
    )
    return Status(202, job)


def _sniff_head(f: UploadedFile) -> str:
    head = f.read(8)
    f.seek(0)
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        raise ValidationFailed(PICKLE_MESSAGE)
    return "onnx"


def _json_object(raw: str, what: str) -> dict:
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        raise ValidationFailed(f"{what} must be a JSON object") from None
    if not isinstance(value, dict):
        raise ValidationFailed(f"{what} must be a JSON object")
    return value


def _json_list(raw: str, what: str) -> list[int] | None:
    if not raw.strip():
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        raise ValidationFailed(f"{what} must be a JSON list of integers, e.g. [1, 3, 224, 224]") from None
    if not (
        isinstance(value, list)
        and 2 <= len(value) <= 6
        and all(isinstance(v, int) and 0 < v < 100000 for v in value)
    ):
        raise ValidationFailed(
            f"{what} must be a JSON list of 2 to 6 positive integers, e.g. [1, 3, 224, 224]"
        )
    return value


@router.get("/{name}", response=ModelOut)
def model_show(request, name: str):
    return selectors.model_get(team=request.auth.team, name=name)


@router.delete("/versions/{version_id}", response={204: None})
def version_delete(request, version_id: int):
    version = selectors.version_get(team=request.auth.team, version_id=version_id)
    model_version_delete(team=request.auth.team, actor=request.auth.user, version=version)
    return Status(204, None)
