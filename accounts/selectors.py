"""Reads for teams, memberships and API keys."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Max, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone
from redis.exceptions import RedisError

from accounts import keycache, usage
from accounts.models import ApiKey, ApiKeyKind, ApiKeyUsage, AuditEvent, Invitation, Membership, Team
from contract.quotas import USAGE_FIELDS
from core.errors import NotFound


def membership_for(*, user, team_id: int | None = None) -> Membership | None:
    """The user's membership of `team_id`, or of their first team when no id is given."""
    if not user or not user.is_authenticated:
        return None
    qs = Membership.objects.select_related("team").filter(user=user).order_by("created_at", "pk")
    if team_id is not None:
        qs = qs.filter(team_id=team_id)
    return qs.first()


def memberships_of(*, user) -> list[Membership]:
    """The user's teams (for the switcher), oldest membership first."""
    if not user or not user.is_authenticated:
        return []
    return list(Membership.objects.select_related("team").filter(user=user).order_by("created_at", "pk"))


def team_members(*, team: Team) -> QuerySet[Membership]:
    return Membership.objects.select_related("user").filter(team=team).order_by("user__username")


def invitation_token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def invitation_by_token(token: str) -> Invitation | None:
    return Invitation.objects.select_related("team").filter(token_hash=invitation_token_hash(token)).first()


def invitations_for_team(*, team: Team) -> QuerySet[Invitation]:
    return Invitation.objects.filter(team=team).select_related("created_by", "accepted_by")


def api_keys_for_team(*, team: Team) -> QuerySet[ApiKey]:
    """The team's keys, without the playground's short-lived ones (`accounts.playground_keys`)."""
    return ApiKey.objects.filter(team=team).exclude(kind=ApiKeyKind.PLAYGROUND).select_related("created_by")


def audit_events_for_team(*, team: Team, limit: int = 50) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(team=team).select_related("actor")[:limit]


AUDIT_ORDERINGS = {"created_at", "-created_at", "action", "-action", "actor", "-actor", "target", "-target"}


def audit_events_query(
    *,
    team: Team,
    actor: str | None = None,
    action: str | None = None,
    target: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    order: str = "-created_at",
) -> QuerySet[AuditEvent]:
    """The team's audit events, filtered: `actor` is a username, `action` an exact action or a
    prefix ending in `.` (`member.`), `target` a substring; `since` inclusive, `until` exclusive."""
    qs = AuditEvent.objects.filter(team=team).select_related("actor")
    if actor:
        qs = qs.filter(actor__username=actor)
    if action:
        qs = qs.filter(action__startswith=action) if action.endswith(".") else qs.filter(action=action)
    if target:
        qs = qs.filter(target__icontains=target)
    if since:
        qs = qs.filter(created_at__gte=since)
    if until:
        qs = qs.filter(created_at__lt=until)
    field = order if order in AUDIT_ORDERINGS else "-created_at"
    field = field.replace("actor", "actor__username")
    return qs.order_by(field, "-pk")


def api_key_for_team(*, team: Team, key_id: int) -> ApiKey:
    api_key = ApiKey.objects.filter(team=team, pk=key_id).exclude(kind=ApiKeyKind.PLAYGROUND).first()
    if api_key is None:
        raise NotFound("API key not found")
    return api_key


def api_key_month_totals(*, key_ids: list[int]) -> dict[int, dict[str, int]]:
    """This UTC month's usage per key: rolled up in the database plus what Redis holds not yet rolled."""
    totals = usage.month_totals_db(key_ids, timezone.now())
    try:
        pending = usage.pending_usage(key_ids)
    except RedisError:  # the page still shows what the database knows
        pending = {}
    for key_id, extra in pending.items():
        totals[key_id] = {f: totals[key_id][f] + extra[f] for f in USAGE_FIELDS}
    return totals


def api_key_last_uses(*, keys: list[ApiKey]) -> dict[int, tuple[datetime, str | None]]:
    """Each used key's last use (time, address): the newest of the key row (rolled up), the usage
    table's latest hour with requests (usage rolled up before the row was) and the runners' not yet
    rolled-up note in Redis; keys never used are left out."""
    out: dict[int, tuple[datetime, str | None]] = {
        k.pk: (k.last_used_at, k.last_used_address) for k in keys if k.last_used_at is not None
    }

    def note(key_id: int, at: datetime, address: str | None) -> None:
        if key_id not in out or at > out[key_id][0]:
            out[key_id] = (at, address or out.get(key_id, (at, None))[1])

    hours = (
        ApiKeyUsage.objects.filter(api_key_id__in=[k.pk for k in keys], requests__gt=0)
        .values("api_key_id")
        .annotate(last=Max("hour"))
    )
    for row in hours:
        if row["api_key_id"] not in out:  # the hour only says when, less precisely than the row
            note(row["api_key_id"], row["last"], None)
    try:
        names, pipe = keycache.names(), keycache.client().pipeline(transaction=False)
        for k in keys:
            pipe.hgetall(names.last_use(k.pk))
        for k, row in zip(keys, pipe.execute(), strict=True):
            try:
                at = datetime.fromtimestamp(float(row.get(b"at", b"")), tz=UTC)
            except ValueError:
                continue
            note(k.pk, at, row.get(b"addr", b"").decode() or None)
    except RedisError:  # the page still shows what the database knows
        pass
    return out


def api_key_usage_by_day(*, api_key: ApiKey, days: int) -> list[dict]:
    """Rolled-up usage per UTC day over the last `days` days, oldest first, days without use left out."""
    return api_keys_usage_by_day(key_ids=[api_key.pk], days=days).get(api_key.pk, [])


def api_keys_usage_by_day(*, key_ids: list[int], days: int) -> dict[int, list[dict]]:
    """`api_key_usage_by_day` for several keys in one query (the keys page draws one chart per key)."""
    start = (timezone.now() - timedelta(days=days - 1)).astimezone(UTC)
    rows = (
        ApiKeyUsage.objects.filter(
            api_key_id__in=key_ids, hour__gte=start.replace(hour=0, minute=0, second=0)
        )
        .annotate(day=TruncDate("hour", tzinfo=UTC))
        .values("api_key_id", "day")
        .annotate(**{f: Sum(f) for f in USAGE_FIELDS})
        .order_by("api_key_id", "day")
    )
    out: dict[int, list[dict]] = {}
    for row in rows:
        sums: dict[str, Any] = dict(row)
        out.setdefault(sums["api_key_id"], []).append(
            {"day": sums["day"], **{f: int(sums[f] or 0) for f in USAGE_FIELDS}}
        )
    return out
