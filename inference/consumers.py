"""Websocket consumers: authenticate, join the team's (or node's) group, forward what is published there.

Every consumer first sends what a page needs to be current (the team's deployment states, its recent
jobs, a node's recent figures), so a page that reconnects after a drop back-fills the gap; a client may
also send ``{"since": <epoch seconds>}`` to ask for what it missed.
"""

import asyncio
import math
from typing import Any
from urllib.parse import parse_qs

from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from accounts.current import membership_for_scope
from accounts.permissions import membership_allows
from inference import metrics_hub
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
CLOSE_TOO_MANY = 4429  # the person already holds LANTAU_WS_PER_USER sockets in this process
_open_by_user: dict[int, int] = {}


class Guarded(AsyncJsonWebsocketConsumer):
    """What every socket obeys (reviews M-G, L-C): at most ``LANTAU_WS_PER_USER`` open per person in
    one console process (4429 beyond), and its right to stay is checked again every
    ``LANTAU_WS_RECHECK_S``: a person signed out elsewhere, whose password changed (Django's session
    hash), who was deactivated or removed from the team, or whose role no longer allows ``action`` is
    disconnected (4401) instead of receiving the team's pushes until they close the page."""

    action = ""

    async def admit(self) -> bool:
        user = self.scope.get("user")
        uid = getattr(user, "pk", None)
        if uid is None:
            return True  # refused by the membership check that follows
        if _open_by_user.get(uid, 0) >= settings.WS_PER_USER:
            await self.close(code=CLOSE_TOO_MANY)
            return False
        _open_by_user[uid] = _open_by_user.get(uid, 0) + 1
        self.counted_uid = uid
        return True

    def watch(self) -> None:
        self.rechecker = asyncio.create_task(self._recheck())

    async def still_allowed(self) -> bool:
        user = await get_user(self.scope)  # re-reads the session: a changed password ends it here
        if not getattr(user, "is_authenticated", False) or user.pk != getattr(self, "counted_uid", None):
            return False
        return await database_sync_to_async(_still_member)(self.scope, user, self.action)

    async def _recheck(self):
        while True:
            await asyncio.sleep(settings.WS_RECHECK_S)
            if not await self.still_allowed():
                await self.close(code=4401)
                return

    async def release(self) -> None:
        if hasattr(self, "rechecker"):
            self.rechecker.cancel()
        uid = getattr(self, "counted_uid", None)
        if uid is not None:
            left = _open_by_user.get(uid, 1) - 1
            if left > 0:
                _open_by_user[uid] = left
            else:
                _open_by_user.pop(uid, None)
            self.counted_uid = None


def _still_member(scope: dict, user, action: str) -> bool:
    membership = membership_for_scope({**scope, "user": user})
    if membership is None or not user.is_active:
        return False
    team_id = scope.get("lantau_team_id")
    return membership.team_id == team_id and (not action or membership_allows(membership, action))


