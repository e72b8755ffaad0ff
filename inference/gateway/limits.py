"""Requests in flight through this gateway process, per deployment and per team, bounded by settings.

One team's burst cannot take every connection of the console: past
``LANTAU_GATEWAY_MAX_INFLIGHT_PER_DEPLOYMENT`` or ``LANTAU_GATEWAY_MAX_INFLIGHT_PER_TEAM`` concurrent
requests, the next one is answered 429 with ``Retry-After`` before anything is forwarded. The counts are
per process (each console process keeps its own); the per-key rate limit in Redis is the global one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings

from core.errors import ApplicationError

RETRY_AFTER_S = "1"


class TooManyInFlight(ApplicationError):
    status, type = 429, "too_many_in_flight"


class InFlight:
    def __init__(self) -> None:
        self.by_deployment: defaultdict[str, int] = defaultdict(int)
        self.by_team: defaultdict[int, int] = defaultdict(int)

    @contextmanager
    def hold(self, *, deployment: str, team_id: int) -> Iterator[None]:
        """Count one request for the block's duration; TooManyInFlight (429) when a bound is reached."""
        deployment_cap = settings.GATEWAY_MAX_INFLIGHT_PER_DEPLOYMENT
        team_cap = settings.GATEWAY_MAX_INFLIGHT_PER_TEAM
        if self.by_deployment[deployment] >= deployment_cap:
            raise TooManyInFlight(
                f"deployment {deployment!r} already has {deployment_cap} requests in flight; retry shortly",
                headers={"Retry-After": RETRY_AFTER_S},
            )
        if self.by_team[team_id] >= team_cap:
            raise TooManyInFlight(
                f"this team already has {team_cap} requests in flight; retry shortly",
                headers={"Retry-After": RETRY_AFTER_S},
            )
        self.by_deployment[deployment] += 1
        self.by_team[team_id] += 1
        try:
            yield
        finally:
            self._release(deployment, team_id)

    def _release(self, deployment: str, team_id: int) -> None:
        self.by_deployment[deployment] -= 1
        self.by_team[team_id] -= 1
        if not self.by_deployment[deployment]:  # keep the dicts as small as the live requests
            del self.by_deployment[deployment]
        if not self.by_team[team_id]:
            del self.by_team[team_id]
