"""Reads for the registry, deployments and nodes, always scoped to a team."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from accounts.models import Team
from core.errors import NotFound
from inference.models import Deployment, Job, ModelVersion, Node, RegisteredModel, Replica


def models_for_team(*, team: Team) -> QuerySet[RegisteredModel]:
    versions = ModelVersion.objects.select_related("model").prefetch_related("artifacts").order_by("-number")
    return RegisteredModel.objects.filter(team=team).prefetch_related(Prefetch("versions", queryset=versions))


def model_get(*, team: Team, name: str) -> RegisteredModel:
    model = models_for_team(team=team).filter(name=name).first()
    if model is None:
        raise NotFound(f"model {name!r} not found")
    return model


def version_get(*, team: Team, version_id: int) -> ModelVersion:
    version = ModelVersion.objects.select_related("model").filter(pk=version_id, model__team=team).first()
    if version is None:
        raise NotFound("model version not found")
    return version


def versions_for_team(*, team: Team) -> QuerySet[ModelVersion]:
    return (
        ModelVersion.objects.select_related("model")
        .filter(model__team=team)
        .order_by("model__name", "-number")
    )


def deployments_for_team(*, team: Team) -> QuerySet[Deployment]:
    replicas = Replica.objects.select_related("node").order_by("pk")
    return (
        Deployment.objects.filter(team=team)
        .select_related("model_version__model")
        .prefetch_related(Prefetch("replica_set", queryset=replicas))
    )


def deployment_get(*, team: Team, name: str) -> Deployment:
    deployment = deployments_for_team(team=team).filter(name=name).first()
    if deployment is None:
        raise NotFound(f"deployment {name!r} not found")
    return deployment


def deployment_status(deployment: Deployment) -> str:
    """One word for people: paused, ready, degraded (some replicas ready), starting, or failed."""
    if deployment.desired_state == "paused":
        return "paused"
    replicas = list(deployment.replica_set.all())
    ready = sum(1 for r in replicas if r.state == "ready")
    if deployment.replicas and ready >= deployment.replicas:
        return "ready"
    if ready:
        return "degraded"
    if any(r.state == "failed" for r in replicas):
        return "failed"
    return "starting" if replicas else "unplaced"


def nodes_all() -> QuerySet[Node]:
    return Node.objects.all()


def jobs_for_team(*, team: Team, version_id: int | None = None) -> QuerySet[Job]:
    qs = Job.objects.filter(team=team).select_related("source__model", "output__model", "created_by")
    return qs.filter(source_id=version_id) if version_id else qs


def job_get(*, team: Team, job_id: int) -> Job:
    job = jobs_for_team(team=team).filter(pk=job_id).first()
    if job is None:
        raise NotFound("job not found")
    return job
