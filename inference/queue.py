"""Enqueue Celery tasks by name once the current transaction commits.

Services call these instead of importing `inference.tasks`, so tasks (which call services) and services
never import each other. The names are the ones `inference.tasks` registers.
"""

from __future__ import annotations

from celery import current_app
from django.db import transaction

DEPLOYMENT_RECONCILE = "inference.tasks.deployment_reconcile"
DEPLOYMENTS_RECONCILE_ALL = "inference.tasks.deployments_reconcile_all"
NODES_SWEEP = "inference.tasks.nodes_sweep"
JOB_RUN = "inference.tasks.job_run"
JOBS_REAP = "inference.tasks.jobs_reap"
BLOBS_COLLECT = "inference.tasks.blobs_collect"
ROUTES_PUBLISH_ALL = "inference.tasks.routes_publish_all"  # edges' route tables (issue 10)
DEPLOYMENTS_AUTOSCALE = "inference.tasks.deployments_autoscale"  # celery beat (issue 10)
ROLLOUTS_WATCH = "inference.tasks.rollouts_watch"  # celery beat (issue 10)


def enqueue(name: str, *args: object, countdown: float | None = None) -> None:
    """Send task `name` with `args` after commit (at once when no transaction is open), to run no
    sooner than `countdown` seconds later when given."""
    transaction.on_commit(lambda: current_app.send_task(name, args=args, countdown=countdown))


def deployment_reconcile_later(deployment_id: int) -> None:
    enqueue(DEPLOYMENT_RECONCILE, deployment_id)


def deployments_reconcile_all_later(countdown: float | None = None) -> None:
    enqueue(DEPLOYMENTS_RECONCILE_ALL, countdown=countdown)


def job_run_later(job_id: int) -> None:
    enqueue(JOB_RUN, job_id)
