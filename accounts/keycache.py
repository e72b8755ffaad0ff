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

Each entry carries the key's ``revision`` (``ApiKey.revision``, bumped by every change and by
revocation), and every write also raises the key's signed revision floor
(``<prefix>:apikey-rev:<key prefix>``, no TTL except for playground keys), never lowering it: an entry
below the floor is never written, and readers refuse one written back by anyone else (replay, M-A).
Creations and revocations also set ``<prefix>:apikeys:changed`` to a new random token, so the console's
``/v1/`` reloads the set of known prefixes it checks before asking the database (M-F).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from functools import lru_cache

import redis
from django.conf import settings
from django.utils import timezone

from accounts import keyhash
from accounts.models import ApiKey, ApiKeyKind
from contract.apikeys import REVISION_DEAD, TOMBSTONE, entry_sign, floor_sign
from contract.quotas import Quota
from contract.redis_keys import RedisKeys

# The revision of a floor value ``r1.<revision>.<signature>`` (-1 when absent or unreadable).
_FLOOR_OF = """
local function floor_of(key)
  local value = redis.call('GET', key)
  if not value then return -1 end
  return tonumber(string.match(value, '^r1%.(%d+)%.')) or -1
end
local function raise_floor(key, revision, text, ttl)
  if floor_of(key) >= revision then return end
  if tonumber(ttl) > 0 then redis.call('SET', key, text, 'EX', ttl) else redis.call('SET', key, text) end
end
"""

# KEYS[1] entry, KEYS[2] floor; ARGV entry, ttl (0 = none), tombstone ('' = ignore tombstones), revision,
# floor text, floor ttl (0 = none). Writes the entry unless the floor is above its revision or (when
# asked) a tombstone is there, and raises the floor to it; 1 if written.
SET_UNLESS_TOMBSTONE = (
    _FLOOR_OF
    + """
local revision = tonumber(ARGV[4])
if floor_of(KEYS[2]) > revision then return 0 end
if ARGV[3] ~= '' and redis.call('GET', KEYS[1]) == ARGV[3] then return 0 end
if tonumber(ARGV[2]) > 0 then redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
else redis.call('SET', KEYS[1], ARGV[1]) end
raise_floor(KEYS[2], revision, ARGV[5], ARGV[6])
return 1
"""
)

# KEYS[1] entry, KEYS[2] floor; ARGV tombstone, its ttl, revision, floor text, floor ttl. Revocation:
# the tombstone unconditionally, the floor raised (never lowered).
REVOKE = (
    _FLOOR_OF
    + """
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
raise_floor(KEYS[2], tonumber(ARGV[3]), ARGV[4], ARGV[5])
return 1
"""
)

# KEYS[1] floor; ARGV revision, floor text, floor ttl.
RAISE_FLOOR = _FLOOR_OF + "raise_floor(KEYS[1], tonumber(ARGV[1]), ARGV[2], ARGV[3])\nreturn 1\n"
PLAYGROUND_FLOOR_MARGIN_S = 3600  # a playground key's floor outlives its (unchangeable) expiry by this


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
        revision=api_key.revision,
    )  # fmt: skip


def _ttl() -> int:
    return settings.APIKEY_CACHE_TTL_S or 0


def floor_ttl(api_key: ApiKey) -> int:
    """How long the key's revision floor must live; 0 = for ever. A playground key can never be changed,
    so every entry it ever had expires with it: its floor goes an hour later (they are minted often)."""
    if api_key.kind != ApiKeyKind.PLAYGROUND or api_key.expires_at is None:
        return 0
    left = (api_key.expires_at - timezone.now()).total_seconds()
    return max(60, int(left) + PLAYGROUND_FLOOR_MARGIN_S)


def _floor_args(prefix: str, revision: int, ttl: int) -> list:
    return [revision, floor_sign(keyhash.signer(), settings.REDIS_PREFIX, prefix, revision), ttl]


