"""Usage counters per API key (requests, images, tokens), summed in-process and flushed to Redis; the
monthly quota check that reads them.

A request only adds to a dict; a background task sends the sums every ``interval_s`` as one pipelined
batch (``contract.redis_keys``): ``HINCRBY`` on ``<prefix>:usage:<key_id>`` (what the console's roll-up
moves into PostgreSQL) and on ``<prefix>:usage-month:<key_id>:<YYYY-MM>`` (what quotas read), and
``HSET`` of the last use (time, caller address) on ``<prefix>:lastuse:<key_id>``. The event loop never
waits on Redis for accounting; sums that fail to send are kept for the next flush.

Quotas (``contract.quotas``): before a metered request does any work, ``admit`` runs one Lua script
(``ADMIT``, one round trip) that compares the key's month counter plus what its requests in flight hold
(``<prefix>:quota-reserved:<key_id>``) with the key's limits and, when every limit has room, reserves
one request, one image for image models, and for generation the prompt plus its ``max_tokens`` cap.
Otherwise 429 ``quota_exceeded``. The middleware notes what the request consumed in a ``finally``, for
every outcome once work started (the client gone or cancelled included); the next flush adds it to the
counters and then (``SETTLE``) drops the reservation, so what a request holds turns into what it used
without a gap in which parallel requests could slip through. A key can therefore overrun a limit by at
most what one request consumes beyond the room left when it was admitted (a generation's tokens), never
by its number of parallel requests. Reservations live in one-minute buckets of Redis's clock and age
out after ``RESERVE_BUCKETS`` minutes, so one left by a runner that died is not held for ever. The
gateway and edges read the same counters with ``quota_check`` (the same script, reserving nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from redis import asyncio as aioredis
from redis.exceptions import NoScriptError, RedisError

from contract.apikeys import KeyIdentity
from contract.quotas import USAGE_FIELDS, Quota, QuotaRefusal, month_of, quota_refusal
from contract.redis_keys import RedisKeys

from .errors import RunnerError, Unavailable

log = logging.getLogger("lantau.runner.usage")

FIELDS = USAGE_FIELDS
WARN_EVERY_S = 60.0
MONTH_TTL_S = 40 * 86400
RESERVE_BUCKET_S = 60  # reservations are grouped by minute of admission (Redis's clock) ...
RESERVE_BUCKETS = 15  # ... and age out after this many minutes: a dead runner's ones are not kept
UNAVAILABLE = "quotas cannot be checked right now; retry shortly"

# KEYS[1] the month counter, KEYS[2] the reservations (fields "<bucket>:<counter>"). ARGV[1..3] the
# limits on requests, images, tokens (-1: none); ARGV[4..6] what to reserve; ARGV[7] the bucket width
# (s); ARGV[8] how many buckets a reservation lives. Drops reservations that aged out; admits when every
# limit is above what is used plus held, and then reserves. Returns {admitted, bucket, used+held x3}.
ADMIT = """
local now = tonumber(redis.call('TIME')[1])
local width, live = tonumber(ARGV[7]), tonumber(ARGV[8])
local bucket = math.floor(now / width)
local oldest = bucket - live + 1
local fields = {'requests', 'images', 'tokens'}
local held = {requests = 0, images = 0, tokens = 0}
local flat = redis.call('HGETALL', KEYS[2])
local stale = {}
for i = 1, #flat, 2 do
  local b, f = string.match(flat[i], '^(%d+):(%a+)$')
  if b == nil or held[f] == nil or tonumber(b) < oldest then
    stale[#stale + 1] = flat[i]
  else
    held[f] = held[f] + (tonumber(flat[i + 1]) or 0)
  end
end
if #stale > 0 then redis.call('HDEL', KEYS[2], unpack(stale)) end
local sums, admitted = {}, 1
for j, f in ipairs(fields) do
  sums[j] = (tonumber(redis.call('HGET', KEYS[1], f)) or 0) + held[f]
  local limit = tonumber(ARGV[j])
  if limit >= 0 and sums[j] >= limit then admitted = 0 end
end
if admitted == 1 then
  for j, f in ipairs(fields) do
    local amount = tonumber(ARGV[3 + j])
    if amount > 0 then
      redis.call('HINCRBY', KEYS[2], bucket .. ':' .. f, amount)
      redis.call('EXPIRE', KEYS[2], width * (live + 1))
    end
  end
end
return {admitted, bucket, sums[1], sums[2], sums[3]}
"""
_ADMIT_SHA = hashlib.sha1(ADMIT.encode()).hexdigest()
# KEYS[1] the reservations; ARGV[1] the bucket; ARGV[2..4] requests, images, tokens to release; ARGV[5],
# ARGV[6] as in ADMIT. A bucket that aged out is gone already (ADMIT dropped it): nothing to release.
SETTLE = """
local now = tonumber(redis.call('TIME')[1])
if tonumber(ARGV[1]) < math.floor(now / tonumber(ARGV[5])) - tonumber(ARGV[6]) + 1 then return 0 end
local fields = {'requests', 'images', 'tokens'}
for j, f in ipairs(fields) do
  local amount = tonumber(ARGV[1 + j])
  if amount > 0 then
    local field = ARGV[1] .. ':' .. f
    if redis.call('HINCRBY', KEYS[1], field, -amount) <= 0 then redis.call('HDEL', KEYS[1], field) end
  end
end
return 1
"""

# What a handler consumed, read by the middleware whatever the outcome: (images, tokens).
if hasattr(web, "RequestKey"):
    USAGE: Any = web.RequestKey("lantau_usage", tuple)
else:  # pragma: no cover
    USAGE = "lantau_usage"


class QuotaExceeded(RunnerError):
    status = 429
    type = "quota_exceeded"


@dataclass(frozen=True, slots=True)
class Reservation:
    """Quota held by one request in flight: the bucket it was reserved in, and (requests, images, tokens)."""

    key_id: str
    bucket: int
    amounts: tuple[int, int, int]


async def quota_admit(
    redis: aioredis.Redis, names: RedisKeys, key_id: str, quota: Quota, amounts: tuple[int, int, int]
) -> tuple[QuotaRefusal | None, int]:
    """(refusal or None, bucket) in one round trip: whether every limit of ``quota`` is above what the key
    used this month plus what its requests in flight hold; if so ``amounts`` (not all zero) are reserved
    in ``bucket``, atomically. Raises RedisError or OSError when Redis cannot be asked."""
    now = datetime.now(UTC)
    limits = [-1 if (limit := getattr(quota, field)) is None else limit for field in FIELDS]
    keys = [names.usage_month(key_id, month_of(now)), names.quota_reserved(key_id)]
    args = [*limits, *amounts, RESERVE_BUCKET_S, RESERVE_BUCKETS]
    try:
        reply = await redis.evalsha(_ADMIT_SHA, len(keys), *keys, *args)
    except NoScriptError:
        reply = await redis.eval(ADMIT, len(keys), *keys, *args)
    admitted, bucket, *sums = (int(value) for value in reply)
    if admitted:
        return None, bucket
    refusal = quota_refusal(quota, dict(zip(FIELDS, sums, strict=True)), now)
    return refusal or QuotaRefusal("monthly quota spent", 60), bucket


async def quota_check(
    redis: aioredis.Redis, names: RedisKeys, key_id: str, quota: Quota
) -> QuotaRefusal | None:
    """Why ``quota`` refuses the key now (what requests in flight hold counts as used), or None; nothing is
    reserved. The gateway's and edges' check before forwarding; raises RedisError or OSError."""
    if not quota.limited:
        return None
    return (await quota_admit(redis, names, key_id, quota, (0, 0, 0)))[0]


def record_usage(request: web.Request, *, images: int = 0, tokens: int = 0) -> None:
    """Note what this request consumed; counted against its API key whatever the outcome (the
    middleware reads it in a ``finally``), so call it as soon as work has been done."""
    request[USAGE] = (images, tokens)


@dataclass(slots=True)
class Meter:
    """The quota of a request whose key has one: ``admit`` reserves room once, before work starts."""

    recorder: UsageRecorder
    key_id: str
    quota: Quota
    reservation: Reservation | None = None

    async def admit(self, *, images: int = 0, tokens: int = 0) -> None:
        if self.reservation is None:
            self.reservation = await self.recorder.reserve(
                self.key_id, self.quota, images=images, tokens=tokens
            )


if hasattr(web, "RequestKey"):
    METER: Any = web.RequestKey("lantau_meter", Meter)
else:  # pragma: no cover
    METER = "lantau_meter"


async def admit(request: web.Request, *, images: int = 0, tokens: int = 0) -> None:
    """Reserve room in the caller's monthly quota (one request plus ``images`` and ``tokens``) before work
    starts: 429 ``quota_exceeded`` when a limit is spent, what requests in flight hold included; 503 when
    Redis cannot be asked. A no-op for callers without a quota, and after the first call."""
    meter = request.get(METER)
    if meter is not None:
        await meter.admit(images=images, tokens=tokens)


class UsageRecorder:
    def __init__(self, redis: aioredis.Redis, names: RedisKeys, interval_s: float = 0.5) -> None:
        self._redis = redis
        self._names = names
        self.interval_s = interval_s
        self._pending: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        self._last_use: dict[str, tuple[float, str]] = {}
        # Reservations to drop at the next flush, after the usage they became: (key id, bucket) -> amounts.
        self._releases: defaultdict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0, 0])
        self._warned = 0.0

    def add(
        self, key_id: str, images: int = 0, tokens: int = 0, address: str | None = None,
        reservation: Reservation | None = None,
    ) -> None:  # fmt: skip
        counts = self._pending[key_id]
        counts[0] += 1
        counts[1] += images
        counts[2] += tokens
        if address is not None:  # None: through the gateway, which records the client's address itself
            self._last_use[key_id] = (time.time(), address)
        self.release(reservation)

    def release(self, reservation: Reservation | None) -> None:
        """Drop a reservation at the next flush (with ``add``: once what it turned into is counted)."""
        if reservation is None:
            return
        held = self._releases[(reservation.key_id, reservation.bucket)]
        for i, amount in enumerate(reservation.amounts):
            held[i] += amount

    async def quota_refusal(self, identity: KeyIdentity) -> QuotaRefusal | None:
        """Why the key's monthly quota refuses it now, or None; 503 when Redis cannot be read."""
        try:
            return await quota_check(self._redis, self._names, identity.key_id, identity.quota)
        except (RedisError, OSError):
            raise Unavailable(UNAVAILABLE) from None

    async def reserve(self, key_id: str, quota: Quota, *, images: int = 0, tokens: int = 0) -> Reservation:
        """Reserve one request, ``images`` and ``tokens`` against ``quota``: 429 when a limit is spent."""
        amounts = (1, max(0, images), max(0, tokens))
        try:
            refusal, bucket = await quota_admit(self._redis, self._names, key_id, quota, amounts)
        except (RedisError, OSError):
            raise Unavailable(UNAVAILABLE) from None
        if refusal is not None:
            raise QuotaExceeded(refusal.message, headers={"Retry-After": str(refusal.retry_after_s)})
        return Reservation(key_id, bucket, amounts)

    async def flush(self) -> None:
        if not self._pending and not self._last_use and not self._releases:
            return
        pending, self._pending = self._pending, defaultdict(lambda: [0, 0, 0])
        last_use, self._last_use = self._last_use, {}
        releases, self._releases = self._releases, defaultdict(lambda: [0, 0, 0])
        month = month_of(datetime.now(UTC))
        pipe = self._redis.pipeline(transaction=False)
        for key_id, counts in pending.items():
            for name in (self._names.usage(key_id), self._names.usage_month(key_id, month)):
                for field, amount in zip(FIELDS, counts, strict=True):
                    if amount:
                        pipe.hincrby(name, field, amount)
            pipe.expire(self._names.usage_month(key_id, month), MONTH_TTL_S)
        # After the increments above (one connection keeps the order): held + used never dips between them.
        for (key_id, bucket), amounts in releases.items():
            pipe.eval(SETTLE, 1, self._names.quota_reserved(key_id), bucket, *amounts,
                      RESERVE_BUCKET_S, RESERVE_BUCKETS)  # fmt: skip
        for key_id, (at, address) in last_use.items():
            pipe.hset(self._names.last_use(key_id), mapping={"at": f"{at:.3f}", "addr": address})
        try:
            await pipe.execute()
        except (RedisError, OSError) as exc:
            self._restore(pending, last_use, releases)
            self._warn(exc)

    def _restore(
        self, pending: dict[str, list[int]], last_use: dict[str, tuple[float, str]],
        releases: dict[tuple[str, int], list[int]],
    ) -> None:  # fmt: skip
        for key_id, counts in pending.items():
            mine = self._pending[key_id]
            for i, amount in enumerate(counts):
                mine[i] += amount
        for slot, amounts in releases.items():
            held = self._releases[slot]
            for i, amount in enumerate(amounts):
                held[i] += amount
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
