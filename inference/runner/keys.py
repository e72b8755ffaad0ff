"""API keys verified at the runner from the console's signed Redis entries, without Django or the database.

The console writes ``<prefix>:apikey:<key prefix>`` (``contract.redis_keys``): an entry signed with its
Ed25519 key (``contract.apikeys``) or the tombstone ``-``. The runner holds only the public key, from
its manifest (``key_verify_key``), so whoever can write Redis still cannot forge an entry it accepts.
Without that key every API key is refused. Answers (entries and tombstones) are kept in-process for at
most ``ttl_s`` (1 s): a revocation takes effect within a second, and a busy key, or a client hammering a
bad one, costs one Redis round trip per second, not one per request.

The same round trip reads the key's signed revision floor (``<prefix>:apikey-rev:<key prefix>``): an
entry below it, or below the highest revision this process has seen for the prefix
(``contract.apikeys.Revisions``), is an old entry written back (a replay) and is refused (M-A).
"""

from __future__ import annotations

import logging
import time

from redis import asyncio as aioredis
from redis.exceptions import RedisError

from contract.apikeys import (
    CachedKey,
    KeyIdentity,
    Revisions,
    entry_check,
    entry_open,
    floor_open,
    key_is_well_formed,
    key_prefix,
)
from contract.redis_keys import RedisKeys
from contract.signing import Ed25519PublicKey

from .errors import Unavailable

log = logging.getLogger("lantau.runner.keys")

MAX_CACHED = 10_000


class KeyCache:
    """Resolve clear keys to identities through Redis, caching what Redis said for ``ttl_s``."""

    def __init__(
        self, redis: aioredis.Redis, names: RedisKeys, verify_key: Ed25519PublicKey | None, ttl_s: float = 1.0
    ) -> None:
        self._redis = redis
        self._names = names
        self._verify_key = verify_key
        self.ttl_s = ttl_s
        self._entries: dict[str, tuple[float, CachedKey | None]] = {}
        self._revisions = Revisions()

    async def lookup(self, key: str) -> KeyIdentity | None:
        """The key's identity, or None when it is malformed, unknown, wrong, revoked or expired."""
        if not key_is_well_formed(key) or self._verify_key is None:
            return None
        cached = await self._cached(key_prefix(key))
        return entry_check(cached, key, time.time()) if cached is not None else None

    async def _cached(self, prefix: str) -> CachedKey | None:
        now = time.monotonic()
        hit = self._entries.get(prefix)
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            raw, raw_floor = await self._redis.mget(
                self._names.api_key(prefix), self._names.api_key_floor(prefix)
            )
        except (RedisError, OSError) as exc:
            log.warning("cannot reach Redis to verify an API key: %s", exc)
            raise Unavailable("API keys cannot be verified right now; retry shortly") from None
        assert self._verify_key is not None
        namespace = self._names.prefix
        cached = entry_open(raw, self._verify_key, namespace, prefix) if raw is not None else None
        floor = floor_open(raw_floor, self._verify_key, namespace, prefix) if raw_floor is not None else None
        cached = self._revisions.admit(prefix, cached, floor)
        if len(self._entries) >= MAX_CACHED:
            self._entries.clear()  # crude bound; entries live one second anyway
        self._entries[prefix] = (now + self.ttl_s, cached)
        return cached
