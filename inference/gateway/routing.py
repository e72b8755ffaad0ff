"""The console's route source for `/v1/`: routes read from the database, kept one second per deployment.

Same routes as the edges get (``inference.routes_publish.route_entry``), read directly because small
installs run no edge. A request costs a dict lookup; only deployments that exist are cached, at most
``MAX_ROUTES`` of them (least recently used go first), and callers check a name against
``NAME_PATTERN`` before asking: made-up names cost neither memory nor, past the rate limit, much of
the database (M1 of the security review). Picking a replica (region, least in flight, breakers) is
the edge's ``Balancer``, one per table.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

from django.conf import settings

from contract.routes import RouteEntry, RouteReplica
from inference.edge.balancer import Balancer
from inference.edge.dispatch import NAME_PATTERN
from inference.gateway.db import db_read
from inference.models import Deployment
from inference.routes_publish import route_entry

TTL_S = 1.0
MAX_ROUTES = 1024
Route, Endpoint = RouteEntry, RouteReplica  # the names this module used before the edge existed
__all__ = ["NAME_PATTERN", "Endpoint", "Route", "RouteTable"]


def _load(name: str) -> RouteEntry | None:
    deployment = Deployment.objects.select_related("model_version__model").filter(name=name).first()
    return route_entry(deployment) if deployment is not None else None


def _load_for_team(team_id: int) -> list[str]:
    return list(Deployment.objects.filter(team_id=team_id).order_by("name").values_list("name", flat=True))


class RouteTable:
    def __init__(self) -> None:
        self._routes: OrderedDict[str, tuple[float, RouteEntry]] = OrderedDict()
        self._reading: dict[str, asyncio.Task[RouteEntry | None]] = {}  # reads in progress, by name
        self.balancer = Balancer(settings.GATEWAY_REGION)

    async def get(self, name: str) -> RouteEntry | None:
        now = time.monotonic()
        hit = self._routes.get(name)
        if hit is not None and now - hit[0] < TTL_S:
            self._routes.move_to_end(name)
            return hit[1]
        # One read per name at a time: when an entry expires under load, every request in flight for
        # it would otherwise read the same row (32 clients: 32 queries a second instead of one).
        loop = asyncio.get_running_loop()
        reading = self._reading.get(name)
        if reading is None or reading.done() or reading.get_loop() is not loop:
            reading = self._reading[name] = loop.create_task(self._read(name, now))
        return await asyncio.shield(reading)  # a caller that goes away leaves the read to the others

    async def _read(self, name: str, now: float) -> RouteEntry | None:
        try:
            route = await db_read(_load, name)
        finally:
            self._reading.pop(name, None)
        if route is None:  # misses are not kept: a made-up name must not grow the table
            self._routes.pop(name, None)
            return None
        self._routes[name] = (now, route)
        self._routes.move_to_end(name)
        while len(self._routes) > MAX_ROUTES:
            self._routes.popitem(last=False)
        return route

    def __len__(self) -> int:
        return len(self._routes)

    async def names_for_team(self, team_id: int) -> list[str]:
        return await db_read(_load_for_team, team_id)
