"""The Celery app: conversion jobs, deployment placement and periodic clean-up run here."""

import logging
import os

from celery import Celery
from celery.signals import worker_init, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
log = logging.getLogger("lantau.sandbox")


@worker_init.connect
def share_data_group(**_: object) -> None:
    """A root worker (the image's, so that the sandbox can drop to another uid) writes what the console,
    which runs as ``LANTAU_WORKER_DATA_GROUP``'s user, can still write: that group, group-writable."""
    import grp

    group = os.environ.get("LANTAU_WORKER_DATA_GROUP", "")
    if group and os.geteuid() == 0:
        os.setegid(grp.getgrnam(group).gr_gid)
        os.umask(0o002)


@worker_ready.connect
def sandbox_state(sender: object = None, **_: object) -> None:
    """Say at start whether model jobs can run here (the sandbox's isolation, whether it is required):
    in the log, and in Redis for the console's /readyz."""
    import json
    import socket

    from django.conf import settings

    from accounts import keycache
    from contract.redis_keys import RedisKeys
    from inference.sandbox import isolation, isolation_refusal

    found = isolation()
    refusal = isolation_refusal(found)
    required = bool(settings.SANDBOX_REQUIRE_ISOLATION) and not settings.SANDBOX_UNSAFE
    state = {"isolated": refusal is None, "model_jobs": "run" if refusal is None or not required else "refused",
             "probe": found, "reason": refusal}  # fmt: skip
    try:
        keycache.client().hset(RedisKeys(settings.REDIS_PREFIX).sandbox_workers(), socket.gethostname(),
                               json.dumps(state))  # fmt: skip
    except Exception:  # the log below still says it
        log.exception("sandbox: could not publish the sandbox state to Redis")
    if refusal is None:
        log.info("sandbox: isolated (another uid, a network namespace); model jobs run")
    elif settings.SANDBOX_REQUIRE_ISOLATION and not settings.SANDBOX_UNSAFE:
        log.error("sandbox: model jobs (imports, conversions, exports) will be REFUSED: %s", refusal)
    else:
        log.warning("sandbox: RUNNING MODEL CODE WITHOUT ISOLATION (accepted by the operator): %s", refusal)
