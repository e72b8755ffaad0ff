"""Push live updates to open pages: one helper, typed payloads, per-team groups, sent after commit."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger("lantau.live")


def team_deployments_group(team_id: int) -> str:
    return f"team-{team_id}-deployments"


def publish(group: str, handler: str, payload: dict) -> None:
    """Send `payload` to the consumers of `group` (their method `handler`) once the transaction commits."""

    def send() -> None:
        try:
            async_to_sync(get_channel_layer().group_send)(group, {"type": handler, "payload": payload})
        except Exception:  # a live update is best effort: never fail the write that caused it
            log.warning("could not publish to %s", group, exc_info=True)

    transaction.on_commit(send)


def publish_deployment_status(deployment) -> None:
    from inference.selectors import deployment_status

    replicas = [{"id": r.pk, "state": r.state, "node": r.node.name} for r in deployment.replica_set.select_related("node")]
    payload = {"type": "deployment.status", "deployment": deployment.name, "status": deployment_status(deployment),
               "replicas": replicas}
    publish(team_deployments_group(deployment.team_id), "deployment_status", payload)


def team_jobs_group(team_id: int) -> str:
    return f"team-{team_id}-jobs"


def job_payload(job) -> dict:
    return {
        "type": "job.update", "id": job.pk, "kind": job.kind, "status": job.status,
        "progress": round(job.progress, 1), "message": job.message, "error": job.error,
        "source": job.source_id, "output": job.output_id,
    }


def publish_job(job, log_line: str | None = None) -> None:
    payload = job_payload(job) | ({"log": log_line} if log_line else {})
    publish(team_jobs_group(job.team_id), "job_update", payload)
