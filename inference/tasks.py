"""Celery tasks: thin wrappers that call one service each.

Services never import this module: they enqueue by these names through `inference.queue`.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import InterfaceError, OperationalError

from contract.wake import WAKE_TASK
from inference import queue
from inference.jobs.runner import job_execute
from inference.models import Deployment
from inference.routes_publish import routes_publish_all
from inference.services.autoscale import deployment_wake, deployments_autoscale
from inference.services.blobs import blobs_collect
from inference.services.deployments import deployment_reconcile
from inference.services.jobs import jobs_reap
from inference.services.nodes import nodes_sweep
from inference.services.rollout_watch import rollouts_watch

log = logging.getLogger("lantau.tasks")


@shared_task(name=queue.DEPLOYMENT_RECONCILE)
def deployment_reconcile_task(deployment_id: int) -> dict:
    """Place or remove replicas so the deployment matches its desired state."""
    return deployment_reconcile(deployment_id)


@shared_task(name=queue.DEPLOYMENTS_RECONCILE_ALL)
def deployments_reconcile_all() -> int:
    """Periodic safety net: reconcile every deployment (cheap and idempotent), so restarts of the
    console, the worker or an agent converge by themselves. One deployment failing skips only it."""
    ids = list(Deployment.objects.values_list("pk", flat=True))
    for pk in ids:
        try:
            deployment_reconcile(pk)
        except (OperationalError, InterfaceError):
            raise  # the database is down: the next beat tries again
        except Exception:
            log.exception("reconciling deployment %s failed", pk)
    return len(ids)


@shared_task(name=queue.DEPLOYMENTS_AUTOSCALE)
def deployments_autoscale_task() -> int:
    """Sample the requests in flight and scale deployments with autoscaling (celery beat,
    LANTAU_AUTOSCALE_EVERY_S); each change recorded with its reason."""
    return deployments_autoscale()


@shared_task(name=WAKE_TASK)
def deployment_wake_task(name: str) -> bool:
    """Sent by an edge or the console's /v1/ holding a request to a deployment scaled to zero."""
    return deployment_wake(name)


@shared_task(name=queue.ROLLOUTS_WATCH)
def rollouts_watch_task() -> int:
    """Count the new replicas' errors of running rollouts and canaries; roll back (abort) those above
    LANTAU_ROLLOUT_MAX_ERROR_PERCENT (celery beat, LANTAU_ROLLOUT_WATCH_S)."""
    return rollouts_watch()


@shared_task(name=queue.ROUTES_PUBLISH_ALL)
def routes_publish_all_task() -> int:
    """Rewrite the route tables edges read (celery beat): the safety net behind per-change publishing."""

    return routes_publish_all()


@shared_task(name=queue.NODES_SWEEP)
def nodes_sweep_task() -> int:
    """Mark silent nodes not ready (every 2 s from celery beat; LANTAU_NODE_SWEEP_S)."""
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


@shared_task(name=queue.BLOBS_COLLECT)
def blobs_collect_task() -> int:
    """Delete stored blobs that no model version, dataset or job uses any more (hourly)."""
    return blobs_collect()
