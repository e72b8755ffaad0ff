"""Datasets: upload (multipart), list, show, delete (``/api/v1/datasets``)."""

from __future__ import annotations

from ninja import File, Form, Router, Status
from ninja.files import UploadedFile

from core.schemas import strict_form
from evalsets import selectors
from evalsets.schemas import DatasetOut
from evalsets.services import dataset_create, dataset_delete

router = Router(tags=["datasets"])


@router.get("", response=list[DatasetOut])
def dataset_list(request):
    return list(selectors.datasets_for_team(team=request.auth.team))


@router.post("", response={201: DatasetOut})
@strict_form
def dataset_upload(
    request,
    name: Form[str],
    kind: Form[str],
    file: File[UploadedFile],
    description: Form[str] = "",
):
    """Upload a validation dataset: checked at once (201, or 422 with the reason; 409 if the name is taken).

    `kind` `images`: a zip of folders named by class (or a flat folder: unlabelled), or images plus a
    top-level CSV of `file,label`. `texts`: JSON Lines of `{"text": ..., "label": optional}`.
    `prompts`: JSON Lines of `{"prompt": ...}`.
    """
    dataset = dataset_create(
        team=request.auth.team,
        actor=request.auth.user,
        name=name.strip(),
        kind=kind.strip(),
        chunks=file.chunks(1024 * 1024),
        description=description,
    )
    return Status(201, dataset)


@router.get("/{name}", response=DatasetOut)
def dataset_show(request, name: str):
    return selectors.dataset_get(team=request.auth.team, name=name)


@router.delete("/{name}", response={204: None})
def dataset_remove(request, name: str):
    dataset = selectors.dataset_get(team=request.auth.team, name=name)
    dataset_delete(team=request.auth.team, actor=request.auth.user, dataset=dataset)
    return Status(204, None)
