"""Reads for teams, memberships and API keys."""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.db.models import QuerySet
from django.utils import timezone

from accounts import keycache
from accounts.keys import key_hash, key_is_well_formed
from accounts.models import ApiKey, AuditEvent, Membership, Team


@dataclass(frozen=True)
class KeyIdentity:
    key_id: int
    team_id: int
    scopes: tuple[str, ...]


def membership_for(*, user, team_id: int | None = None) -> Membership | None:
    """The user's membership of `team_id`, or of their first team when no id is given."""
    if not user or not user.is_authenticated:
        return None
    qs = Membership.objects.select_related("team").filter(user=user).order_by("created_at", "pk")
    if team_id is not None:
        qs = qs.filter(team_id=team_id)
    return qs.first()


def team_members(*, team: Team) -> QuerySet[Membership]:
    return Membership.objects.select_related("user").filter(team=team).order_by("user__username")


def api_keys_for_team(*, team: Team) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(team=team).select_related("created_by")


def audit_events_for_team(*, team: Team, limit: int = 50) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(team=team).select_related("actor")[:limit]


def identity_from_entry(raw: bytes | str) -> KeyIdentity:
    entry = json.loads(raw)
    return KeyIdentity(key_id=entry["key_id"], team_id=entry["team_id"], scopes=tuple(entry["scopes"]))


def api_key_entry_db(digest: str) -> str | None:
    """An active key's cache entry (JSON) from the database, written back to the cache; None if unknown."""
    api_key = ApiKey.objects.filter(key_hash=digest, revoked_at__isnull=True).first()
    if api_key is None:
        return None
    ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=timezone.now())
    entry = keycache.entry_for(api_key)
    keycache.cache_put(digest, entry)
    return json.dumps(entry)


def api_key_lookup_db(digest: str) -> KeyIdentity | None:
    raw = api_key_entry_db(digest)
    return identity_from_entry(raw) if raw is not None else None


def api_key_authenticate(clear_key: str) -> KeyIdentity | None:
    """Resolve a clear key to its identity through the Redis cache, falling back to the database."""
    if not key_is_well_formed(clear_key):
        return None
    digest = key_hash(clear_key)
    raw = keycache.client().get(keycache.cache_key(digest))
    if raw is not None:
        return identity_from_entry(raw)
    return api_key_lookup_db(digest)
