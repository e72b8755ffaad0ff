"""The console's derived secrets and credential digests, at the bottom of the app: no model, no service.

Each is derived from ``SECRET_KEY`` rather than stored, so every console and worker process computes
the same value: the runner token a replica's runner, the edges and the console share
(``runner_token``), the key that seals route entries for edges (``edge_key``), and the digest under
which node, join and invitation credentials are stored (``token_hash``; only the digest is kept), and
the passwords of the processes' Redis users (``redis_user_credentials``; ``inference.services.redis_users``
creates the users).
Services, route publishing and the live pages all import from here, never from each other.
"""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings

from contract.redis_acl import password_for, url_with_user, user_name
from contract.routes import edge_key_derive


def token_hash(token: str) -> str:
    """The stored digest of a credential shown once (node tokens, join tokens)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def runner_token(replica_id: int) -> str:
    """Per-replica secret shared by the gateway and the runner, derived rather than stored."""
    return hmac.new(settings.SECRET_KEY.encode(), f"runner:{replica_id}".encode(), hashlib.sha256).hexdigest()


def edge_key() -> bytes:
    """The key edges open route entries with (``contract.routes``)."""
    return edge_key_derive(settings.SECRET_KEY)


def redis_user_credentials(kind: str, deployment: str | None = None) -> tuple[str, str]:
    """(user, password) of one process kind's Redis user; a runner's for ``deployment``."""
    user = user_name(settings.REDIS_PREFIX, kind, deployment)
    return user, password_for(settings.SECRET_KEY, user, settings.REDIS_ACL_EPOCH)


def redis_user_url(kind: str, deployment: str | None = None, *, base: str | None = None) -> str:
    """``base`` (default the console's ``REDIS_URL``) with that user's credentials."""
    return url_with_user(base or settings.REDIS_URL, *redis_user_credentials(kind, deployment))
