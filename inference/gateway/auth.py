"""API key check for `/v1/`: Redis cache first (hash only), database on a miss."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from redis import asyncio as aioredis

from accounts import keycache
from accounts.keys import bearer_token, key_hash, key_is_well_formed
from accounts.selectors import KeyIdentity, api_key_lookup_db, identity_from_entry
from console.errors import Forbidden, Unauthorized

_redis: aioredis.Redis | None = None


def _client() -> aioredis.Redis:
    global _redis
    if _redis is None:
        _redis = aioredis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    return _redis


async def authenticate(authorization: str | None) -> KeyIdentity:
    token = bearer_token(authorization)
    if token is None:
        raise Unauthorized("missing API key: send `Authorization: Bearer <key>`")
    if not key_is_well_formed(token):
        raise Unauthorized("invalid API key")
    digest = key_hash(token)
    raw = await _client().get(keycache.cache_key(digest))
    identity = identity_from_entry(raw) if raw is not None else await sync_to_async(api_key_lookup_db)(digest)
    if identity is None:
        raise Unauthorized("invalid or revoked API key")
    if "inference" not in identity.scopes:
        raise Forbidden("this API key has no `inference` scope")
    return identity
