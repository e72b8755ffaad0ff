"""The console's derived secrets and credential digests, at the bottom of the app: no model, no service.

Each is derived from ``SECRET_KEY`` rather than stored, so every console and worker process computes
the same value: the runner token a replica's runner, the edges and the console share
(``runner_token``), the key that seals route entries for edges (``edge_key``), and the digest under
which node, join and invitation credentials are stored (``token_hash``; only the digest is kept).
Services, route publishing and the live pages all import from here, never from each other.
"""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings

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
