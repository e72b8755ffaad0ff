"""Reads of a team's datasets; another team's dataset is not found (404), as if it did not exist."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts.models import Team
from core.errors import NotFound
from evalsets.models import Dataset


def datasets_for_team(*, team: Team) -> QuerySet[Dataset]:
    return Dataset.objects.filter(team=team).order_by("name")


def dataset_get(*, team: Team, name: str) -> Dataset:
    dataset = Dataset.objects.filter(team=team, name=name).first()
    if dataset is None:
        raise NotFound(f"dataset {name!r} not found")
    return dataset


def dataset_get_by_id(*, team: Team, dataset_id: int) -> Dataset:
    dataset = Dataset.objects.filter(team=team, pk=dataset_id).first()
    if dataset is None:
        raise NotFound(f"dataset {dataset_id} not found in this team")
    return dataset
