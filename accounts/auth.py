"""Who is calling the management API: a signed-in person (session + CSRF) or a `manage`-scoped API key."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from ninja.security import APIKeyCookie, HttpBearer
from redis.exceptions import RedisError

from accounts import keycache, services
from accounts.addresses import client_address
from accounts.current import membership_for_request
from accounts.models import ApiKeyScope, Membership, Team
from accounts.permissions import membership_allows
from contract.apikeys import OWNER_INACTIVE_MESSAGE
from core.errors import Unauthorized


@dataclass
class Principal:
    user: object
    team: Team
    membership: Membership
    via: str  # "session" or "api_key"


class SessionTeamAuth(APIKeyCookie):
    param_name = settings.SESSION_COOKIE_NAME

    def authenticate(self, request, key):
        user = request.user
        if not user.is_authenticated:
            return None
        membership = membership_for_request(request)
        if membership is None:
            return None
        return Principal(user=user, team=membership.team, membership=membership, via="session")


class ApiKeyTeamAuth(HttpBearer):
    """A `manage`-scoped key, checked against PostgreSQL on every call, never against Redis: anyone who can
    write Redis (every node host) must not be able to act as someone (review finding H1). The key must be
    found by its prefix, match its peppered hash, be neither revoked nor expired, hold `manage` in the
    database, and its creator must still be an active user (L-K) and a member whose role may hold keys.
    Any failure is the same 401 (`console.api`), except that whoever holds the real key of a deactivated
    user is told so (a 401 naming the reason)."""

    def authenticate(self, request, token):
        api_key = services.api_key_match(clear_key=token)
        if api_key is not None and api_key.owner_inactive:
            raise Unauthorized(OWNER_INACTIVE_MESSAGE)
        api_key = services.api_key_usable(api_key, token) if api_key is not None else None
        if api_key is None or ApiKeyScope.MANAGE not in api_key.scopes or api_key.created_by is None:
            return None
        membership = Membership.objects.filter(team=api_key.team, user=api_key.created_by).first()
        if not membership_allows(membership, "key.create"):
            return None
        try:
            keycache.last_use_record(api_key.pk, client_address(request.META))
        except RedisError:  # bookkeeping only: never refuse a valid key because Redis is down
            pass
        return Principal(user=api_key.created_by, team=api_key.team, membership=membership, via="api_key")


team_auth = [ApiKeyTeamAuth(), SessionTeamAuth()]
