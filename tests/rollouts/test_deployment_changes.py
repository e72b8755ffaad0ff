"""The one door for a deployment change (``inference.services.deployment_changes``): whatever changed it,
the team's open pages and the edges' route table see it as soon as the change commits, not at the next
periodic rewrite (every ``LANTAU_ROUTES_REPUBLISH_S``) or page refresh."""

from __future__ import annotations

import asyncio
import secrets

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.db import connections
from django.test import Client

from accounts import keycache, keyhash
from accounts.models import AuditEvent
from console.asgi import application
from contract.redis_keys import RedisKeys
from contract.routes import route_open
from inference.credentials import edge_key
from inference.models import Deployment, Replica
from inference.routes_publish import routes_publish_all
from inference.services.deployments import deployment_delete, deployment_reconcile

pytestmark = pytest.mark.django_db(transaction=True)  # changes are announced once they commit


@pytest.fixture(autouse=True)
def own_prefix(settings):
    settings.REDIS_PREFIX = f"changes-{secrets.token_hex(4)}"
    yield
    stale = list(keycache.client().scan_iter(match=f"{settings.REDIS_PREFIX}:*"))
    if stale:
        keycache.client().delete(*stale)


def published(name: str = "colours"):
    names = RedisKeys(django_settings.REDIS_PREFIX)
    raw = keycache.client().hget(names.routes(), name)
    if raw is None:
        return None
    return route_open(raw, keyhash.signer().public_key(), names.prefix, name, edge_key())


def _cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    name = django_settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}".encode()


def _closing(change):
    """``change`` run in another thread, giving that thread's database connection back afterwards."""

    def run() -> None:
        try:
            change()
        finally:
            connections.close_all()

    return run


def _watch_page(user, change, *, within_s: float = 1.0) -> list[dict]:
    """Open the deployments page's websocket, read its snapshot, run ``change`` (in a thread, as a
    worker would) and return what the page was sent within ``within_s`` of the change returning."""

    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", _cookie(user))]

    async def scenario() -> list[dict]:
        page = WebsocketCommunicator(application, "/ws/deployments/", headers=headers)
        connected, _ = await page.connect(timeout=5)
        assert connected
        snapshot = await page.receive_json_from(timeout=5)
        assert snapshot["deployment"] == "colours" and len(snapshot["replicas"]) == 2
        await sync_to_async(_closing(change))()
        seen = []
        try:
            seen.append(await page.receive_json_from(timeout=within_s))
        finally:
            await page.disconnect()
        return seen

    return asyncio.run(scenario())


def test_a_replica_the_reconciler_removes_leaves_the_page_and_the_route_at_once(owner, colours):
    routes_publish_all()  # the edges' table as the periodic rewrite left it: both replicas
    assert len(published().replicas) == 2

    def scale_down_and_reconcile() -> None:
        Deployment.objects.filter(pk=colours.pk).update(replicas=1)
        assert deployment_reconcile(colours.pk)["removed"] == 1  # the reconciler deletes one replica

    seen = _watch_page(owner, scale_down_and_reconcile)
    left = list(Replica.objects.filter(deployment=colours).values_list("pk", flat=True))
    assert len(left) == 1
    assert seen[0]["type"] == "deployment.status" and [r["id"] for r in seen[0]["replicas"]] == left
    assert [r.id for r in published().replicas] == left  # the edge routes to the one left


def test_a_deleted_deployment_leaves_the_route_table_when_it_commits(owner, colours):
    routes_publish_all()
    assert published() is not None
    deployment_delete(team=colours.team, actor=owner, deployment=colours)
    assert published() is None  # edges stop routing now, not at the next rewrite
    assert AuditEvent.objects.filter(action="deployment.delete", target="colours").exists()


def test_a_reconcile_pass_that_changes_nothing_announces_nothing(owner, colours):
    routes_publish_all()
    names = RedisKeys(django_settings.REDIS_PREFIX)
    pubsub = keycache.client().pubsub()
    pubsub.subscribe(names.routes_channel())
    pubsub.get_message(timeout=1)  # the subscription's confirmation
    assert deployment_reconcile(colours.pk)["removed"] == 0
    assert pubsub.get_message(timeout=0.5) is None  # no route rewrite for a pass that changed nothing
    Deployment.objects.filter(pk=colours.pk).update(replicas=1)
    deployment_reconcile(colours.pk)
    message = pubsub.get_message(timeout=2)
    assert message is not None and message["data"] == b"colours"
    pubsub.close()
