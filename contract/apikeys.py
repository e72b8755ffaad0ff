"""API keys on the wire: format, hash, bearer parsing and the Redis cache entry.

A key looks like ``lt_<8 hex>_<43 url-safe chars>``; the prefix is shown in lists so people can tell
keys apart, and the SHA-256 (hex) of the whole key is what is stored and cached. Keys carry ~256 bits
of entropy, so a plain fast hash is safe here (no password stretching needed).

The console (``accounts.keycache``) writes one cache entry per active key, JSON
``{"key_id", "team_id", "scopes"}`` plus ``rate_per_s``/``burst`` when the key is rate limited, and
deletes it on revocation. The gateway, the management API and the runners read it with ``parse_entry``.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

KEY_PATTERN = re.compile(r"lt_[0-9a-f]{8}_[A-Za-z0-9_-]{43}")  # whole string: use fullmatch


@dataclass(frozen=True, slots=True)
class KeyIdentity:
    """Who a verified key belongs to and what it may do."""

    key_id: str  # as it appears in Redis key names and the X-Lantau-Key-Id header
    team_id: int
    scopes: tuple[str, ...]
    rate_per_s: float | None = None  # token-bucket refill rate; None = no limit
    burst: int | None = None


def key_generate() -> tuple[str, str, str]:
    """A new key: (clear key, display prefix, hash)."""
    prefix = f"lt_{secrets.token_hex(4)}"
    key = f"{prefix}_{secrets.token_urlsafe(32)}"
    return key, prefix, key_hash(key)


def key_hash(key: str) -> str:
    """SHA-256 hex of the whole key: what the database stores and the cache is keyed by."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def key_is_well_formed(key: str) -> bool:
    return KEY_PATTERN.fullmatch(key) is not None  # `$` would let a trailing newline through


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def entry_json(
    *,
    key_id: int,
    team_id: int,
    scopes: Iterable[str],
    rate_per_s: float | None = None,
    burst: int | None = None,
) -> str:
    """The cache entry for one active key (written by the console)."""
    entry: dict[str, Any] = {"key_id": key_id, "team_id": team_id, "scopes": list(scopes)}
    if rate_per_s:
        entry |= {"rate_per_s": rate_per_s, "burst": burst or max(1, int(rate_per_s))}
    return json.dumps(entry)


def _positive_number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_entry(raw: bytes | str) -> KeyIdentity | None:
    """The identity in a cache entry, or None when the entry is malformed."""
    try:
        entry = json.loads(raw)
        key_id, team_id, scopes = entry["key_id"], entry["team_id"], entry["scopes"]
    except (ValueError, KeyError, TypeError):
        return None
    if not (_is_int(key_id) or (isinstance(key_id, str) and key_id)) or not _is_int(team_id):
        return None
    if not isinstance(scopes, list) or not all(isinstance(scope, str) for scope in scopes):
        return None
    rate = _positive_number(entry.get("rate_per_s"))
    burst = _positive_number(entry.get("burst"))
    if rate is not None and burst is None:
        burst = max(1.0, rate)  # without an explicit burst, allow one second's worth
    return KeyIdentity(str(key_id), team_id, tuple(scopes), rate, int(burst) if burst is not None else None)
