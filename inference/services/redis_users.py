"""Redis ACL users of the install's processes (``contract.redis_acl``): created by the console, handed out.

With ``LANTAU_REDIS_ACL`` on, the console (whose ``REDIS_URL`` may run ``ACL SETUSER``) keeps one user
per kind of process: ``<prefix>-edge``, ``<prefix>-agent`` and ``<prefix>-runner-<deployment>`` for
each deployment. Passwords are derived from ``SECRET_KEY`` and ``LANTAU_REDIS_ACL_EPOCH``, never
stored; a new epoch and ``manage.py redis_acl apply`` rotate them all. Edges get their user in the edge
environment (``inference.routes_publish.edge_environment``), runners theirs in each desired replica of
a heartbeat (``inference.services.nodes.desired_for``); agents put it on their own Redis URL.
Creating a deployment creates its runner user, deleting it deletes the user.
"""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from redis.exceptions import RedisError

from contract.redis_acl import (
    AGENT,
    EDGE,
    RUNNER,
    acl_file_line,
    acl_rules,
    selectors_supported,
    setuser_args,
    user_name,
)
from inference.credentials import redis_user_credentials
from inference.models import Deployment

log = logging.getLogger("lantau.redis_acl")


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)


def redis_selectors(client: redis.Redis) -> bool:
    """Whether the server takes Redis 7's rules (selectors, ``%R~``/``%W~``)."""
    info = client.info("server")
    return selectors_supported(str(info.get("redis_version", "")))


def _setuser(client: redis.Redis, kind: str, deployment: str | None, selectors: bool) -> str:
    user, password = redis_user_credentials(kind, deployment)
    rules = acl_rules(settings.REDIS_PREFIX, kind, deployment, selectors=selectors)
    client.execute_command("ACL", "SETUSER", *setuser_args(user, password, rules))
    return user


def _runner_users(client: redis.Redis) -> set[str]:
    """Runner users of this install that exist in Redis now."""
    start = user_name(settings.REDIS_PREFIX, RUNNER, "x")[:-1]
    names = (n.decode() if isinstance(n, bytes) else str(n) for n in client.execute_command("ACL", "USERS"))
    return {n for n in names if n.startswith(start)}


def redis_users_apply(*, drop_previous: bool = False, client: redis.Redis | None = None) -> list[str]:
    """``ACL SETUSER`` for the edge, the agent and every current deployment's runner (idempotent: each
    user is reset to exactly its rules and password). ``drop_previous`` deletes runner users of
    deployments that no longer exist. Returns the users set; RedisError when Redis refuses."""
    client = client or _client()
    selectors = redis_selectors(client)
    done = [_setuser(client, EDGE, None, selectors), _setuser(client, AGENT, None, selectors)]
    for name in Deployment.objects.order_by("name").values_list("name", flat=True):
        done.append(_setuser(client, RUNNER, name, selectors))
    if drop_previous:
        stale = sorted(_runner_users(client) - set(done))
        if stale:
            client.execute_command("ACL", "DELUSER", *stale)
            log.info("Redis users of deleted deployments removed: %s", ", ".join(stale))
    return done


def redis_runner_user_ensure(deployment: str) -> None:
    """Create (or reset) the runner user of ``deployment``; a Redis outage is logged, not raised
    (``redis_acl apply`` repairs it), since the deployment itself was made."""
    if not settings.REDIS_ACL:
        return
    try:
        client = _client()
        _setuser(client, RUNNER, deployment, redis_selectors(client))
    except RedisError as exc:
        log.warning(
            "Redis user of deployment %s not created (run manage.py redis_acl apply): %s", deployment, exc
        )


def redis_runner_user_drop(deployment: str) -> None:
    """Delete the runner user of a deleted deployment (its runners lose Redis at once)."""
    if not settings.REDIS_ACL:
        return
    try:
        _client().execute_command("ACL", "DELUSER", user_name(settings.REDIS_PREFIX, RUNNER, deployment))
    except RedisError as exc:
        log.warning(
            "Redis user of deployment %s not deleted (redis_acl apply --drop-previous): %s", deployment, exc
        )


def redis_acl_lines(*, selectors: bool = True) -> list[str]:
    """ACL file lines (``aclfile``) of every user ``redis_users_apply`` sets, passwords as SHA-256."""
    wanted: list[tuple[str, str | None]] = [(EDGE, None), (AGENT, None)]
    wanted += [(RUNNER, n) for n in Deployment.objects.order_by("name").values_list("name", flat=True)]
    lines = []
    for kind, deployment in wanted:
        user, password = redis_user_credentials(kind, deployment)
        lines.append(acl_file_line(user, password, acl_rules(settings.REDIS_PREFIX, kind, deployment,
                                                               selectors=selectors)))  # fmt: skip
    return lines


def redis_runner_credentials(deployment: str) -> dict[str, str]:
    """What a desired replica carries for its runner when ACLs are on: its user and password."""
    if not settings.REDIS_ACL:
        return {}
    user, password = redis_user_credentials(RUNNER, deployment)
    return {"redis_user": user, "redis_password": password}
