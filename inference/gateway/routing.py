"""Which replica serves a request: ready replicas on online nodes, fewest requests in flight first.

The table is read from the database at most once a second per deployment, so a request costs a dict
lookup; a replica that just failed a connection is avoided for a few seconds.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async

from inference.models import Deployment, DesiredState, NodeStatus, ReplicaState
from inference.services.nodes import runner_token

TTL_S = 1.0
SUSPECT_S = 5.0


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
        self._routes: dict[str, tuple[float, Route | None]] = {}
        self.inflight: dict[int, int] = defaultdict(int)
        self._suspect: dict[int, float] = {}

    async def get(self, name: str) -> Route | None:
        now = time.monotonic()
        hit = self._routes.get(name)
        if hit is not None and now - hit[0] < TTL_S:
            return hit[1]
        route = await sync_to_async(_load)(name)
        self._routes[name] = (now, route)
        return route

    async def names_for_team(self, team_id: int) -> list[str]:
        return await sync_to_async(_load_for_team)(team_id)

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
