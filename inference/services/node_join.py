"""Joining: an operator makes a single-use, expiring join token; a new node's agent exchanges it for
its own credential. Both secrets are stored as SHA-256 only and shown once.

Labels under ``lantau.io/`` are reserved: only a join token (made by an install administrator) may carry them,
never the joining node. ``lantau.io/edge=true`` lets the node's agent run its region's edge: it alone
may fetch the edge's secrets (``node_edge_config``, ``GET /api/v1/nodes/edge-config``)."""

from __future__ import annotations

import re
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.install_admin import audit_fleet
from accounts.models import Team
from accounts.permissions import permission_require
from core.errors import Conflict, Forbidden, Unauthorized, ValidationFailed
from inference.credentials import token_hash
from inference.models import JoinToken, Node, NodeMode, NodeStatus
from inference.routes_publish import edge_environment
from inference.services.nodes import ADVERTISE_HOST, node_require_manager
from inference.services.regions import region_require

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_LABEL_KEY = re.compile(r"^[a-z0-9]([a-z0-9._/-]{0,62})$")
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,62})$|^$")
MAX_LABELS = 32
MIN_TTL_S, MAX_TTL_S = 60, 7 * 24 * 3600
RESERVED_PREFIX = "lantau.io/"  # labels only a join token may carry
EDGE_LABEL = "lantau.io/edge"  # "true": the node may run its region's edge (and fetch its secrets)
RESERVED_LABELS = {EDGE_LABEL: frozenset({"true"})}


def labels_validate(labels: object, *, field: str = "labels") -> dict[str, str]:
    """Labels as ``{"gpu": "a10"}``: keys lowercase (``a-z 0-9 . _ / -``), values up to 63 characters."""
    if not isinstance(labels, dict):
        raise ValidationFailed(f'{field} must be an object of string values, e.g. {{"gpu": "a10"}}')
    if len(labels) > MAX_LABELS:
        raise ValidationFailed(f"{field}: at most {MAX_LABELS} labels")
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_KEY.match(key):
            raise ValidationFailed(
                f"{field}: {key!r} is not a label name (lowercase letters, digits, '.', '_', '/', '-'; max 63)"
            )
        if not isinstance(value, str) or not _LABEL_VALUE.match(value):
            raise ValidationFailed(
                f"{field}: the value of {key!r} must be a string of letters, digits, '.', '_', '-' (max 63)"
            )
    return dict(labels)


def _reserved_check(labels: dict[str, str], *, from_node: bool) -> None:
    """Reserved labels (``lantau.io/``) come from join tokens only, and only the known ones."""
    for key, value in labels.items():
        if not key.startswith(RESERVED_PREFIX):
            continue
        if from_node:
            raise ValidationFailed(
                f"labels: {key!r} is reserved; only a join token an install administrator made may carry it"
            )
        if value not in RESERVED_LABELS.get(key, ()):
            known = ", ".join(f"{k}={'|'.join(sorted(v))}" for k, v in RESERVED_LABELS.items())
            raise ValidationFailed(f"labels: {key}={value} is not a reserved label (known: {known})")


def node_is_edge(node: Node) -> bool:
    return (node.labels or {}).get(EDGE_LABEL) == "true"


def join_token_create(
    *,
    actor,
    region: str,
    labels: dict[str, str],
    ttl_s: int = 3600,
    name_hint: str = "",
    team: Team | None = None,
    edge: bool = False,
    for_team: bool = False,
) -> tuple[JoinToken, str]:
    """A join token for one new node in ``region`` carrying ``labels``; the clear token is returned once.

    Install administrators make tokens for the shared fleet; ``edge`` (the same as the label
    ``lantau.io/edge=true``) lets that node run its region's edge. With ``for_team`` (and
    ``LANTAU_TEAM_NODES``) the node belongs to ``team`` alone, and its owners and admins may make the
    token; such a node never runs an edge nor receives another team's replica (review H-A)."""
    if for_team:
        _team_token_check(actor=actor, team=team, labels=labels, edge=edge)
    else:
        node_require_manager(actor=actor, team=team)
    region_require(region)  # "region must be one of hk, us, ..." (the regions table)
    labels = labels_validate(labels)
    _reserved_check(labels, from_node=False)
    if edge:
        labels[EDGE_LABEL] = "true"
    if not MIN_TTL_S <= ttl_s <= MAX_TTL_S:
        raise ValidationFailed(f"ttl_s must be between {MIN_TTL_S} and {MAX_TTL_S} seconds")
    if name_hint and not NAME_RE.match(name_hint):
        raise ValidationFailed("name_hint must be lowercase letters, digits and dashes (max 63)")
    clear = f"ltj_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        token = JoinToken.objects.create(
            token_prefix=clear[:12], token_hash=token_hash(clear), region=region, labels=labels,
            name_hint=name_hint, team=team, created_by=actor, node_team=team if for_team else None,
            expires_at=timezone.now() + timedelta(seconds=ttl_s),
        )  # fmt: skip
        audit_fleet(actor=actor, action="node.join_token", target=token.token_prefix,
                    teams=[team.pk] if team is not None else [],
                    data={"region": region, "labels": labels, "ttl_s": ttl_s, "for_team": for_team})  # fmt: skip
    return token, clear


