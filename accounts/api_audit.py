"""The audit log: filtered pages of JSON, or the whole filtered log as CSV or JSON Lines."""

from datetime import UTC, datetime
from typing import Literal

from ninja import Router

from accounts import selectors
from accounts.audit_export import export_response
from accounts.permissions import permission_require
from accounts.schemas import AuditPageOut
from core.errors import ValidationFailed

router = Router(tags=["audit"])


@router.get("", response=AuditPageOut)
def audit_list(
    request,
    actor: str | None = None,
    action: str | None = None,
    target: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    order: str = "-created_at",
    format: Literal["json", "csv", "jsonl"] = "json",
    limit: int = 100,
    offset: int = 0,
):
    """Filters: `actor` (username), `action` (exact, or a prefix ending in `.`), `target` (substring),
    `since` (inclusive) and `until` (exclusive) as ISO 8601 times. `format=csv|jsonl` streams every
    matching event as a download; `json` answers one page (`limit` at most 500)."""
    team = request.auth.team
    permission_require(team=team, user=request.auth.user, action="audit.read")
    since, until = _as_utc(since, "since"), _as_utc(until, "until")
    if any("\x00" in (value or "") for value in (actor, action, target, order)):
        raise ValidationFailed("filters cannot hold a NUL (\\u0000) character")
    events = selectors.audit_events_query(
        team=team, actor=actor, action=action, target=target, since=since, until=until, order=order
    )
    if format != "json":
        return export_response(events, format, team_name=team.name)
    limit, offset = max(1, min(limit, 500)), max(0, offset)
    return {
        "count": events.count(),
        "limit": limit,
        "offset": offset,
        "items": list(events[offset : offset + limit]),
    }


def _as_utc(value: datetime | None, name: str) -> datetime | None:
    # PostgreSQL refuses UTC offsets beyond 15:59 (ISO 8601 allows up to 23:59). Normalised here, a bad
    # value is a 422 before a CSV/JSONL stream starts, not a database error half-way through it (which
    # leaves the client waiting on a stream that never ends); NUL characters likewise, above.
    if value is None or value.tzinfo is None:
        return value
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValidationFailed(f"{name} is out of range") from None
