"""API keys on the wire: format, digests, bearer parsing and the signed Redis cache entry.

A key looks like ``lt_<8 hex>_<43 url-safe chars>`` (~256 bits of entropy). Its first part,
``lt_<8 hex>``, is the *prefix*: unique per key, shown in lists, and how a key is found, in the
database and in Redis.

Digests:
  * the database stores ``key_hmac`` = HMAC-SHA256(pepper, key): the console alone holds the pepper,
    so a database dump does not let anyone check a key. Rows created before the pepper stored the
    plain SHA-256 (scheme ``sha256``); they are checked that way and rehashed on their first use.
  * the cache entry carries ``key_hash`` = SHA-256(key), which runners can compute without any secret.

Cache entry (``<prefix>:apikey:<key prefix>``, ``contract.redis_keys``), written only by the console:
``v1.<signature>.<payload JSON>``, the payload holding ``prefix``, ``digest``, ``key_id``,
``team_id``, ``scopes``, ``deployments`` (empty = all of the team's), ``rate_per_s``/``burst``,
``expires_at`` (Unix seconds or null), ``quota`` (``contract.quotas``) and ``revision`` (the key
row's revision, bumped by every change and by revocation). The signature is Ed25519
(``contract.signing``) over the payload under the context ``lantau-apikey-v1`` plus the install's
Redis prefix. The value ``-`` is a tombstone: the key is revoked, expired or unknown, and readers
refuse it without asking the database. A reader accepts a key only when the signature holds, the
entry is for the key's own prefix, the digests match (constant-time), it has not expired and it is
not older than the prefix's revision floor.

Revision floor (``<prefix>:apikey-rev:<key prefix>``, no TTL): ``r1.<revision>.<signature>``, signed
under ``lantau-apikey-floor-v1`` plus the install's prefix over ``<key prefix>:<revision>``. The
console raises it with every change and revocation and never lowers it. Readers refuse an entry whose
revision is below the floor, and each reader process also remembers the highest revision it has seen
per prefix (``Revisions``), so writing a key's old signed entry back over its tombstone (a replay, review
finding M-A) does not revive a revoked key, nor drop a limit added since, even once the tombstone's
TTL has passed. A prefix whose row is gone gets the floor ``REVISION_DEAD``.

Every refusal of a bad key (malformed, unknown, wrong secret, revoked, expired) is the same 401 body
(``INVALID_KEY_MESSAGE``), so answers never tell which keys exist.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .quotas import Quota
from .signing import Ed25519PrivateKey, Ed25519PublicKey, sign, verify

KEY_PATTERN = re.compile(r"lt_[0-9a-f]{8}_[A-Za-z0-9_-]{43}")  # whole string: use fullmatch
PREFIX_LENGTH = len("lt_") + 8
TOMBSTONE = b"-"
ENTRY_VERSION = "v1"
INVALID_KEY_MESSAGE = "invalid, revoked or expired API key, or its owner's account is deactivated"
OWNER_INACTIVE_MESSAGE = (
    "this API key's owner is deactivated: keys of deactivated users are revoked; "
    "ask a team admin for a new key"
)
FLOOR_VERSION = "r1"
REVISION_DEAD = 2**53  # the floor of a prefix whose key row is gone: every entry is refused
MAX_REVISIONS = 100_000  # prefixes a reader remembers the highest revision of
MISSING_KEY_MESSAGE = "missing API key: send `Authorization: Bearer <key>`"
HASH_SCHEME_LEGACY = "sha256"
HASH_SCHEME_HMAC = "hmac-sha256"  # stored as "hmac-sha256:<pepper id>"


@dataclass(frozen=True, slots=True)
class KeyIdentity:
    """Who a verified key belongs to and what it may do."""

    key_id: str  # as it appears in Redis key names and the X-Lantau-Key-Id header
    team_id: int
    scopes: tuple[str, ...]
    rate_per_s: float | None = None  # token-bucket refill rate; None = no limit
    burst: int | None = None
    deployments: tuple[str, ...] = ()  # empty: every deployment of the team
    expires_at: float | None = None  # Unix seconds; None = never
    quota: Quota = field(default_factory=Quota)

    def allows(self, deployment: str) -> bool:
        return not self.deployments or deployment in self.deployments

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


def key_generate() -> tuple[str, str]:
    """A new key: (clear key, prefix)."""
    prefix = f"lt_{secrets.token_hex(4)}"
    return f"{prefix}_{secrets.token_urlsafe(32)}", prefix


def key_prefix(key: str) -> str:
    return key[:PREFIX_LENGTH]


def key_hash(key: str) -> str:
    """SHA-256 hex of the whole key: the digest cache entries carry (and legacy rows stored)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def key_hmac(pepper: bytes, key: str) -> str:
    """HMAC-SHA256 hex of the key under the console's pepper: what the database stores."""
    return hmac.new(pepper, key.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def pepper_id(pepper: bytes) -> str:
    """A short public name of a pepper, stored with each hash so rotation knows which pepper made it."""
    return hmac.new(pepper, b"lantau pepper id", hashlib.sha256).hexdigest()[:8]


def digests_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("ascii", "replace"), b.encode("ascii", "replace"))


def key_is_well_formed(key: str) -> bool:
    return KEY_PATTERN.fullmatch(key) is not None  # `$` would let a trailing newline through


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _context(namespace: str) -> bytes:
    return f"lantau-apikey-{ENTRY_VERSION}\x00{namespace}".encode()


def _floor_context(namespace: str) -> bytes:
    return f"lantau-apikey-floor-{ENTRY_VERSION}\x00{namespace}".encode()


