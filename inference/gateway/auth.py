"""API keys at `/v1/`: the signed Redis entry first, the database on a miss; then scopes and limits.

* ``authenticate``: the key's entry (``contract.apikeys``) must carry the console's signature, be for
  the key's own prefix, match the key's SHA-256 (constant-time) and not have expired; a tombstone is
  refused at once. Redis is read on every request (a revocation bites at once), but the same entry
  bytes are verified only once (``_open``). With no valid entry (none, unsigned, forged, another
  install's), the database decides (``accounts.services.api_key_cache_miss``), which also rewrites the
  entry or notes a short negative one. Every bad key gets the same 401 body; Redis unreachable is 503 (keys cannot be checked safely).
  The same read brings the key's signed revision floor: an entry below it, or below the highest
  revision this process has seen for the prefix (``contract.apikeys.Revisions``), is a replay and is
  refused like a missing one (M-A). Before asking the database, the prefix must be one of a usable key
  (``KnownPrefixes``): random well-formed keys cost no query (M-F).
  A key's last use and address are noted at most once a second (``LastUseThrottle``), as at the edges.
* ``authorize``: the key's deployment list (403) and its monthly quota (429 ``quota_exceeded`` with
  ``Retry-After`` up to the next month); ``enforce_rate_limit``: its rate limit, sharing the runners' token bucket
  (``inference.runner.ratelimit``) so a key's limit holds whether it calls the gateway or a runner.
  A limited key is refused with 503 while Redis cannot be reached (fail closed: see docs/security.md);
  a key without limits never needs Redis here.
"""

from __future__ import annotations

import asyncio
import re
import time
from array import array
from bisect import bisect_left

from django.conf import settings
from redis import asyncio as aioredis
from redis.exceptions import RedisError

from accounts import keycache, keyhash
from accounts.services import api_key_cache_miss, api_key_known_prefixes
from contract.apikeys import (
    INVALID_KEY_MESSAGE,
    MISSING_KEY_MESSAGE,
    PREFIX_LENGTH,
    TOMBSTONE,
    CachedKey,
    KeyIdentity,
    Revisions,
    bearer_token,
    entry_check,
    entry_open,
    floor_open,
    key_is_well_formed,
    key_prefix,
)
from contract.signing import Ed25519PublicKey
from core.errors import ApplicationError, Forbidden, Unauthorized, Unavailable
from inference.edge.keys import MAX_REMEMBERED, LastUseThrottle
from inference.gateway.db import db_read
from inference.runner.errors import Unavailable as RunnerUnavailable
from inference.runner.ratelimit import RateLimiter
from inference.runner.usage import quota_check

_redis: aioredis.Redis | None = None
_limiter: tuple[str, RateLimiter] | None = None
# The last entry each key prefix opened, as (install prefix, raw entry, verifier's bytes) -> what it
# said: Redis is still read on every request (a revocation bites at once), but the same bytes are not
# verified twice (an Ed25519 verify is the costliest step of a request here).
_opened: dict[str, tuple[tuple[str, bytes | str, bytes], CachedKey | None]] = {}
_floors: dict[str, tuple[tuple[str, bytes | str, bytes], int | None]] = {}  # the same for revision floors
_revisions = Revisions()  # by install prefix and key prefix
_last_use = LastUseThrottle()  # by key prefix, as at the edges
KNOWN_MAX_AGE_S = 60.0  # the set of known prefixes is read again at least this often
MAX_KNOWN = 4_000_000  # usable keys it holds at most (4 bytes each); above, every miss asks the database
_PREFIX = re.compile(r"lt_[0-9a-f]{8}")


