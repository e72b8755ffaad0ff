"""Ed25519 signatures for what the console writes to Redis, and HKDF for secrets derived from SECRET_KEY.

Anyone who can write Redis (every node host can) could otherwise forge an API-key cache entry that
runners and the gateway trust. The console signs each entry with a private key that only it holds;
runners receive the public key in their manifest (``contract.manifest``'s ``key_verify_key``) and
never anything that lets them sign. Every signature covers a *context* (what kind of record, under
which Redis prefix) so a valid signature cannot be replayed as another kind of record or another install's.
"""

from __future__ import annotations

import base64
import binascii

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "Ed25519PrivateKey",
    "Ed25519PublicKey",
    "derive_secret",
    "key_pepper",
    "public_key_from_text",
    "public_key_text",
    "sign",
    "signing_key_from_secret",
    "verify",
]


def derive_secret(master: str | bytes, purpose: str, length: int = 32) -> bytes:
    """``length`` bytes derived from ``master`` for one ``purpose`` (HKDF-SHA256); distinct purposes
    give independent secrets, so one SECRET_KEY can seed the pepper and the signing key safely."""
    material = master.encode("utf-8") if isinstance(master, str) else master
    hkdf = HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=purpose.encode("utf-8"))
    return hkdf.derive(material)


DERIVED_MARK = "secret-key:"  # LANTAU_KEY_PEPPER_PREVIOUS entries naming an old SECRET_KEY


def key_pepper(value: str | None, secret_key: str) -> bytes:
    """The API-key pepper: ``value`` as given; ``secret-key:<old SECRET_KEY>`` derives from that key (to
    list the pepper of a rotated SECRET_KEY as previous); nothing derives from ``secret_key``."""
    if value and value.startswith(DERIVED_MARK):
        return derive_secret(value[len(DERIVED_MARK) :], "lantau/api-key-pepper/v1")
    if value:
        return value.encode("utf-8")
    return derive_secret(secret_key, "lantau/api-key-pepper/v1")


def signing_key_from_secret(secret: str | bytes) -> Ed25519PrivateKey:
    """The Ed25519 key whose 32-byte seed is derived from ``secret`` (any length, any text)."""
    return Ed25519PrivateKey.from_private_bytes(derive_secret(secret, "lantau/cache-signing-key/v1"))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def public_key_text(private: Ed25519PrivateKey) -> str:
    """The public half as unpadded base64url of its 32 raw bytes (what manifests carry)."""
    raw = private.public_key().public_bytes_raw()
    return _b64(raw)


def public_key_from_text(text: str) -> Ed25519PublicKey:
    """Parse ``public_key_text``'s output; ValueError when it is not a 32-byte Ed25519 key."""
    try:
        raw = _unb64(text)
    except (binascii.Error, ValueError):
        raise ValueError("not base64url") from None
    if len(raw) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def sign(private: Ed25519PrivateKey, context: bytes, message: bytes) -> str:
    return _b64(private.sign(context + b"\x00" + message))


def verify(public: Ed25519PublicKey, context: bytes, message: bytes, signature: str) -> bool:
    """True only for a signature by ``public``'s key over exactly this context and message."""
    try:
        public.verify(_unb64(signature), context + b"\x00" + message)
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True
