"""Websocket consumers: authenticate, join the team's group, forward what is published there."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from accounts.selectors import membership_for
from console.live import team_deployments_group


class DeploymentStatusConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        membership = await database_sync_to_async(membership_for)(user=user)
        if membership is None:
            await self.close(code=4401)
            return
        self.group = team_deployments_group(membership.team_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def deployment_status(self, event):
        await self.send_json(event["payload"])
