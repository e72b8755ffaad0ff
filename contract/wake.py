"""Waking a deployment scaled to zero: the task message an edge or the console's ``/v1/`` pushes.

Edges carry no Celery (their images hold nothing of the Django side), so the message is written here in
the shape the console's Celery worker reads from its Redis broker: Celery's task protocol 2 (headers
name the task and its id; the body is ``[args, kwargs, embed]``) inside kombu's Redis envelope (JSON
body, base64-encoded), pushed with LPUSH onto the default queue's list ``<celery key prefix>celery``
(``RedisKeys.celery_keyprefix``, the broker's ``global_keyprefix``). The worker runs ``WAKE_TASK`` with
the deployment's name, which only scales a deployment still at zero (idempotent).
``tests/rollouts/test_rollouts_e2e.py`` has the real worker run a message built here.
"""

from __future__ import annotations

import base64
import json
import uuid

from .redis_keys import RedisKeys

WAKE_TASK = "inference.tasks.deployment_wake"  # args: [deployment name]
DEFAULT_QUEUE = "celery"  # Celery's default queue: the console's worker always consumes it


def wake_queue_key(names: RedisKeys) -> str:
    """The Redis list the worker pops the default queue's messages from."""
    return names.celery_keyprefix() + DEFAULT_QUEUE


def wake_message(deployment: str, origin: str) -> str:
    """The broker message asking the worker to wake ``deployment`` (``origin`` names the sender)."""
    task_id = str(uuid.uuid4())
    args = [deployment]
    embed = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
    body = json.dumps([args, {}, embed]).encode()
    headers: dict[str, object] = {
        "lang": "py", "task": WAKE_TASK, "id": task_id, "shadow": None, "eta": None, "expires": None,
        "group": None, "group_index": None, "retries": 0, "timelimit": [None, None], "root_id": task_id,
        "parent_id": None, "argsrepr": repr(args), "kwargsrepr": "{}", "origin": origin,
        "ignore_result": True, "replaced_task_nesting": 0, "stamped_headers": None, "stamps": {},
    }  # fmt: skip
    properties: dict[str, object] = {
        "correlation_id": task_id, "reply_to": "", "delivery_mode": 2,
        "delivery_info": {"exchange": "", "routing_key": DEFAULT_QUEUE}, "priority": 0,
        "body_encoding": "base64", "delivery_tag": str(uuid.uuid4()),
    }  # fmt: skip
    envelope: dict[str, object] = {"body": base64.b64encode(body).decode("ascii"), "content-encoding": "utf-8",
                "content-type": "application/json", "headers": headers, "properties": properties}  # fmt: skip
    return json.dumps(envelope)
