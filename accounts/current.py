"""Which team a request acts for: an explicit hint, else the team chosen in the switcher, else the first.

The hint (`X-Lantau-Team` header or `?team=`) names a team by id; a caller who is not a member of
the hinted team gets no membership (so a 404), never a silent fall-back to another team. The switcher
stores its choice in the session (`SESSION_TEAM_KEY`); pages, the management API (session callers) and
websockets all honour it.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from accounts.models import Membership
from accounts.selectors import membership_for

SESSION_TEAM_KEY = "lantau_team_id"


def team_id_hint(request) -> int | None:
    """The team a caller asks to act for (`X-Lantau-Team` header or `?team=`), if any."""
    raw = request.headers.get("X-Lantau-Team") or request.GET.get("team")
    return int(raw) if raw and raw.isdigit() else None


def _resolve(user, hint: int | None, session) -> Membership | None:
    if hint is not None:
        return membership_for(user=user, team_id=hint)
    chosen = session.get(SESSION_TEAM_KEY) if session is not None else None
    if isinstance(chosen, int):
        membership = membership_for(user=user, team_id=chosen)
        if membership is not None:
            return membership
    return membership_for(user=user)


def membership_for_request(request) -> Membership | None:
    return _resolve(getattr(request, "user", None), team_id_hint(request), getattr(request, "session", None))


def membership_for_scope(scope: dict) -> Membership | None:
    """The same choice for a websocket: `?team=` in its query string, then the session."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    raw = (query.get("team") or [""])[0]
    hint = int(raw) if raw.isdigit() else None
    return _resolve(scope.get("user"), hint, scope.get("session"))
