"""Redis cache of API keys by hash, shared by the console, the gateway and (later) runners.

Entries hold only the hash-derived identity (team, key id, scopes), never the clear key. Revoking a key
deletes its entry, so revocation takes effect on the next request.
"""

from __future__ import annotations

import json
from functools import lru_cache

import redis
from django.conf import settings

CACHE_PREFIX = "lantau:apikey:"


def cache_key(key_hash: str) -> str:
    return CACHE_PREFIX + key_hash


@lru_cache(maxsize=1)
def client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def entry_for(api_key) -> dict:
    return {"key_id": api_key.pk, "team_id": api_key.team_id, "scopes": list(api_key.scopes)}


def cache_put(key_hash: str, entry: dict) -> None:
    client().set(cache_key(key_hash), json.dumps(entry), ex=settings.APIKEY_CACHE_TTL_S)


def cache_drop(key_hash: str) -> None:
    client().delete(cache_key(key_hash))
