"""Websocket consumers: authenticate, join the team's group, forward what is published there."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from accounts.selectors import membership_for
from console.live import team_deployments_group, team_jobs_group


class TeamGroupConsumer(AsyncJsonWebsocketConsumer):
    """Base: a signed-in member joins one per-team group; anyone else is refused (close code 4401)."""

    group_for = staticmethod(lambda team_id: "")

    async def connect(self):
        membership = await database_sync_to_async(membership_for)(user=self.scope.get("user"))
        if membership is None:
            await self.close(code=4401)
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

    async def deployment_status(self, event):
        await self.send_json(event["payload"])


class JobUpdatesConsumer(TeamGroupConsumer):
    group_for = staticmethod(team_jobs_group)

    async def job_update(self, event):
        await self.send_json(event["payload"])
