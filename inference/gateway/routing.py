"""Which replica serves a request: ready replicas on online nodes, fewest requests in flight first.

The table is read from the database at most once a second per deployment, so a request costs a dict
lookup; a replica that just failed a connection is avoided for a few seconds. Only deployments that
exist are cached, at most ``MAX_ROUTES`` of them (least recently used go first), and callers check a
name against ``NAME_PATTERN`` before asking: made-up names cost neither memory nor, past the
rate limit, much of the database (M1 of the security review).
"""

from __future__ import annotations

import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field

from inference.gateway.db import db_read
from inference.models import Deployment, DesiredState, NodeStatus, ReplicaState
from inference.services.nodes import runner_token

TTL_S = 1.0
SUSPECT_S = 5.0
MAX_ROUTES = 1024
NAME_PATTERN = r"[a-z0-9][a-z0-9-]{0,62}"  # a deployment name, as the console accepts it


@dataclass(frozen=True)
class Endpoint:
    replica_id: int
    url: str
    token: str
    region: str


@dataclass
class Route:
    name: str
    team_id: int
    task: str
    model_version: str
    paused: bool
    created: int
    endpoints: list[Endpoint] = field(default_factory=list)


def _load(name: str) -> Route | None:
    deployment = Deployment.objects.select_related("model_version__model").filter(name=name).first()
    if deployment is None:
        return None
    replicas = deployment.replica_set.filter(
        state=ReplicaState.READY, node__status=NodeStatus.ONLINE
    ).select_related("node")
    endpoints = [Endpoint(r.pk, r.url, runner_token(r.pk), r.node.region) for r in replicas if r.url]
    return Route(
        name=deployment.name,
        team_id=deployment.team_id,
        task=deployment.model_version.model.task,
        model_version=str(deployment.model_version),
        paused=deployment.desired_state == DesiredState.PAUSED,
        created=int(deployment.created_at.timestamp()),
        endpoints=endpoints,
    )


def _load_for_team(team_id: int) -> list[str]:
    return list(Deployment.objects.filter(team_id=team_id).values_list("name", flat=True))


class RouteTable:
    def __init__(self) -> None:
        self._routes: OrderedDict[str, tuple[float, Route]] = OrderedDict()
        self.inflight: dict[int, int] = defaultdict(int)
        self._suspect: dict[int, float] = {}

    async def get(self, name: str) -> Route | None:
        now = time.monotonic()
        hit = self._routes.get(name)
        if hit is not None and now - hit[0] < TTL_S:
            self._routes.move_to_end(name)
            return hit[1]
        route = await db_read(_load, name)
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

    def pick(self, route: Route, exclude: set[int]) -> Endpoint | None:
        now = time.monotonic()
        healthy = [
            e
            for e in route.endpoints
            if e.replica_id not in exclude and self._suspect.get(e.replica_id, 0) < now
        ]
        candidates = healthy or [e for e in route.endpoints if e.replica_id not in exclude]
        if not candidates:
            return None
        return min(candidates, key=lambda e: self.inflight[e.replica_id])

    def mark_suspect(self, endpoint: Endpoint) -> None:
        self._suspect[endpoint.replica_id] = time.monotonic() + SUSPECT_S
