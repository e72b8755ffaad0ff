"""The Celery app: conversion jobs, deployment placement and periodic clean-up run here."""

import logging
import os

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
log = logging.getLogger("lantau.sandbox")


@worker_ready.connect
def sandbox_state(**_: object) -> None:
    """Say at start whether model jobs can run here: the sandbox's isolation, and whether it is required."""
    from django.conf import settings

    from inference.sandbox import isolation, isolation_refusal

    refusal = isolation_refusal(isolation())
    if refusal is None:
        log.info("sandbox: isolated (another uid, a network namespace); model jobs run")
    elif settings.SANDBOX_REQUIRE_ISOLATION and not settings.SANDBOX_UNSAFE:
        log.error("sandbox: model jobs (imports, conversions, exports) will be REFUSED: %s", refusal)
    else:
        log.warning("sandbox: RUNNING MODEL CODE WITHOUT ISOLATION (accepted by the operator): %s", refusal)
