"""API keys verified at the runner from the console's Redis cache, without Django.

The console writes ``lantau:apikey:<sha256 hex of the key>`` -> JSON ``{"key_id", "team_id", "scopes"}``
(plus ``rate_per_s`` / ``burst`` when the key has a rate limit) and deletes the entry on revocation.
Positive answers are kept in-process for at most ``ttl_s`` (1 s), so a revocation takes effect within
a second while a busy key costs one Redis round trip per second, not one per request.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from redis import asyncio as aioredis
from redis.exceptions import RedisError

from .errors import Unavailable

log = logging.getLogger("lantau.runner.keys")

CACHE_PREFIX = "lantau:apikey:"
# The format of accounts/keys.py (kept in sync by a test): lt_<8 hex>_<43 url-safe characters>.
KEY_PATTERN = re.compile(r"^lt_[0-9a-f]{8}_[A-Za-z0-9_-]{43}$")
MAX_CACHED = 10_000


@dataclass(frozen=True, slots=True)
class KeyIdentity:
    key_id: str
    team_id: int | None
    scopes: tuple[str, ...]
    rate_per_s: float | None = None  # token-bucket refill rate; None = no limit
    burst: int | None = None


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _positive_number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def parse_entry(raw: bytes | str) -> KeyIdentity | None:
    """The identity in a cache entry, or None when the entry is malformed."""
    try:
        entry = json.loads(raw)
        scopes = tuple(str(scope) for scope in entry["scopes"])
        team_id = entry["team_id"]
        key_id = str(entry["key_id"])
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(team_id, int) or isinstance(team_id, bool):
        return None
    rate = _positive_number(entry.get("rate_per_s"))
    burst = _positive_number(entry.get("burst"))
    if rate is not None and burst is None:
        burst = max(1.0, rate)  # without an explicit burst, allow one second's worth
    return KeyIdentity(key_id, team_id, scopes, rate, int(burst) if burst is not None else None)


class KeyCache:
    """Resolve clear keys to identities through Redis, caching positive answers for ``ttl_s``."""

    def __init__(self, redis: aioredis.Redis, ttl_s: float = 1.0) -> None:
        self._redis = redis
        self.ttl_s = ttl_s
        self._entries: dict[str, tuple[float, KeyIdentity]] = {}

    async def lookup(self, key: str) -> KeyIdentity | None:
        """The key's identity, or None when it is malformed, unknown or revoked."""
        if not KEY_PATTERN.match(key):
            return None
        digest = key_digest(key)
        now = time.monotonic()
        hit = self._entries.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            raw = await self._redis.get(CACHE_PREFIX + digest)
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
