"""Per-key rate limits: a token bucket kept in Redis and updated atomically by one Lua script.

All replicas (and the gateway) of a deployment share the bucket ``<prefix>:ratelimit:<key_id>`` (``contract.redis_keys``), so a
key's limit holds however its requests are spread. The script uses Redis' clock, never the callers'.
"""

from __future__ import annotations

import logging
import time

from redis import asyncio as aioredis
from redis.exceptions import RedisError

from contract.redis_keys import RedisKeys

from .errors import Unavailable

log = logging.getLogger("lantau.runner.ratelimit")

WARN_EVERY_S = 60.0

# KEYS[1] bucket; ARGV rate (tokens/s), burst (capacity), cost. Returns {allowed 0/1, wait seconds as text}.
TOKEN_BUCKET = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or burst
local last = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - last) * rate)
local allowed = 0
local wait = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  wait = (cost - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {allowed, tostring(wait)}
"""


class RateLimiter:
    """``acquire`` returns 0.0 when the request may go ahead, else the seconds until it could; it raises
    ``Unavailable`` (503) when Redis cannot be reached."""

    def __init__(self, redis: aioredis.Redis, names: RedisKeys) -> None:
        self._names = names
        self._script = redis.register_script(TOKEN_BUCKET)
        self._warned = 0.0

    async def acquire(self, key_id: str, rate_per_s: float, burst: int, cost: int = 1) -> float:
        try:
            allowed, wait = await self._script(
                keys=[self._names.rate_limit(key_id)], args=[rate_per_s, burst, cost]
            )
        except (RedisError, OSError) as exc:
            # Fail closed: the key's owner set this limit (and pays for what it lets through), so an
            # unreachable Redis answers 503 for limited keys rather than serving them unlimited.
            now = time.monotonic()
            if now - self._warned > WARN_EVERY_S:
                self._warned = now
                log.warning("rate-limited keys refused (503), Redis unreachable: %s", exc)
            raise Unavailable("rate limits cannot be checked right now; retry shortly") from None
        return 0.0 if int(allowed) == 1 else float(wait)
