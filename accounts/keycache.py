"""Redis cache of API keys by hash, shared by the console, the gateway and the runners.

Entries hold only the hash-derived identity (``contract.apikeys.entry_json``), never the clear key, under
``<settings.REDIS_PREFIX>:apikey:<hash>`` (``contract.redis_keys``). Revoking a key deletes its entry,
so revocation takes effect on the next request.
"""

from __future__ import annotations

from functools import lru_cache

import redis
from django.conf import settings

from accounts.models import ApiKey
from contract.apikeys import entry_json
from contract.redis_keys import RedisKeys

USAGE_FIELDS = ("requests", "images", "tokens")  # written by runners (inference/runner/usage.py)


def names() -> RedisKeys:
    """Key names under this install's prefix (read each time: tests override the setting)."""
    return RedisKeys(settings.REDIS_PREFIX)


@lru_cache(maxsize=1)
def client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def entry_for(api_key: ApiKey) -> str:
    """The cache entry (JSON) of an active key."""
    return entry_json(key_id=api_key.pk, team_id=api_key.team_id, scopes=api_key.scopes,
                      rate_per_s=api_key.rate_per_s, burst=api_key.burst)  # fmt: skip


def cache_put(api_key: ApiKey) -> str:
    """Write the key's entry and return it. Runners trust only this cache (they cannot reach the database),
    so entries live until revoked unless LANTAU_APIKEY_CACHE_TTL_S is set; `api_keys_sync` rewrites them
    periodically anyway."""
    entry = entry_for(api_key)
    client().set(names().api_key(api_key.key_hash), entry, ex=settings.APIKEY_CACHE_TTL_S or None)
    return entry


def cache_sync(active: list[ApiKey], revoked_hashes: list[str]) -> int:
    """Write every active key's entry and delete revoked ones in one pipeline (after a Redis restart, say)."""
    keys, pipe = names(), client().pipeline(transaction=False)
    ttl = settings.APIKEY_CACHE_TTL_S or None
    for api_key in active:
        pipe.set(keys.api_key(api_key.key_hash), entry_for(api_key), ex=ttl)
    for digest in revoked_hashes:
        pipe.delete(keys.api_key(digest))
    pipe.execute()
    return len(active)


def cache_get(key_hash: str) -> bytes | str | None:
    return client().get(names().api_key(key_hash))


def cache_drop(key_hash: str) -> None:
    client().delete(names().api_key(key_hash))


def usage_for(key_ids: list[int]) -> dict[int, dict[str, int]]:
    """Usage counters per key id, read in one pipeline; keys never used get zeros."""
    if not key_ids:
        return {}
    keys, pipe = names(), client().pipeline(transaction=False)
    for key_id in key_ids:
        pipe.hgetall(keys.usage(key_id))
    rows = pipe.execute()
    return {key_id: {f: int(row.get(f.encode(), 0)) for f in USAGE_FIELDS}
            for key_id, row in zip(key_ids, rows, strict=True)}  # fmt: skip
