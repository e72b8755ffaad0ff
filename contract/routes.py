"""Route tables on the wire: which replicas serve a deployment, as the console publishes them to edges.

The console writes one signed entry per deployment into the hash ``<prefix>:routes`` (field = the
deployment name, ``contract.redis_keys``) and announces each change on ``<prefix>:routes:changed``
(the message is the deployment's name, or ``*`` after a full rewrite). Edges hold the whole table in
memory, re-read one entry per message, and re-read everything now and then as a safety net.

Entry: ``v1.<signature>.<payload JSON>``; the payload holds ``name``, ``team_id``, ``task``,
``model_version``, ``paused``, ``created``, ``canary_percent`` (0 without a canary), ``scales_from_zero`` and ``replicas``
(ready replicas on ready nodes: ``id``, ``url``, ``region``, ``node``, ``token`` and ``canary``, true
for a canary version's replica). With a canary, an edge sends about ``canary_percent`` of requests to
the canary replicas and the rest to the others (``inference.edge.balancer``); entries written before
canaries existed read as none. ``scales_from_zero`` (autoscaling with ``min_replicas`` 0) tells an
edge that a request finding no ready replica is held while the deployment wakes (``contract.wake``: a task
message pushed onto the console's Celery queue) instead of answered 503 at once
(``contract.wake``). The signature is Ed25519 (``contract.signing``) under the
context ``lantau-routes-v1`` plus the install's Redis prefix, by the same console key that signs
API-key entries: whoever can write Redis cannot point an edge at a host of their own.

Each replica's runner token is *sealed* (AES-GCM under the edge key, bound to the prefix and the
replica id): readers of Redis learn no token; an edge, which holds the edge key
(``LANTAU_EDGE_KEY``, derived by the console from its SECRET_KEY, ``edge_key_derive``), opens them.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .signing import Ed25519PrivateKey, Ed25519PublicKey, derive_secret, sign, verify

ENTRY_VERSION = "v1"
ALL_ROUTES = "*"  # the change message after a full rewrite
REGION_HEADER = "X-Lantau-Region"
SERVED_BY_HEADER = "X-Lantau-Served-By"
EDGE_KEY_ENV = "LANTAU_EDGE_KEY"


@dataclass(frozen=True, slots=True)
class RouteReplica:
    id: int
    url: str
    region: str
    node: str
    token: str  # sealed on the wire; clear once an edge opened it
    canary: bool = False  # runs the deployment's canary version

    def served_by(self) -> str:
        """The ``X-Lantau-Served-By`` value of answers from this replica: ``<region>/<node>/r<id>``."""
        return f"{self.region}/{self.node}/r{self.id}"


@dataclass(frozen=True, slots=True)
class RouteEntry:
    name: str
    team_id: int
    task: str
    model_version: str
    paused: bool
    created: int
    replicas: tuple[RouteReplica, ...] = ()
    canary_percent: int = 0  # share of requests for the canary replicas (0-100)
    scales_from_zero: bool = False  # with no ready replica: hold requests and wake it (autoscaling to 0)


def edge_key_derive(secret_key: str) -> bytes:
    """The 32-byte edge key the console derives from its SECRET_KEY (edges get it as text)."""
    return derive_secret(secret_key, "lantau/edge-route-seal/v1")


def edge_key_text(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).rstrip(b"=").decode("ascii")


def edge_key_from_text(text: str) -> bytes:
    """Parse ``edge_key_text``'s output; ValueError unless it is 32 bytes of base64url."""
    try:
        raw = base64.urlsafe_b64decode(text.strip() + "=" * (-len(text.strip()) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("the edge key is not base64url") from None
    if len(raw) != 32:
        raise ValueError("the edge key is 32 bytes")
    return raw


def _aad(namespace: str, replica_id: int) -> bytes:
    return f"lantau-runner-token-v1\x00{namespace}\x00{replica_id}".encode()


def token_seal(edge_key: bytes, namespace: str, replica_id: int, token: str) -> str:
    nonce = os.urandom(12)
    sealed = nonce + AESGCM(edge_key).encrypt(nonce, token.encode(), _aad(namespace, replica_id))
    return base64.urlsafe_b64encode(sealed).rstrip(b"=").decode("ascii")


def token_open(edge_key: bytes, namespace: str, replica_id: int, sealed: str) -> str | None:
    """The clear token, or None when it was sealed under another key, prefix or replica, or tampered with."""
    try:
        raw = base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4))
        return AESGCM(edge_key).decrypt(raw[:12], raw[12:], _aad(namespace, replica_id)).decode()
    except (binascii.Error, ValueError, InvalidTag, UnicodeDecodeError):
        return None


def _context(namespace: str) -> bytes:
    return f"lantau-routes-{ENTRY_VERSION}\x00{namespace}".encode()


def route_sign(signer: Ed25519PrivateKey, namespace: str, entry: RouteEntry, edge_key: bytes) -> str:
    """The signed entry of one deployment, its runner tokens sealed under ``edge_key``."""
    replicas = [
        {"id": r.id, "url": r.url, "region": r.region, "node": r.node,
         "token": token_seal(edge_key, namespace, r.id, r.token), "canary": r.canary}
        for r in entry.replicas
    ]  # fmt: skip
    payload = {"name": entry.name, "team_id": entry.team_id, "task": entry.task,
               "model_version": entry.model_version, "paused": entry.paused, "created": entry.created,
               "replicas": replicas, "canary_percent": entry.canary_percent,
               "scales_from_zero": entry.scales_from_zero}  # fmt: skip
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return f"{ENTRY_VERSION}.{sign(signer, _context(namespace), body.encode())}.{body}"


def _replica(item: Any, edge_key: bytes, namespace: str) -> RouteReplica | None:
    if not isinstance(item, dict):
        return None
    rid, url, region, node, sealed = (item.get(k) for k in ("id", "url", "region", "node", "token"))
    if not (isinstance(rid, int) and not isinstance(rid, bool)) or not isinstance(sealed, str):
        return None
    if not all(isinstance(v, str) for v in (url, region, node)) or not str(url).startswith("http"):
        return None
    token = token_open(edge_key, namespace, rid, sealed)
    if token is None:
        return None
    return RouteReplica(rid, str(url), str(region), str(node), token, item.get("canary") is True)


def route_open(
    raw: bytes | str, verifier: Ed25519PublicKey, namespace: str, name: str, edge_key: bytes
) -> RouteEntry | None:
    """The entry when its signature holds and it is ``name``'s; None for anything else. A replica whose
    token cannot be opened is left out (it was sealed for another edge key)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    version, _, rest = text.partition(".")
    signature, _, body = rest.partition(".")
    if version != ENTRY_VERSION or not verify(verifier, _context(namespace), body.encode(), signature):
        return None
    try:
        p = json.loads(body)
    except ValueError:
        return None
    if not isinstance(p, dict) or p.get("name") != name or not isinstance(p.get("replicas"), list):
        return None
    team_id, created = p.get("team_id"), p.get("created")
    if not isinstance(team_id, int) or not isinstance(created, int):
        return None
    replicas = [_replica(item, edge_key, namespace) for item in p["replicas"]]
    percent = p.get("canary_percent", 0)
    if not isinstance(percent, int) or isinstance(percent, bool) or not 0 <= percent <= 100:
        percent = 0
    return RouteEntry(
        name, team_id, str(p.get("task", "")), str(p.get("model_version", "")), p.get("paused") is True,
        created, tuple(r for r in replicas if r is not None), percent, p.get("scales_from_zero") is True,
    )  # fmt: skip