def _team_token_check(*, actor, team: Team | None, labels: dict[str, str], edge: bool) -> None:
    if not settings.TEAM_NODES:
        raise Forbidden("teams may not bring their own nodes on this install (LANTAU_TEAM_NODES is off)")
    if team is None:
        raise ValidationFailed("a team's own node needs a current team")
    permission_require(team=team, user=actor, action="node.manage")
    if edge or any(key.startswith(RESERVED_PREFIX) for key in labels):
        raise Forbidden(f"a team's own node cannot carry {RESERVED_PREFIX} labels (edges serve every team)")


def node_join(*, join_token: str, name: str, region: str, labels: dict[str, str]) -> tuple[Node, str]:
    """Exchange a join token for a node credential. Exactly one caller wins a token (a conditional
    UPDATE claims it); a node name already held by a ready node is refused, and an offline node of
    that name is taken over (the same machine re-joining), keeping its row and replicas' history."""
    token = JoinToken.objects.filter(token_hash=token_hash(join_token or "")).first()
    if token is None:
        raise Unauthorized("invalid join token")
    if token.used_at is not None:
        raise Conflict("this join token was already used; ask an operator for a new one")
    if token.expired:
        raise Unauthorized(f"this join token expired at {token.expires_at:%Y-%m-%d %H:%M:%S} UTC")
    if not NAME_RE.match(name or ""):
        raise ValidationFailed("name must be lowercase letters, digits and dashes (max 63)")
    region_require(region)
    labels = labels_validate(labels)
    _reserved_check(labels, from_node=True)
    if region != token.region:
        raise Conflict(f"this join token is for region {token.region!r}, not {region!r}")
    clear = f"ltn_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        region_require(region, lock=True)  # not removed while this node joins it
        claimed = JoinToken.objects.filter(pk=token.pk, used_at__isnull=True).update(
            used_at=timezone.now(), used_by=name
        )
        if not claimed:  # another request won the race for the same token
            raise Conflict("this join token was already used; ask an operator for a new one")
        node = _node_claim(name=name, region=region, labels={**labels, **token.labels}, clear=clear,
                           team_id=token.node_team_id)  # fmt: skip
        audit_fleet(actor=None, action="node.join", target=name,
                    teams=[t for t in (token.team_id, token.node_team_id) if t is not None],
                    data={"region": region, "join_token": token.token_prefix, "edge": node_is_edge(node),
                          "team_node": token.node_team_id is not None})  # fmt: skip
    return node, clear


def node_edge_config(*, node: Node) -> dict:
    """The environment of the edge process an edge node's agent runs (``edge_environment``: the edge key,
    a secret, the public key of signed entries, Redis and its prefix), with the node's region; only for
    nodes that joined with an edge token (403 otherwise). Each hand-out is an audit event."""
    if not node_is_edge(node):
        raise Forbidden(
            f"node {node.name!r} may not run an edge: join it with a join token an install administrator made "
            f"with edge (label {EDGE_LABEL}=true)"
        )
    audit_fleet(actor=None, action="node.edge_config", target=node.name, data={"region": node.region})
    return {"node": node.name, "region": node.region, "environment": edge_environment()}


def _node_claim(*, name: str, region: str, labels: dict[str, str], clear: str, team_id: int | None) -> Node:
    existing = Node.objects.select_for_update().filter(name=name).first()
    if existing is not None and existing.status == NodeStatus.ONLINE:
        raise Conflict(f"a ready node is already called {name!r}; choose another name")
    if existing is not None and existing.team_id != team_id:
        # A team's token cannot take over a shared node (or another team's) with its replicas, nor the
        # other way round: re-joining under a name is for the same owner's machine (review H-A).
        raise Conflict(f"a node is already called {name!r}; choose another name")
    fields = {"region": region, "labels": labels, "token_prefix": clear[:12], "token_hash": token_hash(clear),
              "rotate_requested": False, "team_id": team_id}  # fmt: skip
    if existing is None:
        try:
            with transaction.atomic():
                return Node.objects.create(name=name, mode=NodeMode.ACTIVE, **fields)
        except IntegrityError:
            raise Conflict(f"a node is already called {name!r}; choose another name") from None
    # The same machine re-joining: a new address may come with it (see replica_url_allowed).
    existing.inventory = {k: v for k, v in existing.inventory.items() if k != ADVERTISE_HOST}
    for key, value in fields.items():
        setattr(existing, key, value)
    existing.save()
    return existing