@dataclass(frozen=True, slots=True)
class CachedKey:
    """A verified entry: the digest to compare the presented key with, the identity it grants and the
    revision of the key row it was signed from (0 for entries signed before revisions existed)."""

    prefix: str
    digest: str
    identity: KeyIdentity
    revision: int = 0


def entry_sign(
    signer: Ed25519PrivateKey,
    namespace: str,
    *,
    prefix: str,
    digest: str,
    key_id: int,
    team_id: int,
    scopes: Iterable[str],
    deployments: Iterable[str] = (),
    rate_per_s: float | None = None,
    burst: int | None = None,
    expires_at: float | None = None,
    quota: Quota | None = None,
    revision: int = 0,
) -> str:
    """The signed cache entry of one active key (written by the console); ``namespace`` is the Redis prefix."""
    payload: dict[str, Any] = {
        "prefix": prefix, "digest": digest, "key_id": key_id, "team_id": team_id, "scopes": sorted(scopes),
        "deployments": sorted(deployments), "expires_at": expires_at, "quota": (quota or Quota()).as_dict(),
        "revision": revision,
    }  # fmt: skip
    if rate_per_s:
        payload |= {"rate_per_s": rate_per_s, "burst": burst or max(1, int(rate_per_s))}
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return f"{ENTRY_VERSION}.{sign(signer, _context(namespace), body.encode())}.{body}"


def _strings(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value: Any) -> float | None:
    return (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None
    )


def _identity(p: dict[str, Any]) -> KeyIdentity | None:
    scopes, deployments = _strings(p.get("scopes")), _strings(p.get("deployments"))
    quota, expires = Quota.from_dict(p.get("quota", {})), p.get("expires_at")
    if scopes is None or deployments is None or quota is None or not _is_int(p.get("key_id")):
        return None
    if not _is_int(p.get("team_id")) or not (expires is None or _positive(expires) is not None):
        return None
    rate, burst = _positive(p.get("rate_per_s")), _positive(p.get("burst"))
    if rate is not None and burst is None:
        burst = max(1.0, rate)
    return KeyIdentity(
        str(p["key_id"]), p["team_id"], scopes, rate, int(burst) if burst is not None else None,
        deployments, float(expires) if expires is not None else None, quota,
    )  # fmt: skip


def entry_open(raw: bytes | str, verifier: Ed25519PublicKey, namespace: str, prefix: str) -> CachedKey | None:
    """The entry's content when its signature holds and it is for ``prefix``; None for anything else
    (a tombstone, an unsigned, forged or malformed entry, another key's or another install's entry)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    version, _, rest = text.partition(".")
    signature, _, body = rest.partition(".")
    if version != ENTRY_VERSION or not verify(verifier, _context(namespace), body.encode(), signature):
        return None
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    if (
        not isinstance(payload, dict)
        or payload.get("prefix") != prefix
        or not isinstance(payload.get("digest"), str)
    ):
        return None
    revision = payload.get("revision", 0)
    if not _is_int(revision) or revision < 0:
        return None
    identity = _identity(payload)
    return CachedKey(prefix, payload["digest"], identity, revision) if identity is not None else None


def entry_check(cached: CachedKey, key: str, now: float) -> KeyIdentity | None:
    """The identity when ``key`` is the entry's key (constant-time compare) and has not expired."""
    if not digests_equal(cached.digest, key_hash(key)) or cached.identity.expired(now):
        return None
    return cached.identity


def floor_sign(signer: Ed25519PrivateKey, namespace: str, prefix: str, revision: int) -> str:
    """The signed revision floor of ``prefix``: entries of a lower revision are refused (console only)."""
    signature = sign(signer, _floor_context(namespace), f"{prefix}:{revision}".encode())
    return f"{FLOOR_VERSION}.{revision}.{signature}"


def floor_open(raw: bytes | str, verifier: Ed25519PublicKey, namespace: str, prefix: str) -> int | None:
    """The revision of a floor whose signature holds for ``prefix`` in this install; None otherwise."""
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    version, _, rest = text.partition(".")
    number, _, signature = rest.partition(".")
    if version != FLOOR_VERSION or not number.isdigit() or len(number) > 16:
        return None
    if not verify(verifier, _floor_context(namespace), f"{prefix}:{number}".encode(), signature):
        return None
    return int(number)


class Revisions:
    """What one reader process (the console's ``/v1/``, an edge, a runner) remembers of key revisions:
    the highest each prefix has shown, from a signed floor or an accepted entry, for at most ``limit``
    prefixes (least recently seen forgotten first; only signed values are remembered, so made-up
    prefixes never grow it). ``admit`` refuses an entry older than that or than the floor read with it:
    a replayed entry stays refused by a process that saw the newer one, even if its floor is deleted."""

    def __init__(self, limit: int = MAX_REVISIONS) -> None:
        self.limit = limit
        self._highest: OrderedDict[str, int] = OrderedDict()

    def admit(self, prefix: str, cached: CachedKey | None, floor: int | None) -> CachedKey | None:
        """``cached`` unless its revision is below ``floor`` or below the highest seen for ``prefix``."""
        known = self._highest.get(prefix, 0)
        highest = max(known, floor or 0)
        if cached is not None:
            if cached.revision < highest:
                cached = None
            else:
                highest = cached.revision
        if highest > known:
            self._highest[prefix] = highest
            if len(self._highest) > self.limit:
                self._highest.popitem(last=False)
        if highest:
            self._highest.move_to_end(prefix)
        return cached

    def highest(self, prefix: str) -> int:
        return self._highest.get(prefix, 0)
