"""API key check for `/v1/`: Redis cache first (hash only), database on a miss; then the key's rate limit.

Rate limits share the runners' token bucket (``inference.runner.ratelimit``) so a key's limit holds
whether it calls through the gateway or a runner directly; they are read from the cache entry's
``rate_per_s``/``burst`` fields when the console writes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from redis import asyncio as aioredis

from accounts import keycache
from accounts.keys import bearer_token, key_hash, key_is_well_formed
from accounts.selectors import KeyIdentity, api_key_entry_db, identity_from_entry
from core.errors import ApplicationError, Forbidden, Unauthorized
from inference.runner.keys import parse_entry
from inference.runner.ratelimit import RateLimiter

_redis: aioredis.Redis | None = None
_limiter: RateLimiter | None = None


class RateLimited(ApplicationError):
    status, type = 429, "rate_limited"


@dataclass(frozen=True)
class Caller:
    identity: KeyIdentity
    rate_per_s: float | None = None
    burst: int | None = None


def _client() -> aioredis.Redis:
    global _redis
    if _redis is None:
        _redis = aioredis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    return _redis


def _rate_limiter() -> RateLimiter:
    global _limiter
    if _limiter is None:
        _limiter = RateLimiter(_client())
    return _limiter


async def authenticate(authorization: str | None) -> Caller:
    token = bearer_token(authorization)
    if token is None:
        raise Unauthorized("missing API key: send `Authorization: Bearer <key>`")
    if not key_is_well_formed(token):
        raise Unauthorized("invalid API key")
    digest = key_hash(token)
    raw = await _client().get(keycache.cache_key(digest))
    if raw is None:
        raw = await sync_to_async(api_key_entry_db)(digest)
    if raw is None:
        raise Unauthorized("invalid or revoked API key")
    limits = parse_entry(raw)
    caller = Caller(identity_from_entry(raw), limits and limits.rate_per_s, limits and limits.burst)
    if "inference" not in caller.identity.scopes:
        raise Forbidden("this API key has no `inference` scope")
    return caller


async def enforce_rate_limit(caller: Caller) -> None:
    """Raise RateLimited (429 with Retry-After) when the key is over its limit; no-op without one."""
    if caller.rate_per_s is None or caller.burst is None:
        return
    wait = await _rate_limiter().acquire(str(caller.identity.key_id), caller.rate_per_s, caller.burst)
    if wait > 0:
        seconds = max(1, int(-(-wait // 1)))
        raise RateLimited(f"this API key is over its rate limit; retry in {seconds} s",
                          headers={"Retry-After": str(seconds)})
