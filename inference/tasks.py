"""Celery tasks: thin wrappers that call one service each.

Services never import this module: they enqueue by these names through `inference.queue`.
"""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError

from inference import queue
from inference.jobs.runner import job_execute
from inference.models import Deployment
from inference.services.deployments import deployment_reconcile
from inference.services.jobs import jobs_reap
from inference.services.nodes import nodes_sweep


@shared_task(name=queue.DEPLOYMENT_RECONCILE)
def deployment_reconcile_task(deployment_id: int) -> dict:
    """Place or remove replicas so the deployment matches its desired state."""
    return deployment_reconcile(deployment_id)


@shared_task(name=queue.DEPLOYMENTS_RECONCILE_ALL)
def deployments_reconcile_all() -> int:
    """Periodic safety net: reconcile every deployment (cheap and idempotent)."""
    ids = list(Deployment.objects.values_list("pk", flat=True))
    for pk in ids:
        deployment_reconcile(pk)
    return len(ids)


@shared_task(name=queue.NODES_SWEEP)
def nodes_sweep_task() -> int:
    """Mark silent nodes offline (runs every few seconds from celery beat)."""
    return nodes_sweep()


# A job whose task meets PostgreSQL down (restarting) would stay queued for ever: nothing else
# enqueues it again. Retrying is safe because the claim is a conditional UPDATE (queued to running).
@shared_task(
    name=queue.JOB_RUN,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=1,
    retry_backoff_max=30,
    retry_jitter=False,
    max_retries=20,
)
def job_run_task(job_id: int) -> str:
    """Run one conversion, quantization, evaluation or benchmark job to a terminal state."""
    return job_execute(job_id)


@shared_task(name=queue.JOBS_REAP)
def jobs_reap_task() -> int:
    """End jobs whose worker died (no heartbeat for 45 s)."""
    return jobs_reap()
