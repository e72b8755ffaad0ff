"""The datasets page: each set with its counts per class and a few thumbnails; upload and delete forms."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.decorators import member_required, team_object_or_404
from core.errors import ApplicationError
from evalsets import selectors
from evalsets.models import DatasetKind
from evalsets.services import dataset_create, dataset_delete


@member_required
def dataset_list(request, membership):
    """GET: the team's datasets. POST: an upload through the same service as the API."""
    if request.method == "POST":
        upload = request.FILES.get("file")
        try:
            if upload is None:
                raise ApplicationError("choose a file to upload")
            dataset = dataset_create(
                team=membership.team,
                actor=request.user,
                name=request.POST.get("name", "").strip(),
                kind=request.POST.get("kind", "").strip(),
                chunks=upload.chunks(1024 * 1024),
                description=request.POST.get("description", ""),
            )
            messages.success(request, f"dataset {dataset.name} stored: {dataset.item_count} items")
        except ApplicationError as exc:
            messages.error(request, exc.message)
        return redirect("datasets:dataset-list")
    datasets = list(selectors.datasets_for_team(team=membership.team))
    for dataset in datasets:  # PostgreSQL's jsonb keeps its own key order: sort the classes by name here
        dataset.classes = sorted(dataset.class_counts.items())
    context = {
        "datasets": datasets,
        "kinds": DatasetKind.choices,
        "can_write": membership.can_write,
    }
    return render(request, "datasets/datasets.html", context)


@require_POST
@member_required
def dataset_remove(request, membership, name: str):
    dataset = team_object_or_404(selectors.dataset_get, membership=membership, name=name)
    try:
        dataset_delete(team=membership.team, actor=request.user, dataset=dataset)
        messages.success(request, f"dataset {name} deleted")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("datasets:dataset-list")
