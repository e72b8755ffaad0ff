"""Review M-G: each deployment-metrics websocket opened a Redis client of its own and SCANned the whole
keyspace, with no per-person limit, so one member (a viewer is enough) could exhaust Redis's clients.
Review L-C: sockets were authorised only when they connected, so a removed member kept receiving pushes.

Now a console process holds one subscription for every metrics socket (``inference.metrics_hub``), one
person holds at most ``LANTAU_WS_PER_USER`` sockets per process, and every socket checks again every
``LANTAU_WS_RECHECK_S`` that it may stay. Measured on a Redis server of the test's own, so the count of
connected clients is exact.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import redis
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from accounts.team_services import member_remove
from console.asgi import application
from inference import metrics_hub
from inference.models import Replica
from inference.services.deployments import DeploymentSpec, deployment_create, deployment_reconcile
from tests.security.dataplane import PrivateRedis, colour_deployment
from tests.support.summaries import sealed_summary

pytestmark = pytest.mark.django_db(transaction=True)


def headers_for(user) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    return [(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", cookie.encode())]


@pytest.fixture
def private_redis(tmp_path: Path, settings):
    server = PrivateRedis(tmp_path)
    settings.REDIS_URL = server.url
    yield server
    server.stop()


def clients_of(server: PrivateRedis) -> list[str]:
    """The last command of each connected client but the probes (named, so a closed probe the server
    has not reaped yet is not counted either)."""
    probe = redis.Redis.from_url(server.url, client_name="probe")
    try:
        return [str(c.get("cmd")) for c in probe.client_list() if c.get("name") != "probe"]
    finally:
        probe.close()


def test_m_g_many_metrics_sockets_share_one_redis_subscription_and_one_person_is_capped(
    private_redis, settings, owner, viewer, team, tmp_path
) -> None:
    settings.WS_PER_USER = 10
    replica = colour_deployment(team, owner, tmp_path)
    spec = DeploymentSpec(name="shapes", model_version_id=replica.model_version_id)
    shapes = deployment_create(team=team, actor=owner, spec=spec)
    deployment_reconcile(shapes.pk)
    other_replica = Replica.objects.get(deployment=shapes)
    genuine = sealed_summary("colours", replica.pk, requests=3)
    seen = {}
    vera, olivia = headers_for(viewer), headers_for(owner)

    async def scenario() -> None:
        before = clients_of(private_redis)
        sockets = []
        for _ in range(10):
            socket = WebsocketCommunicator(application, "/ws/deployments/colours/metrics/", headers=vera)
            connected, _ = await socket.connect(timeout=5)
            assert connected
            sockets.append(socket)
        after = clients_of(private_redis)
        seen["growth"], seen["clients"] = len(after) - len(before), after
        extra = WebsocketCommunicator(application, "/ws/deployments/colours/metrics/", headers=vera)
        seen["over_the_cap"] = await extra.connect(timeout=5)
        # A summary published by a runner reaches every socket once; planted ones reach none: not JSON,
        # not sealed, sealed by a replica of another deployment (its host holds that replica's token).
        publisher = redis.Redis.from_url(private_redis.url)
        channel = f"{settings.REDIS_PREFIX}:metrics:colours"
        publisher.publish(channel, b"\x80\x04not json")
        publisher.publish(channel, json.loads(genuine)["body"])
        publisher.publish(channel, sealed_summary("colours", other_replica.pk, requests=9))
        publisher.publish(channel, genuine)
        publisher.close()
        seen["received"] = [await s.receive_from(timeout=5) for s in sockets]
        seen["quiet"] = [await s.receive_nothing(timeout=0.3) for s in sockets]
        other = WebsocketCommunicator(application, "/ws/deployments/colours/metrics/", headers=olivia)
        seen["someone_else"] = (await other.connect(timeout=5))[0]  # the cap is per person
        await other.disconnect()
        for socket in sockets:
            await socket.disconnect()
        again = WebsocketCommunicator(application, "/ws/deployments/colours/metrics/", headers=vera)
        seen["after_closing"] = (await again.connect(timeout=5))[0]  # closed sockets free their places
        await again.disconnect()
        await metrics_hub.hub().redis.aclose()

    asyncio.run(scenario())
    # The hub's bounded pool, its subscription included, not a client (or more) per socket.
    assert seen["growth"] <= metrics_hub.HUB_CONNECTIONS < 10, seen
    assert seen["over_the_cap"] == (False, 4429)
    assert [json.loads(text) for text in seen["received"]] == [json.loads(json.loads(genuine)["body"])] * 10
    assert all(seen["quiet"])
    assert seen["someone_else"] is True and seen["after_closing"] is True


def test_l_c_a_removed_member_is_disconnected_within_the_recheck_period(
    settings, owner, teammate, team
) -> None:
    settings.WS_RECHECK_S = 1
    seen = {}
    tom = headers_for(teammate)

    async def scenario() -> None:
        socket = WebsocketCommunicator(application, "/ws/deployments/", headers=tom)
        connected, _ = await socket.connect(timeout=5)
        assert connected
        while not await socket.receive_nothing(timeout=0.3):
            await socket.receive_output()  # the snapshot
        from channels.db import database_sync_to_async

        await database_sync_to_async(member_remove)(team=team, actor=owner, username="tom")
        seen["closed"] = await socket.receive_output(timeout=5)

    asyncio.run(scenario())
    assert seen["closed"] == {"type": "websocket.close", "code": 4401}


def test_l_c_a_password_change_ends_the_socket(settings, owner, team) -> None:
    settings.WS_RECHECK_S = 1
    seen = {}
    olivia = headers_for(owner)

    async def scenario() -> None:
        socket = WebsocketCommunicator(application, "/ws/jobs/", headers=olivia)
        assert (await socket.connect(timeout=5))[0]
        from channels.db import database_sync_to_async

        def change() -> None:
            owner.set_password("a-new-password-123456")
            owner.save()

        await database_sync_to_async(change)()
        while True:
            message = await socket.receive_output(timeout=5)
            if message["type"] == "websocket.close":
                seen["closed"] = message
                return

    asyncio.run(scenario())
    assert seen["closed"]["code"] == 4401
