"""Which replica serves a request: the preferred region first, fewest requests in flight, breakers closed.

The preferred region is the edge's own, or the one a request names in ``X-Lantau-Region``; when it has
no replica that can take the request, any other region's does (the answer's ``X-Lantau-Served-By``
says where it was served). A replica whose breaker is open is skipped until its probe is due. Equally
loaded replicas take turns (so a new replica in a rollout gets its share even of sequential requests).

With a canary (``RouteEntry.canary_percent``), a request's first pick draws its side first: about that
share of requests go to the canary replicas and the rest to the others, each side region first and
least in flight; when the drawn side has no replica to offer, the other side serves (and a retry after
a failure takes any replica).
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict

from contract.routes import RouteEntry, RouteReplica

from .breaker import CLOSED, Breaker

log = logging.getLogger("lantau.edge.breaker")


class Balancer:
    def __init__(self, region: str = "", *, failures: int = 3, open_s: float = 5.0) -> None:
        self.region = region
        self.failures = failures
        self.open_s = open_s
        self.inflight: defaultdict[int, int] = defaultdict(int)
        self._breakers: dict[int, Breaker] = {}
        self._turn = 0  # where the next pick starts looking: equally loaded replicas take turns

    def breaker(self, replica_id: int) -> Breaker:
        found = self._breakers.get(replica_id)
        if found is None:
            found = self._breakers[replica_id] = Breaker(self.failures, self.open_s)
        return found

    def pick(self, route: RouteEntry, exclude: set[int], region: str | None = None) -> RouteReplica | None:
        """The replica to try next, its breaker told; None when none is left."""
        side: bool | None = None  # True: a canary replica; None: either
        if route.canary_percent and not exclude:
            side = self._draw() < route.canary_percent
        chosen = self._choose(route, exclude, region or self.region, side)
        if chosen is None and side is not None:
            chosen = self._choose(route, exclude, region or self.region, None)
        if chosen is not None and chosen.id in self._breakers:
            self._breakers[chosen.id].acquire()
        return chosen

    @staticmethod
    def _draw() -> float:
        """A number in [0, 100): which side of a canary a request goes to (not a secret)."""
        return random.random() * 100

    def _choose(
        self, route: RouteEntry, exclude: set[int], wanted: str, side: bool | None
    ) -> RouteReplica | None:
        near: RouteReplica | None = None
        far: RouteReplica | None = None
        near_load = far_load = 0
        count = len(route.replicas)
        self._turn = (self._turn + 1) % max(count, 1)
        for i in range(count):
            replica = route.replicas[(self._turn + i) % count]
            if replica.id in exclude or (side is not None and replica.canary != side):
                continue
            breaker = self._breakers.get(replica.id)
            if breaker is not None and not breaker.available():
                continue
            load = self.inflight[replica.id]
            if not wanted or replica.region == wanted:
                if near is None or load < near_load:
                    near, near_load = replica, load
            elif far is None or load < far_load:
                far, far_load = replica, load
        return near or far

    def succeeded(self, replica_id: int) -> None:
        breaker = self._breakers.get(replica_id)
        if breaker is not None and breaker.state != CLOSED:
            breaker.success()
            log.warning("breaker of replica r%s closed: its probe succeeded", replica_id)
        elif breaker is not None:
            breaker.success()

    def failed(self, replica_id: int) -> None:
        """A connection error, a timeout or a 5xx: counted by the replica's breaker."""
        breaker = self.breaker(replica_id)
        was_closed = breaker.state == CLOSED
        breaker.failure()
        if breaker.state != CLOSED and was_closed:
            log.warning("breaker of replica r%s opened after %s consecutive failures", replica_id,
                        breaker.failures)  # fmt: skip

    def state(self, replica_id: int) -> str:
        breaker = self._breakers.get(replica_id)
        return breaker.state if breaker is not None else "closed"

    def forget(self, keep: set[int]) -> None:
        """Drop breakers and counters of replicas no route lists any more."""
        for replica_id in [r for r in self._breakers if r not in keep]:
            del self._breakers[replica_id]
        for replica_id in [r for r, n in self.inflight.items() if r not in keep and not n]:
            del self.inflight[replica_id]
