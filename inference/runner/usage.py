"""Usage counters per API key (requests, images, tokens), summed in-process and flushed to Redis; the
monthly quota check that reads them.

A request only adds to a dict; a background task sends the sums every ``interval_s`` as one pipelined
batch (``contract.redis_keys``): ``HINCRBY`` on ``<prefix>:usage:<key_id>`` (what the console's roll-up
moves into PostgreSQL) and on ``<prefix>:usage-month:<key_id>:<YYYY-MM>`` (what quotas read), and
``HSET`` of the last use (time, caller address) on ``<prefix>:lastuse:<key_id>``. The event loop never
waits on Redis for accounting; sums that fail to send are kept for the next flush.

Quotas (``contract.quotas``) compare a key's month counter, read at most once a second per key, plus
what this process has not sent yet, with the key's limits: a key may overrun its quota by what all
replicas serve within about one second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from redis import asyncio as aioredis
from redis.exceptions import RedisError

from contract.apikeys import KeyIdentity
from contract.quotas import USAGE_FIELDS, QuotaRefusal, month_of, quota_refusal, usage_from_redis
from contract.redis_keys import RedisKeys

from .errors import Unavailable

log = logging.getLogger("lantau.runner.usage")

FIELDS = USAGE_FIELDS
WARN_EVERY_S = 60.0
MONTH_TTL_S = 40 * 86400

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
        self._last_use: dict[str, tuple[float, str]] = {}
        self._month: dict[str, tuple[float, dict[str, int]]] = {}  # key id -> (read at, counters)
        self._warned = 0.0

    def add(self, key_id: str, images: int = 0, tokens: int = 0, address: str | None = None) -> None:
        counts = self._pending[key_id]
        counts[0] += 1
        counts[1] += images
        counts[2] += tokens
        if address is not None:  # None: through the gateway, which records the client's address itself
            self._last_use[key_id] = (time.time(), address)

    async def quota_refusal(self, identity: KeyIdentity) -> QuotaRefusal | None:
        """Why the key's monthly quota refuses it now, or None; 503 when Redis cannot be read."""
        if not identity.quota.limited:
            return None
        now = datetime.now(UTC)
        used = await self._month_used(identity.key_id, now)
        mine = self._pending.get(identity.key_id, [0, 0, 0])
        return quota_refusal(identity.quota, {f: used[f] + mine[i] for i, f in enumerate(FIELDS)}, now)

    async def _month_used(self, key_id: str, now: datetime) -> dict[str, int]:
        hit = self._month.get(key_id)
        if hit is not None and hit[0] > time.monotonic() - 1.0:
            return hit[1]
        try:
            row = await self._redis.hgetall(self._names.usage_month(key_id, month_of(now)))
        except (RedisError, OSError):
            raise Unavailable("quotas cannot be checked right now; retry shortly") from None
        used = usage_from_redis(row)
        if len(self._month) > 10_000:
            self._month.clear()
        self._month[key_id] = (time.monotonic(), used)
        return used

    async def flush(self) -> None:
        if not self._pending and not self._last_use:
            return
        pending, self._pending = self._pending, defaultdict(lambda: [0, 0, 0])
        last_use, self._last_use = self._last_use, {}
        month = month_of(datetime.now(UTC))
        pipe = self._redis.pipeline(transaction=False)
        for key_id, counts in pending.items():
            for name in (self._names.usage(key_id), self._names.usage_month(key_id, month)):
                for field, amount in zip(FIELDS, counts, strict=True):
                    if amount:
                        pipe.hincrby(name, field, amount)
            pipe.expire(self._names.usage_month(key_id, month), MONTH_TTL_S)
        for key_id, (at, address) in last_use.items():
            pipe.hset(self._names.last_use(key_id), mapping={"at": f"{at:.3f}", "addr": address})
        try:
            await pipe.execute()
        except (RedisError, OSError) as exc:
            self._restore(pending, last_use)
            self._warn(exc)

    def _restore(self, pending: dict[str, list[int]], last_use: dict[str, tuple[float, str]]) -> None:
        for key_id, counts in pending.items():
            mine = self._pending[key_id]
            for i, amount in enumerate(counts):
                mine[i] += amount
        for key_id, seen in last_use.items():
            self._last_use.setdefault(key_id, seen)

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
