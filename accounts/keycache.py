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
    entry = {"key_id": api_key.pk, "team_id": api_key.team_id, "scopes": list(api_key.scopes)}
    if api_key.rate_per_s:
        entry |= {"rate_per_s": api_key.rate_per_s, "burst": api_key.burst or max(1, int(api_key.rate_per_s))}
    return entry


def cache_put(key_hash: str, entry: dict) -> None:
    """Runners trust only this cache (they cannot reach the database), so entries live until revoked
    unless LANTAU_APIKEY_CACHE_TTL_S is set; `api_keys_sync` rewrites them periodically anyway."""
    ttl = settings.APIKEY_CACHE_TTL_S or None
    client().set(cache_key(key_hash), json.dumps(entry), ex=ttl)


def cache_sync(active: list, revoked_hashes: list[str]) -> int:
    """Write every active key's entry and delete revoked ones in one pipeline (after a Redis restart, say)."""
    pipe = client().pipeline(transaction=False)
    ttl = settings.APIKEY_CACHE_TTL_S or None
    for api_key in active:
        pipe.set(cache_key(api_key.key_hash), json.dumps(entry_for(api_key)), ex=ttl)
    for digest in revoked_hashes:
        pipe.delete(cache_key(digest))
    pipe.execute()
    return len(active)


def cache_drop(key_hash: str) -> None:
    client().delete(cache_key(key_hash))


USAGE_PREFIX = "lantau:usage:"  # written by runners (inference/runner/usage.py): requests, images, tokens


def usage_for(key_ids: list[int]) -> dict[int, dict[str, int]]:
    """Usage counters per key id, read in one pipeline; keys never used get zeros."""
    if not key_ids:
        return {}
    pipe = client().pipeline(transaction=False)
    for key_id in key_ids:
        pipe.hgetall(f"{USAGE_PREFIX}{key_id}")
    rows = pipe.execute()
    fields = ("requests", "images", "tokens")
    return {key_id: {f: int(row.get(f.encode(), 0)) for f in fields} for key_id, row in zip(key_ids, rows, strict=True)}
