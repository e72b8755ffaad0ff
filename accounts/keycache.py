"""Redis cache of API keys by prefix, written by the console, read by the gateway and the runners.

Each usable key has a signed entry (``contract.apikeys.entry_sign``) under
``<settings.REDIS_PREFIX>:apikey:<key prefix>`` (``contract.redis_keys``); it holds the key's SHA-256,
never the clear key. Revoked, expired and unknown prefixes get the tombstone ``-``, which readers refuse
without asking the database:

* revocation writes the tombstone unconditionally (it lives ``LANTAU_APIKEY_TOMBSTONE_TTL_S``);
* the fill after a cache miss (``cache_fill``) and the periodic sync write an entry only where no
  tombstone is, in one Lua step. A miss that read the key as active just before a revocation can
  therefore never bring the key back: whichever of the two writes lands second, the tombstone wins
  (review finding L3);
* an unknown prefix gets a short-lived tombstone (``LANTAU_APIKEY_NEGATIVE_TTL_S``), so a client
  retrying a bad key costs one database query per interval, not one per request (L4).
"""

from __future__ import annotations

from functools import lru_cache

import redis
from django.conf import settings
from django.utils import timezone

from accounts import keyhash
from accounts.models import ApiKey
from contract.apikeys import TOMBSTONE, entry_sign
from contract.quotas import Quota
from contract.redis_keys import RedisKeys

# KEYS[1] entry; ARGV entry, ttl (0 = none). Writes unless a tombstone is there; 1 if written.
SET_UNLESS_TOMBSTONE = """
if redis.call('GET', KEYS[1]) == ARGV[3] then return 0 end
if tonumber(ARGV[2]) > 0 then redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
else redis.call('SET', KEYS[1], ARGV[1]) end
return 1
"""


def names() -> RedisKeys:
    """Key names under this install's prefix (read each time: tests override the setting)."""
    return RedisKeys(settings.REDIS_PREFIX)


@lru_cache(maxsize=1)
def client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def quota_of(api_key: ApiKey) -> Quota:
    return Quota(api_key.quota_requests, api_key.quota_images, api_key.quota_tokens)


def entry_for(api_key: ApiKey) -> str | None:
    """The signed entry of a usable key; None when revoked, expired or its digest cannot be recovered."""
    digest = keyhash.cache_digest(api_key)
    if digest is None or not api_key.usable_at(timezone.now()):
        return None
    return entry_sign(
        keyhash.signer(), settings.REDIS_PREFIX, prefix=api_key.prefix, digest=digest, key_id=api_key.pk,
        team_id=api_key.team_id, scopes=api_key.scopes, deployments=api_key.deployments or (),
        rate_per_s=api_key.rate_per_s, burst=api_key.burst,
        expires_at=api_key.expires_at.timestamp() if api_key.expires_at else None, quota=quota_of(api_key),
    )  # fmt: skip


def _ttl() -> int:
    return settings.APIKEY_CACHE_TTL_S or 0


def cache_put(api_key: ApiKey) -> str | None:
    """Write the key's entry unconditionally (creation, edits), or its tombstone when it is not usable.
    Runners trust only this cache; entries live until revoked unless LANTAU_APIKEY_CACHE_TTL_S is set."""
    entry = entry_for(api_key)
    if entry is None:
        cache_revoke(api_key.prefix)
        return None
    client().set(names().api_key(api_key.prefix), entry, ex=_ttl() or None)
    return entry


def cache_fill(api_key: ApiKey) -> str | None:
    """After a cache miss: write the entry unless a revocation's tombstone got there first."""
    entry = entry_for(api_key)
    if entry is None:
        return None
    script = client().register_script(SET_UNLESS_TOMBSTONE)
    written = script(keys=[names().api_key(api_key.prefix)], args=[entry, _ttl(), TOMBSTONE])
    return entry if int(written) == 1 else None


def cache_revoke(prefix: str) -> None:
    client().set(names().api_key(prefix), TOMBSTONE, ex=settings.APIKEY_TOMBSTONE_TTL_S)


def cache_negative(prefix: str) -> None:
    """Remember for a short while that nothing usable has this prefix (never overwrites an entry)."""
    client().set(names().api_key(prefix), TOMBSTONE, ex=settings.APIKEY_NEGATIVE_TTL_S, nx=True)


def cache_sync(active: list[ApiKey], dead_prefixes: list[str]) -> int:
    """Rewrite every usable key's entry (unless tombstoned meanwhile) and tombstone the dead ones, in one
    pipeline (after a Redis restart, say). Returns how many entries were written."""
    keys, pipe = names(), client().pipeline(transaction=False)
    script = client().register_script(SET_UNLESS_TOMBSTONE)
    written = 0
    for api_key in active:
        entry = entry_for(api_key)
        if entry is None:
            dead_prefixes.append(api_key.prefix)
            continue
        script(keys=[keys.api_key(api_key.prefix)], args=[entry, _ttl(), TOMBSTONE], client=pipe)
        written += 1
    for prefix in dead_prefixes:
        pipe.set(keys.api_key(prefix), TOMBSTONE, ex=settings.APIKEY_TOMBSTONE_TTL_S)
    pipe.execute()
    return written


def cache_get(prefix: str) -> bytes | str | None:
    return client().get(names().api_key(prefix))


def cache_drop(prefix: str) -> None:
    """Forget an entry (tests simulate a flushed Redis with it)."""
    client().delete(names().api_key(prefix))


def last_use_record(key_id: int, address: str | None) -> None:
    """Note a use (time, address) for the roll-up to copy into the database: one cheap HSET."""
    at = f"{timezone.now().timestamp():.3f}"
    client().hset(names().last_use(key_id), items=["at", at, "addr", address or ""])
