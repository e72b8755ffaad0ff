"""A circuit breaker per replica: consecutive failures open it, a single probe closes it again.

closed ──(``failures`` consecutive connection errors, timeouts or 5xx)──▶ open
open ──(``open_s`` passed)──▶ half-open: one request goes through as a probe, the others avoid it
half-open ──probe succeeds──▶ closed;  ──probe fails──▶ open again (for another ``open_s``)
"""

from __future__ import annotations

import time

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"


class Breaker:
    __slots__ = ("failures", "open_s", "_consecutive", "_opened_at", "_probing")
    PROBE_LOST_S = 60.0  # a probe that never reported (its request vanished) stops blocking after this

    def __init__(self, failures: int = 3, open_s: float = 5.0) -> None:
        self.failures = failures
        self.open_s = open_s
        self._consecutive = 0
        self._opened_at: float | None = None
        self._probing: float | None = None

    @property
    def state(self) -> str:
        if self._opened_at is None:
            return CLOSED
        if self._probing is not None or time.monotonic() - self._opened_at >= self.open_s:
            return HALF_OPEN
        return OPEN

    def available(self) -> bool:
        """May a request be sent now (without claiming the probe)?"""
        if self._opened_at is None:
            return True
        now = time.monotonic()
        if self._probing is not None and now - self._probing < self.PROBE_LOST_S:
            return False
        return now - self._opened_at >= self.open_s

    def acquire(self) -> None:
        """The request picked this replica: past an open period it becomes the one probe."""
        if self._opened_at is not None:
            self._probing = time.monotonic()

    def success(self) -> None:
        self._consecutive = 0
        self._opened_at = None
        self._probing = None

    def failure(self) -> None:
        self._consecutive += 1
        if self._probing is not None or self._consecutive >= self.failures:
            self._opened_at = time.monotonic()
        self._probing = None
