"""API keys verified at the runner from the console's Redis cache, without Django.

The console writes ``<prefix>:apikey:<sha256 hex of the key>`` (``contract.redis_keys``) holding the
entry of ``contract.apikeys`` and deletes it on revocation. Positive answers are kept in-process for at
most ``ttl_s`` (1 s), so a revocation takes effect within a second while a busy key costs one Redis
round trip per second, not one per request.
"""

from __future__ import annotations

import logging
import time

from redis import asyncio as aioredis
from redis.exceptions import RedisError

from contract.apikeys import KeyIdentity, key_hash, key_is_well_formed, parse_entry
from contract.redis_keys import RedisKeys

from .errors import Unavailable

log = logging.getLogger("lantau.runner.keys")

MAX_CACHED = 10_000


class KeyCache:
    """Resolve clear keys to identities through Redis, caching positive answers for ``ttl_s``."""

    def __init__(self, redis: aioredis.Redis, names: RedisKeys, ttl_s: float = 1.0) -> None:
        self._redis = redis
        self._names = names
        self.ttl_s = ttl_s
        self._entries: dict[str, tuple[float, KeyIdentity]] = {}

    async def lookup(self, key: str) -> KeyIdentity | None:
        """The key's identity, or None when it is malformed, unknown or revoked."""
        if not key_is_well_formed(key):
            return None
        digest = key_hash(key)
        now = time.monotonic()
        hit = self._entries.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            raw = await self._redis.get(self._names.api_key(digest))
        except (RedisError, OSError) as exc:
            log.warning("cannot reach Redis to verify an API key: %s", exc)
            raise Unavailable("API keys cannot be verified right now; retry shortly") from None
        identity = parse_entry(raw) if raw is not None else None
        if identity is None:
            self._entries.pop(digest, None)
            return None
        if len(self._entries) >= MAX_CACHED:
            self._entries.clear()  # crude bound; entries live one second anyway
        self._entries[digest] = (now + self.ttl_s, identity)
        return identity
