"""API key format and hashing (pure functions).

A key looks like `lt_<8 hex prefix>_<43 url-safe chars>`. The prefix is shown in lists so people can
tell keys apart; the SHA-256 of the whole key is what is stored and cached. Keys carry ~256 bits of
entropy, so a plain fast hash is safe here (no password stretching needed).
"""

from __future__ import annotations

import hashlib
import re
import secrets

_KEY_RE = re.compile(r"^lt_[0-9a-f]{8}_[A-Za-z0-9_-]{43}$")


def key_generate() -> tuple[str, str, str]:
    """Return (clear key, prefix, hash)."""
    prefix = f"lt_{secrets.token_hex(4)}"
    key = f"{prefix}_{secrets.token_urlsafe(32)}"
    return key, prefix, key_hash(key)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def key_is_well_formed(key: str) -> bool:
    return bool(_KEY_RE.match(key))


def bearer_token(authorization: str | None) -> str | None:
    """Extract the token from an `Authorization: Bearer <token>` header value."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