class KnownPrefixes:
    """The prefixes of every usable key, as sorted 32-bit numbers (4 bytes a key), so that a well-formed
    key whose prefix no usable key has is refused without a database query (review finding M-F): a
    flood of random prefixes costs one Redis round trip each and one query in all, not two queries and
    a Redis write each on the database thread that route refreshes share. Read again (one read at a
    time, whoever waits for it) when the console's ``apikeys:changed`` token differs from the one it was
    read with (a key was created or revoked by any console process; the new key's entry is in Redis
    already, so it works at once regardless), and at least every ``KNOWN_MAX_AGE_S``. Holding more than
    ``MAX_KNOWN`` keys, it holds none and every miss asks the database, as before."""

    def __init__(self) -> None:
        self._numbers: array[int] | None = None
        self._state: tuple[str, bytes | str | None] | None = None  # (install prefix, token) it was read with
        self._loaded_at = 0.0
        self._loading: asyncio.Task[None] | None = None

    def _stale(self, token: bytes | str | None) -> bool:
        if self._state != (settings.REDIS_PREFIX, token):
            return True
        return time.monotonic() - self._loaded_at >= KNOWN_MAX_AGE_S

    async def may_exist(self, prefix: str, token: bytes | str | None) -> bool:
        """False only when no usable key has ``prefix`` (a well-formed key prefix)."""
        if self._stale(token):
            loop = asyncio.get_running_loop()
            loading = self._loading
            if loading is None or loading.done() or loading.get_loop() is not loop:
                loading = self._loading = loop.create_task(self._load(token))
            await asyncio.shield(loading)
        numbers = self._numbers
        if numbers is None:
            return True
        value = int(prefix[3:PREFIX_LENGTH], 16)
        at = bisect_left(numbers, value)
        return at < len(numbers) and numbers[at] == value

    async def _load(self, token: bytes | str | None) -> None:
        install = settings.REDIS_PREFIX
        prefixes = await db_read(api_key_known_prefixes)
        numbers = sorted(int(p[3:], 16) for p in prefixes if _PREFIX.fullmatch(p))
        self._numbers = array("I", numbers) if len(numbers) <= MAX_KNOWN else None
        self._state, self._loaded_at = (install, token), time.monotonic()


_known = KnownPrefixes()


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
    prefix, names = key_prefix(token), keycache.names()
    try:  # one round trip: the entry, its revision floor, the known-prefix token (used on a miss only)
        raw, raw_floor, changed = await _client().mget(
            names.api_key(prefix), names.api_key_floor(prefix), names.api_keys_changed()
        )
    except (RedisError, OSError):
        raise _unavailable() from None
    verifier = keyhash.signer().public_key()
    floor = _floor(raw_floor, verifier, prefix) if raw_floor is not None else None
    seen_as = f"{settings.REDIS_PREFIX}\x00{prefix}"
    if raw == TOMBSTONE:
        _revisions.admit(seen_as, None, floor)
        return None
    cached = _revisions.admit(seen_as, _open(raw, verifier, prefix) if raw is not None else None, floor)
    if cached is None:  # missing, unsigned, forged, stale or replayed: the database decides and repairs
        if not await _known.may_exist(prefix, changed):
            return None  # no usable key has this prefix: no query (M-F)
        entry = await db_read(api_key_cache_miss, clear_key=token)
        cached = entry_open(entry, verifier, settings.REDIS_PREFIX, prefix) if entry is not None else None
        cached = _revisions.admit(seen_as, cached, None)
    return entry_check(cached, token, time.time()) if cached is not None else None


def _remembered(memo: dict, opener, raw: bytes | str, verifier: Ed25519PublicKey, prefix: str):
    """``opener(raw, verifier, install prefix, key prefix)``, remembered for the last bytes each key
    prefix held (the Ed25519 check costs more than the request's other work, so it runs once per value)."""
    seen = (settings.REDIS_PREFIX, raw, verifier.public_bytes_raw())
    known = memo.get(prefix)
    if known is not None and known[0] == seen:
        return known[1]
    value = opener(raw, verifier, settings.REDIS_PREFIX, prefix)
    if len(memo) >= MAX_REMEMBERED:  # crude bound: one value per key prefix
        memo.clear()
    memo[prefix] = (seen, value)
    return value


def _floor(raw: bytes | str, verifier: Ed25519PublicKey, prefix: str) -> int | None:
    """``floor_open``, remembered for the last bytes each key prefix's floor held."""
    return _remembered(_floors, floor_open, raw, verifier, prefix)


def _open(raw: bytes | str, verifier: Ed25519PublicKey, prefix: str) -> CachedKey | None:
    """``entry_open``, remembered for the last bytes each key prefix's entry held."""
    return _remembered(_opened, entry_open, raw, verifier, prefix)


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
    """429 when the key's monthly quota is spent, what its requests in flight hold included (the runners'
    ``quota_check``); the runner that serves the request then reserves its room atomically."""
    if not identity.quota.limited:
        return
    try:
        refusal = await quota_check(_client(), keycache.names(), identity.key_id, identity.quota)
    except (RedisError, OSError):
        raise _unavailable() from None
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
