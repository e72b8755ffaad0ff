"""Inference's live updates: job progress and replica states, pushed to per-team Channels groups.

Payloads are typed here; `core.live.publish` sends them after the transaction commits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NotRequired, TypedDict

from core.live import publish
from inference.selectors import deployment_status

if TYPE_CHECKING:
    from inference.models import Deployment, Job


class ReplicaPayload(TypedDict):
    id: int
    state: str
    node: str


class DeploymentStatusPayload(TypedDict):
    type: str  # "deployment.status"
    deployment: str
    status: str
    replicas: list[ReplicaPayload]


class JobPayload(TypedDict):
    type: str  # "job.update"
    id: int
    kind: str
    status: str
    progress: float
    message: str
    error: str
    source: int | None
    output: int | None
    log: NotRequired[str]


def team_deployments_group(team_id: int) -> str:
    return f"team-{team_id}-deployments"


def team_jobs_group(team_id: int) -> str:
    return f"team-{team_id}-jobs"


def publish_deployment_status(deployment: Deployment) -> None:
    replicas: list[ReplicaPayload] = [
        {"id": r.pk, "state": r.state, "node": r.node.name}
        for r in deployment.replica_set.select_related("node")
    ]
    payload: DeploymentStatusPayload = {
        "type": "deployment.status",
        "deployment": deployment.name,
        "status": deployment_status(deployment),
        "replicas": replicas,
    }
    publish(team_deployments_group(deployment.team_id), "deployment_status", dict(payload))


def job_payload(job: Job) -> JobPayload:
    return {
        "type": "job.update",
        "id": job.pk,
        "kind": job.kind,
        "status": job.status,
        "progress": round(job.progress, 1),
        "message": job.message,
        "error": job.error,
        "source": job.source_id,
        "output": job.output_id,
    }


def publish_job(job: Job, log_line: str | None = None) -> None:
    payload = job_payload(job)
    if log_line:
        payload["log"] = log_line
    publish(team_jobs_group(job.team_id), "job_update", dict(payload))
