"""Celery tasks: thin wrappers that call one service each."""

from __future__ import annotations

from celery import shared_task

from inference.models import Deployment


@shared_task(name="inference.tasks.deployment_reconcile")
def deployment_reconcile_task(deployment_id: int) -> dict:
    """Place or remove replicas so the deployment matches its desired state."""
    from inference.services.deployments import deployment_reconcile

    return deployment_reconcile(deployment_id)


@shared_task(name="inference.tasks.deployments_reconcile_all")
def deployments_reconcile_all() -> int:
    """Periodic safety net: reconcile every deployment (cheap and idempotent)."""
    from inference.services.deployments import deployment_reconcile

    ids = list(Deployment.objects.values_list("pk", flat=True))
    for pk in ids:
        deployment_reconcile(pk)
    return len(ids)


@shared_task(name="inference.tasks.nodes_sweep")
def nodes_sweep_task() -> int:
    """Mark silent nodes offline (runs every few seconds from celery beat)."""
    from inference.services.nodes import nodes_sweep

    return nodes_sweep()


@shared_task(name="inference.tasks.job_run")
def job_run_task(job_id: int) -> str:
    """Run one conversion, quantization, evaluation or benchmark job to a terminal state."""
    from inference.services.job_execution import job_execute

    return job_execute(job_id)


@shared_task(name="inference.tasks.jobs_reap")
def jobs_reap_task() -> int:
    """End jobs whose worker died (no heartbeat for 45 s)."""
    from inference.services.jobs import jobs_reap

    return jobs_reap()
