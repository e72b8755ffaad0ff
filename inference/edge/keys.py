"""API keys at the edge: the console's signed Redis entries, verified as the runners verify them.

``inference.runner.keys.KeyCache`` opens the entry (Ed25519 signature under the install's prefix, the
key's own prefix, constant-time digest compare, expiry) and keeps Redis's answer for one second, so a
revocation bites within a second. With no valid entry the key is refused (the edge has no database:
the console's periodic sync rewrites lost entries). Then the same checks as the console's gateway:
the ``inference`` scope (403), the key's rate limit (the token bucket shared with runners, 429),
its deployment list (403) and monthly quota (429 ``quota_exceeded``, read with the runners'
``inference.runner.usage.quota_check``: requests in flight count as used). Redis unreachable is a 503.
"""

from __future__ import annotations

import time

from redis import asyncio as aioredis
from redis.exceptions import RedisError

from contract.apikeys import INVALID_KEY_MESSAGE, MISSING_KEY_MESSAGE, KeyIdentity, bearer_token
from contract.redis_keys import RedisKeys
from contract.signing import Ed25519PublicKey
from inference.runner.errors import Forbidden, RateLimited, Unauthorized, Unavailable
from inference.runner.keys import KeyCache
from inference.runner.ratelimit import RateLimiter
from inference.runner.usage import quota_check

from .errors import QuotaExceeded

LAST_USE_EVERY_S = 1.0  # last-use bookkeeping per key at most once a second, not once per request
MAX_REMEMBERED = 10_000


class LastUseThrottle:
    """Whether a key's last use is due to be noted again: at most once every ``every_s`` per key (the
    edges and the console's ``/v1/`` both note it; a roll-up reads it, so a second is precise enough)."""

    def __init__(self, every_s: float = LAST_USE_EVERY_S) -> None:
        self.every_s = every_s
        self._noted: dict[str, float] = {}

    def due(self, key: str) -> bool:
        now = time.monotonic()
        if now - self._noted.get(key, -self.every_s) < self.every_s:
            return False
        if len(self._noted) >= MAX_REMEMBERED:
            self._noted.clear()
        self._noted[key] = now
        return True

    def forget(self, key: str) -> None:
        self._noted.pop(key, None)


class RedisKeyAuth:
    def __init__(self, redis: aioredis.Redis, names: RedisKeys, verifier: Ed25519PublicKey | None) -> None:
        self._redis = redis
        self._names = names
        self._keys = KeyCache(redis, names, verifier)
        self._limiter = RateLimiter(redis, names)
        self._last_use = LastUseThrottle()

    async def authenticate(self, authorization: str | None, address: str | None = None) -> KeyIdentity:
        token = bearer_token(authorization)
        if token is None:
            raise Unauthorized(MISSING_KEY_MESSAGE)
        identity = await self._keys.lookup(token)
        if identity is None:
            raise Unauthorized(INVALID_KEY_MESSAGE)
        if "inference" not in identity.scopes:
            raise Forbidden("this API key has no `inference` scope")
        await self._note_use(identity.key_id, address)
        return identity

    async def _note_use(self, key_id: str, address: str | None) -> None:
        if not self._last_use.due(key_id):
            return
        try:  # bookkeeping never refuses a request
            fields = ["at", f"{time.time():.3f}", "addr", address or ""]
            await self._redis.hset(self._names.last_use(key_id), items=fields)
        except (RedisError, OSError):
            pass

    async def enforce_rate_limit(self, identity: KeyIdentity) -> None:
        if identity.rate_per_s is None or identity.burst is None:
            return
        wait = await self._limiter.acquire(identity.key_id, identity.rate_per_s, identity.burst)
        if wait > 0:
            raise RateLimited(wait)

    async def authorize(self, identity: KeyIdentity, deployment: str) -> None:
        if not identity.allows(deployment):
            raise Forbidden(f"this API key may not call deployment {deployment!r}")
        if not identity.quota.limited:
            return
        try:
            refusal = await quota_check(self._redis, self._names, identity.key_id, identity.quota)
        except (RedisError, OSError):
            raise Unavailable("API keys cannot be verified right now; retry shortly") from None
        if refusal is not None:
            raise QuotaExceeded(refusal.message, headers={"Retry-After": str(refusal.retry_after_s)})
