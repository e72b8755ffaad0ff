"""Reads for teams, memberships and API keys."""

from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone

from accounts import keycache
from accounts.models import ApiKey, AuditEvent, Membership, Team
from contract.apikeys import KeyIdentity, key_hash, key_is_well_formed, parse_entry


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


def api_key_entry_db(digest: str) -> str | None:
    """An active key's cache entry (JSON) from the database, written back to the cache; None if unknown."""
    api_key = ApiKey.objects.filter(key_hash=digest, revoked_at__isnull=True).first()
    if api_key is None:
        return None
    ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=timezone.now())
    return keycache.cache_put(api_key)


def api_key_authenticate(clear_key: str) -> KeyIdentity | None:
    """Resolve a clear key to its identity through the Redis cache, falling back to the database
    (which also rewrites a missing or malformed entry)."""
    if not key_is_well_formed(clear_key):
        return None
    digest = key_hash(clear_key)
    raw: bytes | str | None = keycache.cache_get(digest)
    identity = parse_entry(raw) if raw is not None else None
    if identity is None:
        raw = api_key_entry_db(digest)
        identity = parse_entry(raw) if raw is not None else None
    return identity
