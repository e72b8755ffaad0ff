"""Requests in flight through one edge (or console) process, per deployment and per team.

One team's burst cannot take every connection: past the per-deployment or per-team bound the next
request is answered 429 ``too_many_in_flight`` with ``Retry-After`` before anything is forwarded. The
counts are per process; the per-key rate limit in Redis is the global one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import TooManyInFlight

RETRY_AFTER_S = "1"


class InFlight:
    def __init__(self, per_deployment: int = 256, per_team: int = 512) -> None:
        self.per_deployment = per_deployment
        self.per_team = per_team
        self.by_deployment: defaultdict[str, int] = defaultdict(int)
        self.by_team: defaultdict[int, int] = defaultdict(int)

    def caps(self) -> tuple[int, int]:
        """(per deployment, per team); the console's subclass reads its settings each time."""
        return self.per_deployment, self.per_team

    @contextmanager
    def hold(self, *, deployment: str, team_id: int) -> Iterator[None]:
        """Count one request for the block's duration; TooManyInFlight (429) when a bound is reached."""
        deployment_cap, team_cap = self.caps()
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
