"""Requests in flight through a console process: the edge's counter (``inference.edge.limits``) with
its bounds read from ``LANTAU_GATEWAY_MAX_INFLIGHT_PER_DEPLOYMENT`` / ``..._PER_TEAM`` each time."""

from __future__ import annotations

from django.conf import settings

from inference.edge.errors import TooManyInFlight
from inference.edge.limits import InFlight as EdgeInFlight

__all__ = ["InFlight", "TooManyInFlight"]


class InFlight(EdgeInFlight):
    def caps(self) -> tuple[int, int]:
        return settings.GATEWAY_MAX_INFLIGHT_PER_DEPLOYMENT, settings.GATEWAY_MAX_INFLIGHT_PER_TEAM
