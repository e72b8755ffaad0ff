"""Who is calling the management API: a signed-in person (session + CSRF) or a `manage`-scoped API key."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from ninja.security import APIKeyCookie, HttpBearer

from accounts.models import ApiKey, Membership, Team
from accounts.selectors import api_key_authenticate, membership_for


@dataclass
class Principal:
    user: object
    team: Team
    membership: Membership
    via: str  # "session" or "api_key"


def team_id_hint(request) -> int | None:
    """The team a caller asks to act for (`X-Lantau-Team` header or `?team=`), if any."""
    raw = request.headers.get("X-Lantau-Team") or request.GET.get("team")
    return int(raw) if raw and raw.isdigit() else None


class SessionTeamAuth(APIKeyCookie):
    param_name = settings.SESSION_COOKIE_NAME

    def authenticate(self, request, key):
        user = request.user
        if not user.is_authenticated:
            return None
        membership = membership_for(user=user, team_id=team_id_hint(request))
        if membership is None:
            return None
        return Principal(user=user, team=membership.team, membership=membership, via="session")


class ApiKeyTeamAuth(HttpBearer):
    def authenticate(self, request, token):
        identity = api_key_authenticate(token)
        if identity is None or "manage" not in identity.scopes:
            return None
        api_key = ApiKey.objects.select_related("created_by", "team").filter(pk=identity.key_id).first()
        if api_key is None or api_key.created_by is None:
            return None
        membership = Membership.objects.filter(team=api_key.team, user=api_key.created_by).first()
        if membership is None:
            return None
        return Principal(user=api_key.created_by, team=api_key.team, membership=membership, via="api_key")


team_auth = [ApiKeyTeamAuth(), SessionTeamAuth()]
