"""The console's pooled client to replicas: the edge's ``Upstream`` (aiohttp, keep-alive), its session
kept in this module's ``_session`` so a test's event loop can close it (``tests.support.gateway``).

aiohttp rather than httpx: measured through daphne on this project's 2-core machine, httpx cost the
console about twice the CPU per forwarded request (see docs/performance.md).
"""

from __future__ import annotations

import aiohttp
from django.conf import settings

from inference.edge.upstream import Upstream

_session: aiohttp.ClientSession | None = None


class ConsoleUpstream(Upstream):
    def __init__(self) -> None:
        super().__init__(timeout_s=float(settings.GATEWAY_TIMEOUT_S))

    @property  # read per request: the settings decide (tests change them)
    def max_answer_bytes(self) -> int:
        return int(settings.MAX_ANSWER_BYTES)

    @max_answer_bytes.setter
    def max_answer_bytes(self, value: int) -> None:
        pass  # Upstream.__init__ sets its default; the settings win

    def session(self) -> aiohttp.ClientSession:
        global _session
        if _session is None or _session.closed:
            self._session = None
            self.timeout_s = float(settings.GATEWAY_TIMEOUT_S)
            _session = super().session()
        return _session
