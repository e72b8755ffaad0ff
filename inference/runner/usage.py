"""Usage counters per API key (requests, images, tokens), summed in-process and flushed to Redis.

A request only adds to a dict; a background task sends the sums every ``interval_s`` as one pipelined
``HINCRBY`` batch on ``<prefix>:usage:<key_id>`` (``contract.redis_keys``) (fields ``requests``, ``images``, ``tokens``), so the
event loop never waits on Redis for accounting. Sums that fail to send are kept for the next flush.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from typing import Any

from aiohttp import web
from redis import asyncio as aioredis
from redis.exceptions import RedisError

from contract.redis_keys import RedisKeys

log = logging.getLogger("lantau.runner.usage")

FIELDS = ("requests", "images", "tokens")
WARN_EVERY_S = 60.0

# What a handler consumed, read by the middleware once the answer is a success: (images, tokens).
if hasattr(web, "RequestKey"):
    USAGE: Any = web.RequestKey("lantau_usage", tuple)
else:  # pragma: no cover
    USAGE = "lantau_usage"


def record_usage(request: web.Request, *, images: int = 0, tokens: int = 0) -> None:
    """Note what this request consumed; counted against its API key if it succeeds."""
    request[USAGE] = (images, tokens)


class UsageRecorder:
    def __init__(self, redis: aioredis.Redis, names: RedisKeys, interval_s: float = 0.5) -> None:
        self._redis = redis
        self._names = names
        self.interval_s = interval_s
        self._pending: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        self._warned = 0.0

    def add(self, key_id: str, images: int = 0, tokens: int = 0) -> None:
        counts = self._pending[key_id]
        counts[0] += 1
        counts[1] += images
        counts[2] += tokens

    async def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, defaultdict(lambda: [0, 0, 0])
        pipe = self._redis.pipeline(transaction=False)
        for key_id, counts in pending.items():
            for field, amount in zip(FIELDS, counts, strict=True):
                if amount:
                    pipe.hincrby(self._names.usage(key_id), field, amount)
        try:
            await pipe.execute()
        except (RedisError, OSError) as exc:
            self._restore(pending)
            self._warn(exc)

    def _restore(self, pending: dict[str, list[int]]) -> None:
        for key_id, counts in pending.items():
            mine = self._pending[key_id]
            for i, amount in enumerate(counts):
                mine[i] += amount

    def _warn(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._warned > WARN_EVERY_S:
            self._warned = now
            log.warning("usage counters not sent, Redis unreachable (kept for the next try): %s", exc)

    async def run(self) -> None:
        """Flush forever; on cancellation, flush one last time."""
        try:
            while True:
                await asyncio.sleep(self.interval_s)
                await self.flush()
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.flush(), 2.0)
