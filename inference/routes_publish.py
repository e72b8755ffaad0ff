"""The console's side of route tables: what a deployment's route is, and publishing it to edges.

A route lists the ready replicas on online nodes (``route_entry``; the console's own `/v1/` reads the
same definition from the database). ``routes_publish`` writes the deployment's signed entry
(``contract.routes``) into ``<prefix>:routes`` after the transaction commits and announces it on
``<prefix>:routes:changed``; it is called wherever a replica's state changes
(``inference.live.publish_deployment_status``). ``routes_publish_all`` (celery beat, every
``LANTAU_ROUTES_REPUBLISH_S``) rewrites the whole table, dropping deleted deployments, and catches
anything else that changed a route (a node gone offline, a paused deployment). A Redis outage never
fails the change that triggered a publish: the next full rewrite repairs the table.
"""

from __future__ import annotations

import logging
from functools import partial

import redis
from django.conf import settings
from django.db import transaction
from redis.exceptions import RedisError

from accounts import keyhash
from contract.redis_acl import EDGE, REDIS_PASSWORD_ENV, REDIS_USER_ENV
from contract.redis_keys import PREFIX_ENV, RedisKeys
from contract.routes import (
    ALL_ROUTES,
    EDGE_KEY_ENV,
    RouteEntry,
    RouteReplica,
    edge_key_text,
    route_sign,
)
from contract.signing import public_key_text
from inference.credentials import edge_key, redis_user_credentials, redis_user_url, runner_token
from inference.models import Deployment, DesiredState, NodeStatus, ReplicaState

log = logging.getLogger("lantau.routes")


def route_entry(deployment: Deployment) -> RouteEntry:
    """The deployment's route now: ready replicas with a URL on online nodes, with their runner tokens;
    with a canary, its replicas marked and the share of requests they take."""
    canary = deployment.canary_version_id if deployment.canary_percent else None
    replicas = deployment.replica_set.filter(
        state=ReplicaState.READY, node__status=NodeStatus.ONLINE
    ).select_related("node")
    return RouteEntry(
        name=deployment.name,
        team_id=deployment.team_id,
        task=deployment.model_version.model.task,
        model_version=str(deployment.model_version),
        paused=deployment.desired_state == DesiredState.PAUSED,
        created=int(deployment.created_at.timestamp()),
        replicas=tuple(
            RouteReplica(
                r.pk,
                r.url,
                r.node.region,
                r.node.name,
                runner_token(r.pk),
                canary is not None and r.model_version_id == canary,
            )
            for r in replicas
            if r.url
        ),  # fmt: skip
        canary_percent=deployment.canary_percent if canary is not None else 0,
        scales_from_zero=scales_from_zero(deployment),
    )


def scales_from_zero(deployment: Deployment) -> bool:
    """Autoscaling that may go down to no replica: requests finding none are held while it wakes."""
    return (
        deployment.max_replicas > 0
        and deployment.min_replicas == 0
        and deployment.desired_state == DesiredState.RUNNING
    )


def edge_environment() -> dict[str, str]:
    """What an edge process needs from this console, as environment variables (secrets never go on a
    command line): the edge key (a secret), the public key of signed entries, Redis and its prefix."""
    return {
        EDGE_KEY_ENV: edge_key_text(edge_key()),
        "LANTAU_KEY_VERIFY_KEY": public_key_text(keyhash.signer()),
        "LANTAU_REDIS_URL": settings.REDIS_URL,
        PREFIX_ENV: settings.REDIS_PREFIX,
        **edge_redis_user(),
    }


def edge_redis_user() -> dict[str, str]:
    """With ``LANTAU_REDIS_ACL``: the edge's own Redis user instead of the console's, in the URL and as
    user and password (an agent with its own Redis URL puts them on it: ``inference.agent.edge``)."""
    if not settings.REDIS_ACL:
        return {}
    user, password = redis_user_credentials(EDGE)
    return {"LANTAU_REDIS_URL": redis_user_url(EDGE), REDIS_USER_ENV: user, REDIS_PASSWORD_ENV: password}


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def _signed(deployment: Deployment, names: RedisKeys) -> str:
    return route_sign(keyhash.signer(), names.prefix, route_entry(deployment), edge_key())


def _publish_now(deployment_id: int, name: str) -> None:
    names = RedisKeys(settings.REDIS_PREFIX)
    deployment = Deployment.objects.select_related("model_version__model").filter(pk=deployment_id).first()
    try:
        client = _client()
        if deployment is None:
            client.hdel(names.routes(), name)
        else:
            client.hset(names.routes(), deployment.name, _signed(deployment, names))
        client.publish(names.routes_channel(), name)
    except RedisError as exc:
        log.warning("route of %s not published (the periodic rewrite will): %s", name, exc)


def routes_publish(deployment: Deployment) -> None:
    """Publish the deployment's route to edges once the current transaction commits."""
    transaction.on_commit(partial(_publish_now, deployment.pk, deployment.name))


def routes_publish_all() -> int:
    """Rewrite every deployment's route and drop the routes of deleted ones; the number written."""
    names = RedisKeys(settings.REDIS_PREFIX)
    table = {d.name: _signed(d, names) for d in Deployment.objects.select_related("model_version__model")}
    client = _client()
    fields = [
        f.decode("utf-8", "replace") if isinstance(f, bytes) else f for f in client.hkeys(names.routes())
    ]
    stale = [f for f in fields if f not in table]
    with client.pipeline() as pipe:
        if stale:
            pipe.hdel(names.routes(), *stale)
        for name, entry in table.items():
            pipe.hset(names.routes(), name, entry)
        pipe.publish(names.routes_channel(), ALL_ROUTES)
        pipe.execute()
    return len(table)
