"""Websocket consumers: authenticate, join the team's group, forward what is published there."""

import asyncio

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from redis import asyncio as aioredis

from accounts.current import membership_for_scope
from accounts.permissions import membership_allows
from contract.redis_keys import RedisKeys
from inference.live import team_deployments_group, team_jobs_group
from inference.models import Deployment


class TeamGroupConsumer(AsyncJsonWebsocketConsumer):
    """Base: a signed-in member whose role allows `action` joins the per-team group of the team they
    act for (`?team=`, else the switcher's choice, else their first team); anyone else is refused
    (close code 4401 for outsiders, 4403 for a role that may not read this group)."""

    group_for = staticmethod(lambda team_id: "")
    action = ""

    async def connect(self):
        membership = await database_sync_to_async(membership_for_scope)(self.scope)
        if membership is None:
            await self.close(code=4401)
            return
        if not membership_allows(membership, self.action):
            await self.close(code=4403)
            return
        self.group = self.group_for(membership.team_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        pass  # consumers only forward; clients change things through the API


class DeploymentStatusConsumer(TeamGroupConsumer):
    group_for = staticmethod(team_deployments_group)
    action = "deployment.read"

    async def deployment_status(self, event):
        await self.send_json(event["payload"])


class JobUpdatesConsumer(TeamGroupConsumer):
    group_for = staticmethod(team_jobs_group)
    action = "job.read"

    async def job_update(self, event):
        await self.send_json(event["payload"])


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
