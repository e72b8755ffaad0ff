"""Websocket consumers: authenticate, join the team's (or node's) group, forward what is published there.

Every consumer first sends what a page needs to be current (the team's deployment states, its recent
jobs, a node's recent figures), so a page that reconnects after a drop back-fills the gap; a client may
also send ``{"since": <epoch seconds>}`` to ask for what it missed.
"""

import asyncio
import math
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from redis import asyncio as aioredis

from accounts.current import membership_for_scope
from accounts.permissions import membership_allows
from contract.redis_keys import RedisKeys
from inference.live import (
    deployments_snapshot,
    jobs_snapshot,
    node_stats_group,
    node_stats_history,
    overview_tick,
    team_deployments_group,
    team_jobs_group,
)
from inference.models import Deployment, Node

OVERVIEW_EVERY_S = 2.0


class TeamGroupConsumer(AsyncJsonWebsocketConsumer):
    """Base: a signed-in member whose role allows `action` joins the per-team group of the team they
    act for (`?team=`, else the switcher's choice, else their first team); anyone else is refused
    (close code 4401 for outsiders, 4403 for a role that may not read this group)."""

    group_for = staticmethod(lambda team_id: "")
    snapshot: Any = staticmethod(lambda team_id: [])
    action = ""

    async def connect(self):
        membership = await database_sync_to_async(membership_for_scope)(self.scope)
        if membership is None:
            await self.close(code=4401)
            return
        if not membership_allows(membership, self.action):
            await self.close(code=4403)
            return
        self.team_id = membership.team_id
        self.group = self.group_for(membership.team_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_snapshot()

    async def send_snapshot(self):
        for payload in await database_sync_to_async(self.snapshot)(self.team_id):
            await self.send_json(dict(payload))

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        # Consumers only forward; clients change things through the API. `since` re-sends the state.
        if isinstance(content, dict) and "since" in content and hasattr(self, "team_id"):
            await self.send_snapshot()


class DeploymentStatusConsumer(TeamGroupConsumer):
    group_for = staticmethod(team_deployments_group)
    snapshot = staticmethod(deployments_snapshot)
    action = "deployment.read"

    async def deployment_status(self, event):
        await self.send_json(event["payload"])


class JobUpdatesConsumer(TeamGroupConsumer):
    group_for = staticmethod(team_jobs_group)
    snapshot = staticmethod(jobs_snapshot)
    action = "job.read"

    async def job_update(self, event):
        await self.send_json(event["payload"])


class OverviewConsumer(AsyncJsonWebsocketConsumer):
    """The overview page: the team's deployment and job pushes, plus every few seconds its traffic per
    region and the nodes' figures (`inference.live.overview_tick`)."""

    async def connect(self):
        membership = await database_sync_to_async(membership_for_scope)(self.scope)
        if membership is None or not membership_allows(membership, "deployment.read"):
            await self.close(code=4401)
            return
        self.team_id = membership.team_id
        self.groups_joined = [team_deployments_group(self.team_id), team_jobs_group(self.team_id)]
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        for payload in await database_sync_to_async(deployments_snapshot)(self.team_id):
            await self.send_json(dict(payload))
        self.ticker = asyncio.create_task(self._tick())

    async def _tick(self):
        while True:
            await self.send_json(await database_sync_to_async(overview_tick)(team_id=self.team_id))
            await asyncio.sleep(OVERVIEW_EVERY_S)

    async def deployment_status(self, event):
        await self.send_json(event["payload"])

    async def job_update(self, event):
        await self.send_json(event["payload"])

    async def disconnect(self, code):
        if hasattr(self, "ticker"):
            self.ticker.cancel()
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        pass


class NodeStatsConsumer(AsyncJsonWebsocketConsumer):
    """One node's heartbeat figures. Nodes are install-wide: any signed-in member of a team whose role
    may read nodes may watch them (code 4401 otherwise, 4404 for a node that does not exist). On connect,
    and on ``{"since": ts}``, the node's recent history is sent first (oldest first)."""

    async def connect(self):
        self.node = self.scope["url_route"]["kwargs"]["name"]
        allowed = await database_sync_to_async(_may_read_nodes)(self.scope)
        if not allowed:
            await self.close(code=4401)
            return
        if not await database_sync_to_async(Node.objects.filter(name=self.node).exists)():
            await self.close(code=4404)
            return
        self.group = node_stats_group(self.node)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self._history(_since_from_query(self.scope))

    async def _history(self, since: float):
        items = await database_sync_to_async(node_stats_history)(self.node, since)
        await self.send_json({"type": "node.history", "node": self.node, "items": items})

    async def node_stats(self, event):
        await self.send_json(event["payload"])

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        since = content.get("since") if isinstance(content, dict) else None
        if isinstance(since, int | float) and not isinstance(since, bool) and hasattr(self, "group"):
            await self._history(float(since))


def _since_from_query(scope: dict) -> float:
    """``?since=<epoch seconds>`` of a reconnecting page: only what it missed is sent; else everything."""
    raw = (parse_qs(scope.get("query_string", b"").decode("latin-1")).get("since") or ["0"])[0]
    try:
        since = float(raw)
    except ValueError:
        return 0.0
    return since if math.isfinite(since) else 0.0


def _may_read_nodes(scope: dict) -> bool:
    return membership_allows(membership_for_scope(scope), "node.read")


class DeploymentMetricsConsumer(AsyncJsonWebsocketConsumer):
    """Forwards the runners' per-second summaries (Redis pub/sub `<prefix>:metrics:<deployment>`, see contract.redis_keys) to one page.

    Only members of the deployment's team may subscribe; the runners publish whether or not anyone listens.
    """

    async def connect(self):
        name = self.scope["url_route"]["kwargs"]["name"]
        if not await database_sync_to_async(_may_watch)(self.scope, name):
            await self.close(code=4404)
            return
        await self.accept()
        self.redis = aioredis.Redis.from_url(settings.REDIS_URL)
        self.pubsub = self.redis.pubsub()
        await self.pubsub.subscribe(RedisKeys(settings.REDIS_PREFIX).metrics_channel(name))
        for raw in await _latest(
            self.redis, name
        ):  # the last second of each replica, for an instant first point
            await self.send(text_data=raw.decode())
        self.pump = asyncio.create_task(self._pump())

    async def _pump(self):
        async for message in self.pubsub.listen():
            if message["type"] == "message":
                await self.send(text_data=message["data"].decode())

    async def disconnect(self, code):
        if hasattr(self, "pump"):
            self.pump.cancel()
        if hasattr(self, "pubsub"):
            await self.pubsub.aclose()
            await self.redis.aclose()

    async def receive_json(self, content, **kwargs):
        pass


def _may_watch(scope: dict, name: str) -> bool:
    membership = membership_for_scope(scope)
    if membership is None or not membership_allows(membership, "deployment.read"):
        return False
    return Deployment.objects.filter(team=membership.team, name=name).exists()


async def _latest(redis, name: str) -> list[bytes]:
    keys = [
        key
        async for key in redis.scan_iter(
            match=RedisKeys(settings.REDIS_PREFIX).metrics_last_pattern(name), count=100
        )
    ]
    values = await redis.mget(keys) if keys else []
    return [v for v in values if v]
