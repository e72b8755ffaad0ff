"""The audit log: filtered pages of JSON, or the whole filtered log as CSV or JSON Lines."""

from datetime import datetime
from typing import Literal

from ninja import Router

from accounts import selectors
from accounts.audit_export import export_response
from accounts.permissions import permission_require
from accounts.schemas import AuditPageOut

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