def _entry_write(api_key: ApiKey, entry: str, *, unless_tombstone: bool, pipe=None) -> int:
    script = client().register_script(SET_UNLESS_TOMBSTONE)
    floor = _floor_args(api_key.prefix, api_key.revision, floor_ttl(api_key))
    args = [entry, _ttl(), TOMBSTONE if unless_tombstone else "", *floor]
    keys = [names().api_key(api_key.prefix), names().api_key_floor(api_key.prefix)]
    return (
        script(keys=keys, args=args, client=pipe) if pipe is not None else int(script(keys=keys, args=args))
    )


def keys_changed(pipe=None) -> None:
    """Tell the console's ``/v1/`` processes that the set of usable keys changed (a new random token)."""
    (pipe or client()).set(names().api_keys_changed(), secrets.token_hex(8))


def cache_put(api_key: ApiKey) -> str | None:
    """Write the key's entry (creation, edits; over a negative entry too, but never below its revision
    floor), or its tombstone when it is not usable. Runners trust only this cache; entries live until
    revoked unless LANTAU_APIKEY_CACHE_TTL_S is set."""
    entry = entry_for(api_key)
    if entry is None:
        cache_revoke(api_key.prefix, api_key.revision, floor_ttl(api_key))
        return None
    written = _entry_write(api_key, entry, unless_tombstone=False)
    keys_changed()
    return entry if written == 1 else None


def cache_fill(api_key: ApiKey) -> str | None:
    """After a cache miss: write the entry unless a revocation's tombstone got there first (or a newer
    revision did)."""
    entry = entry_for(api_key)
    if entry is None:
        return None
    return entry if _entry_write(api_key, entry, unless_tombstone=True) == 1 else None


def cache_revoke(prefix: str, revision: int | None = None, floor_ttl_s: int = 0) -> None:
    """The tombstone, and the floor raised to ``revision`` (the revoked row's, already bumped); with no
    revision (the row is gone) to ``REVISION_DEAD``, so no entry ever signed for the prefix opens again."""
    pipe = client().pipeline(transaction=True)
    floor = _floor_args(prefix, REVISION_DEAD if revision is None else revision, floor_ttl_s)
    client().register_script(REVOKE)(
        keys=[names().api_key(prefix), names().api_key_floor(prefix)],
        args=[TOMBSTONE, settings.APIKEY_TOMBSTONE_TTL_S, *floor],
        client=pipe,
    )
    keys_changed(pipe)
    pipe.execute()


def floor_exists(prefix: str) -> bool:
    """Whether a revision floor was ever written for the prefix (a deleted key's, say): new keys avoid it."""
    try:
        return bool(client().exists(names().api_key_floor(prefix)))
    except redis.RedisError:  # creation does not need Redis: the entry is written after commit
        return False


def cache_negative(prefix: str) -> None:
    """Remember for a short while that nothing usable has this prefix (never overwrites an entry)."""
    client().set(names().api_key(prefix), TOMBSTONE, ex=settings.APIKEY_NEGATIVE_TTL_S, nx=True)


def cache_sync(active: list[ApiKey], dead_prefixes: list[str], dead: Sequence[ApiKey] = ()) -> int:
    """Rewrite every usable key's entry (unless tombstoned meanwhile, or below its floor) and tombstone the
    dead prefixes, in one pipeline (after a Redis restart, say); rewrite the revision floors of the
    ``dead`` keys (revoked or expired, however long ago), so a deleted floor does not let an old entry
    back in for longer than a minute. Returns how many entries were written."""
    keys, pipe = names(), client().pipeline(transaction=False)
    raise_floor = client().register_script(RAISE_FLOOR)
    written = 0
    for api_key in active:
        entry = entry_for(api_key)
        if entry is None:
            dead_prefixes.append(api_key.prefix)
            raise_floor(keys=[keys.api_key_floor(api_key.prefix)],
                        args=_floor_args(api_key.prefix, api_key.revision, floor_ttl(api_key)), client=pipe)  # fmt: skip
            continue
        _entry_write(api_key, entry, unless_tombstone=True, pipe=pipe)
        written += 1
    for api_key in dead:
        raise_floor(keys=[keys.api_key_floor(api_key.prefix)],
                    args=_floor_args(api_key.prefix, api_key.revision, floor_ttl(api_key)), client=pipe)  # fmt: skip
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
