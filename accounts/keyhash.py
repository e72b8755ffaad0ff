"""The console's API-key secrets: the pepper (database hashes) and the cache signing key (Redis entries).

* ``key_hash`` = HMAC-SHA256(pepper, key), checked in constant time. ``hash_scheme`` names the pepper
  (``hmac-sha256:<pepper id>``), so after ``LANTAU_KEY_PEPPER`` changes, rows made under a pepper listed
  in ``LANTAU_KEY_PEPPER_PREVIOUS`` still verify and are rehashed on use. Legacy rows (``sha256``) hold
  the plain SHA-256 and are rehashed the same way.
* ``digest_sealed`` = the key's SHA-256 encrypted (AES-GCM, key derived from the pepper, bound to the
  prefix): the console needs it to rebuild a key's signed Redis entry after Redis loses it, and a
  database dump alone reveals nothing checkable.
* The Ed25519 signing key (``LANTAU_CACHE_SIGNING_KEY``) signs Redis entries; runners get the public key.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from functools import lru_cache

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings

from accounts.models import ApiKey
from contract.apikeys import (
    HASH_SCHEME_HMAC,
    HASH_SCHEME_LEGACY,
    digests_equal,
    key_hash,
    key_hmac,
    pepper_id,
)
from contract.signing import Ed25519PrivateKey, derive_secret, public_key_text, signing_key_from_secret


@dataclass(frozen=True)
class StoredHash:
    key_hash: str
    hash_scheme: str
    digest_sealed: str


def _peppers() -> dict[str, bytes]:
    """Current and previous peppers by id (read each time: tests override the settings)."""
    known = {pepper_id(p): p for p in settings.KEY_PEPPERS_PREVIOUS}
    known[pepper_id(settings.KEY_PEPPER)] = settings.KEY_PEPPER
    return known


def current_scheme() -> str:
    return f"{HASH_SCHEME_HMAC}:{pepper_id(settings.KEY_PEPPER)}"


def _aead(pepper: bytes) -> AESGCM:
    return AESGCM(derive_secret(pepper, "lantau/cache-digest-seal/v1"))


def hash_new(clear: str, prefix: str) -> StoredHash:
    """What a row stores for ``clear`` under the current pepper."""
    pepper, nonce = settings.KEY_PEPPER, os.urandom(12)
    sealed = nonce + _aead(pepper).encrypt(nonce, bytes.fromhex(key_hash(clear)), prefix.encode())
    return StoredHash(key_hmac(pepper, clear), current_scheme(), base64.urlsafe_b64encode(sealed).decode())


def _pepper_of(api_key: ApiKey) -> bytes | None:
    scheme, _, pid = api_key.hash_scheme.partition(":")
    return _peppers().get(pid) if scheme == HASH_SCHEME_HMAC else None


def hash_matches(api_key: ApiKey, clear: str) -> bool:
    """Whether ``clear`` is this row's key (constant-time compare); False under an unknown pepper."""
    if api_key.hash_scheme == HASH_SCHEME_LEGACY:
        return digests_equal(api_key.key_hash, key_hash(clear))
    pepper = _pepper_of(api_key)
    return pepper is not None and digests_equal(api_key.key_hash, key_hmac(pepper, clear))


def needs_rehash(api_key: ApiKey) -> bool:
    return api_key.hash_scheme != current_scheme()


def cache_digest(api_key: ApiKey) -> str | None:
    """The key's SHA-256 for its Redis entry, or None when it cannot be recovered (unknown pepper)."""
    if api_key.hash_scheme == HASH_SCHEME_LEGACY:
        return api_key.key_hash
    pepper = _pepper_of(api_key)
    if pepper is None or not api_key.digest_sealed:
        return None
    try:
        sealed = base64.urlsafe_b64decode(api_key.digest_sealed)
        return _aead(pepper).decrypt(sealed[:12], sealed[12:], api_key.prefix.encode()).hex()
    except (InvalidTag, ValueError):
        return None


@lru_cache(maxsize=4)
def _signer_for(secret: str) -> Ed25519PrivateKey:
    return signing_key_from_secret(secret)


def signer() -> Ed25519PrivateKey:
    return _signer_for(settings.CACHE_SIGNING_KEY)


def verify_key_text() -> str:
    """The public key runners and the gateway check entries with (sent in each replica's manifest)."""
    return public_key_text(signer())
