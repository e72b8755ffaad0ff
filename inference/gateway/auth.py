"""API key check for `/v1/`: Redis cache first (hash only), database on a miss; then the key's rate limit.

Rate limits share the runners' token bucket (``inference.runner.ratelimit``) so a key's limit holds
whether it calls through the gateway or a runner directly; they are read from the cache entry's
``rate_per_s``/``burst`` fields when the console writes them.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from redis import asyncio as aioredis

from accounts import keycache
from accounts.selectors import api_key_entry_db
from contract.apikeys import KeyIdentity, bearer_token, key_hash, key_is_well_formed, parse_entry
from core.errors import ApplicationError, Forbidden, Unauthorized
from inference.runner.ratelimit import RateLimiter

_redis: aioredis.Redis | None = None
_limiter: tuple[str, RateLimiter] | None = None


class RateLimited(ApplicationError):
    status, type = 429, "rate_limited"


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


async def authenticate(authorization: str | None) -> KeyIdentity:
    """The identity of the request's API key (cache first, database on a miss); 401/403 otherwise."""
    token = bearer_token(authorization)
    if token is None:
        raise Unauthorized("missing API key: send `Authorization: Bearer <key>`")
    if not key_is_well_formed(token):
        raise Unauthorized("invalid API key")
    digest = key_hash(token)
    raw = await _client().get(keycache.names().api_key(digest))
    identity = parse_entry(raw) if raw is not None else None
    if identity is None:  # not cached, or a malformed entry: the database decides and rewrites it
        raw = await sync_to_async(api_key_entry_db)(digest)
        identity = parse_entry(raw) if raw is not None else None
    if identity is None:
        raise Unauthorized("invalid or revoked API key")
    if "inference" not in identity.scopes:
        raise Forbidden("this API key has no `inference` scope")
    return identity


async def enforce_rate_limit(identity: KeyIdentity) -> None:
    """Raise RateLimited (429 with Retry-After) when the key is over its limit; no-op without one."""
    if identity.rate_per_s is None or identity.burst is None:
        return
    wait = await _rate_limiter().acquire(identity.key_id, identity.rate_per_s, identity.burst)
    if wait > 0:
        seconds = max(1, int(-(-wait // 1)))
        raise RateLimited(
            f"this API key is over its rate limit; retry in {seconds} s",
            headers={"Retry-After": str(seconds)},
        )