class TeamGroupConsumer(Guarded):
    """Base: a signed-in member whose role allows `action` joins the per-team group of the team they
    act for (`?team=`, else the switcher's choice, else their first team); anyone else is refused
    (close code 4401 for outsiders, 4403 for a role that may not read this group)."""

    group_for = staticmethod(lambda team_id: "")
    snapshot: Any = staticmethod(lambda team_id: [])
    action = ""

    async def connect(self):
        if not await self.admit():
            return
        membership = await database_sync_to_async(membership_for_scope)(self.scope)
        if membership is None:
            await self.close(code=4401)
            return
        if not membership_allows(membership, self.action):
            await self.close(code=4403)
            return
        self.team_id = self.scope["lantau_team_id"] = membership.team_id
        self.group = self.group_for(membership.team_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.watch()
        await self.send_snapshot()

    async def send_snapshot(self):
        for payload in await database_sync_to_async(self.snapshot)(self.team_id):
            await self.send_json(dict(payload))

    async def disconnect(self, code):
        await self.release()
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


class OverviewConsumer(Guarded):
    """The overview page: the team's deployment and job pushes, plus every few seconds its traffic per
    region and the nodes' figures (`inference.live.overview_tick`)."""

    action = "deployment.read"

    async def connect(self):
        if not await self.admit():
            return
        membership = await database_sync_to_async(membership_for_scope)(self.scope)
        if membership is None or not membership_allows(membership, "deployment.read"):
            await self.close(code=4401)
            return
        self.team_id = self.scope["lantau_team_id"] = membership.team_id
        self.groups_joined = [team_deployments_group(self.team_id), team_jobs_group(self.team_id)]
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        self.watch()
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
        await self.release()
        if hasattr(self, "ticker"):
            self.ticker.cancel()
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        pass


class NodeStatsConsumer(Guarded):
    """One node's heartbeat figures. Nodes are install-wide: any signed-in member of a team whose role
    may read nodes may watch them (code 4401 otherwise, 4404 for a node that does not exist). On connect,
    and on ``{"since": ts}``, the node's recent history is sent first (oldest first)."""

    action = "node.read"

    async def connect(self):
        if not await self.admit():
            return
        self.node = self.scope["url_route"]["kwargs"]["name"]
        team_id = await database_sync_to_async(_node_reader_team)(self.scope)
        if team_id is None:
            await self.close(code=4401)
            return
        self.scope["lantau_team_id"] = team_id
        if not await database_sync_to_async(_node_visible)(team_id, self.node):
            await self.close(code=4404)  # missing, or another team's own node
            return
        self.group = node_stats_group(self.node)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.watch()
        await self._history(_since_from_query(self.scope))

    async def _history(self, since: float):
        items = await database_sync_to_async(node_stats_history)(self.node, since)
        await self.send_json({"type": "node.history", "node": self.node, "items": items})

    async def node_stats(self, event):
        await self.send_json(event["payload"])

    async def disconnect(self, code):
        await self.release()
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


def _node_reader_team(scope: dict) -> int | None:
    membership = membership_for_scope(scope)
    return membership.team_id if membership_allows(membership, "node.read") and membership else None


def _node_visible(team_id: int, name: str) -> bool:
    return Node.objects.visible_to(team_id).filter(name=name).exists()


class DeploymentMetricsConsumer(Guarded):
    """Forwards the runners' per-second summaries (Redis pub/sub `<prefix>:metrics:<deployment>`, see
    contract.redis_keys) to one page, through the process's one subscription (``inference.metrics_hub``).

    Only members of the deployment's team may subscribe; the runners publish whether or not anyone listens.
    """

    action = "deployment.read"

    async def connect(self):
        if not await self.admit():
            return
        self.deployment = self.scope["url_route"]["kwargs"]["name"]
        watched = await database_sync_to_async(_may_watch)(self.scope, self.deployment)
        if watched is None:
            await self.close(code=4404)
            return
        self.scope["lantau_team_id"], replica_ids = watched
        await self.accept()
        self.watch()
        self.hub = metrics_hub.hub()
        self.queue = await self.hub.subscribe(self.deployment)
        for text in await self.hub.latest(self.deployment, replica_ids):
            await self.send(text_data=text)
        self.pump = asyncio.create_task(self._pump())

    async def _pump(self):
        while True:
            await self.send(text_data=await self.queue.get())

    async def disconnect(self, code):
        await self.release()
        if hasattr(self, "pump"):
            self.pump.cancel()
        if hasattr(self, "queue"):
            await self.hub.unsubscribe(self.deployment, self.queue)

    async def receive_json(self, content, **kwargs):
        pass


def _may_watch(scope: dict, name: str) -> tuple[int, list[int]] | None:
    """(team id, the deployment's replica ids) when the caller may watch it; None otherwise."""
    membership = membership_for_scope(scope)
    if membership is None or not membership_allows(membership, "deployment.read"):
        return None
    deployment = Deployment.objects.filter(team=membership.team, name=name).first()
    if deployment is None:
        return None
    return membership.team_id, list(deployment.replica_set.values_list("pk", flat=True))
