"""API keys at `/v1/`: the signed Redis entry first, the database on a miss; then scopes and limits.

* ``authenticate``: the key's entry (``contract.apikeys``) must carry the console's signature, be for
  the key's own prefix, match the key's SHA-256 (constant-time) and not have expired; a tombstone is
  refused at once. Redis is read on every request (a revocation bites at once), but the same entry
  bytes are verified only once (``_open``). With no valid entry (none, unsigned, forged, another
  install's), the database decides (``accounts.services.api_key_cache_miss``), which also rewrites the
  entry or notes a short negative one. Every bad key gets the same 401 body; Redis unreachable is 503 (keys cannot be checked safely).
  A key's last use and address are noted at most once a second (``LastUseThrottle``), as at the edges.
* ``authorize``: the key's deployment list (403) and its monthly quota (429 ``quota_exceeded`` with
  ``Retry-After`` up to the next month); ``enforce_rate_limit``: its rate limit, sharing the runners' token bucket
  (``inference.runner.ratelimit``) so a key's limit holds whether it calls the gateway or a runner.
  A limited key is refused with 503 while Redis cannot be reached (fail closed: see docs/security.md);
  a key without limits never needs Redis here.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from django.conf import settings
from redis import asyncio as aioredis
from redis.exceptions import RedisError

from accounts import keycache, keyhash
from accounts.services import api_key_cache_miss
from contract.apikeys import (
    INVALID_KEY_MESSAGE,
    MISSING_KEY_MESSAGE,
    TOMBSTONE,
    CachedKey,
    KeyIdentity,
    bearer_token,
    entry_check,
    entry_open,
    key_is_well_formed,
    key_prefix,
)
from contract.quotas import month_of, quota_refusal, usage_from_redis
from contract.signing import Ed25519PublicKey
from core.errors import ApplicationError, Forbidden, Unauthorized, Unavailable
from inference.edge.keys import MAX_REMEMBERED, LastUseThrottle
from inference.gateway.db import db_read
from inference.runner.errors import Unavailable as RunnerUnavailable
from inference.runner.ratelimit import RateLimiter

_redis: aioredis.Redis | None = None
_limiter: tuple[str, RateLimiter] | None = None
# The last entry each key prefix opened, as (install prefix, raw entry, verifier's bytes) -> what it
# said: Redis is still read on every request (a revocation bites at once), but the same bytes are not
# verified twice (an Ed25519 verify is the costliest step of a request here).
_opened: dict[str, tuple[tuple[str, bytes | str, bytes], CachedKey | None]] = {}
_last_use = LastUseThrottle()  # by key prefix, as at the edges


class RateLimited(ApplicationError):
    status, type = 429, "rate_limited"


class QuotaExceeded(ApplicationError):
    status, type = 429, "quota_exceeded"


def redis() -> aioredis.Redis:
    """This process's asyncio Redis client (key entries, rate limits; the gateway's wake-ups)."""
    return _client()


def _client() -> aioredis.Redis:
    global _redis
    if _redis is None:
        _redis = aioredis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    return _redis


def _rate_limiter() -> RateLimiter:
    global _limiter
    names = keycache.names()
    if _limiter is None or _limiter[0] != names.prefix:  # rebuilt if the prefix setting changes (tests)
        _limiter = (names.prefix, RateLimiter(_client(), names))
    return _limiter[1]


def _unavailable() -> Unavailable:
    return Unavailable("API keys cannot be verified right now; retry shortly", headers={"Retry-After": "1"})


async def _identity(token: str) -> KeyIdentity | None:
    prefix = key_prefix(token)
    try:
        raw = await _client().get(keycache.names().api_key(prefix))
    except (RedisError, OSError):
        raise _unavailable() from None
    if raw == TOMBSTONE:
        return None
    verifier = keyhash.signer().public_key()
    cached = _open(raw, verifier, prefix) if raw is not None else None
    if cached is None:  # missing, unsigned, forged or stale: the database decides and repairs the entry
        entry = await db_read(api_key_cache_miss, clear_key=token)
        cached = entry_open(entry, verifier, settings.REDIS_PREFIX, prefix) if entry is not None else None
    return entry_check(cached, token, time.time()) if cached is not None else None


def _open(raw: bytes | str, verifier: Ed25519PublicKey, prefix: str) -> CachedKey | None:
    """``entry_open``, remembered for the last bytes each key prefix's entry held."""
    seen = (settings.REDIS_PREFIX, raw, verifier.public_bytes_raw())
    known = _opened.get(prefix)
    if known is not None and known[0] == seen:
        return known[1]
    cached = entry_open(raw, verifier, settings.REDIS_PREFIX, prefix)
    if len(_opened) >= MAX_REMEMBERED:  # crude bound: one entry per key prefix
        _opened.clear()
    _opened[prefix] = (seen, cached)
    return cached


async def _note_use(identity: KeyIdentity, prefix: str, address: str | None) -> None:
    """Last use and address for ``accounts.usage``'s roll-up, at most once a second per key."""
    if not _last_use.due(prefix):
        return
    try:  # bookkeeping never refuses a request
        fields = ["at", f"{time.time():.3f}", "addr", address or ""]
        await _client().hset(keycache.names().last_use(identity.key_id), items=fields)
    except (RedisError, OSError):
        pass


async def authenticate(authorization: str | None, address: str | None = None) -> KeyIdentity:
    """The identity of the request's API key, with the `inference` scope; 401/403/503 otherwise."""
    token = bearer_token(authorization)
    if token is None:
        raise Unauthorized(MISSING_KEY_MESSAGE)
    identity = await _identity(token) if key_is_well_formed(token) else None
    if identity is None:
        raise Unauthorized(INVALID_KEY_MESSAGE)  # one body for malformed, unknown, wrong, revoked, expired
    if "inference" not in identity.scopes:
        raise Forbidden("this API key has no `inference` scope")
    await _note_use(identity, key_prefix(token), address)
    return identity


async def enforce_quota(identity: KeyIdentity) -> None:
    if not identity.quota.limited:
        return
    now = datetime.now(UTC)
    try:
        row = await _client().hgetall(keycache.names().usage_month(identity.key_id, month_of(now)))
    except (RedisError, OSError):
        raise _unavailable() from None
    refusal = quota_refusal(identity.quota, usage_from_redis(row), now)
    if refusal is not None:
        raise QuotaExceeded(refusal.message, headers={"Retry-After": str(refusal.retry_after_s)})


async def enforce_rate_limit(identity: KeyIdentity) -> None:
    """Raise RateLimited (429 with Retry-After) when the key is over its limit; no-op without one."""
    if identity.rate_per_s is None or identity.burst is None:
        return
    try:
        wait = await _rate_limiter().acquire(identity.key_id, identity.rate_per_s, identity.burst)
    except RunnerUnavailable as exc:
        raise Unavailable(exc.message, headers=exc.headers) from None
    if wait > 0:
        seconds = max(1, int(-(-wait // 1)))
        raise RateLimited(
            f"this API key is over its rate limit; retry in {seconds} s",
            headers={"Retry-After": str(seconds)},
        )


async def authorize(identity: KeyIdentity, deployment: str) -> None:
    """May this key call `deployment`: its deployment list (403) and monthly quota (429); the rate limit
    is applied earlier, before the route lookup."""
    if not identity.allows(deployment):
        raise Forbidden(f"this API key may not call deployment {deployment!r}")
    await enforce_quota(identity)
