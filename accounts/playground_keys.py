"""Short-lived API keys for the console's playground.

The playground's page calls the same public `/v1/` contract as any client, so the browser needs a
bearer key. This module mints one for the signed-in person and their current team:

* scope `inference` only: the management API (`accounts.auth.ApiKeyTeamAuth`) refuses it;
* it expires `LANTAU_PLAYGROUND_KEY_TTL_S` seconds after minting (10 minutes by default), enforced by
  the gateway and the runners from the signed cache entry, and by the database on a cache miss;
* it is stored like every key (peppered HMAC, never the clear text) with `kind = playground`, which
  keeps it out of the team's key lists and makes it unchangeable through PATCH;
* a person holds at most `LANTAU_PLAYGROUND_KEYS_PER_PERSON` live playground keys per team: minting
  one more revokes the oldest (several open tabs keep working; a script minting in a loop does not
  pile up usable keys).

Who may mint: whoever may create API keys in the team (`key.create`); a viewer cannot run models.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from accounts import services
from accounts.models import ApiKey, ApiKeyKind, ApiKeyScope, Team
from accounts.permissions import permission_require


@dataclass(frozen=True)
class PlaygroundKey:
    key: str  # the clear key, handed to the browser once and never stored
    prefix: str
    expires_at: datetime


def playground_keys_live(*, team: Team, user) -> list[ApiKey]:
    """The person's usable playground keys in `team`, newest first."""
    now = timezone.now()
    return list(
        ApiKey.objects.filter(team=team, created_by=user, kind=ApiKeyKind.PLAYGROUND, revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .order_by("-created_at", "-pk")
    )


def playground_key_mint(*, team: Team, actor) -> PlaygroundKey:
    """Mint an inference-only key for `actor` in `team`, expiring in minutes; revoke their oldest live
    playground keys beyond the per-person cap. Outsiders get 404 and viewers 403, as for any key."""
    permission_require(team=team, user=actor, action="key.create")
    expires_at = timezone.now() + timedelta(seconds=settings.PLAYGROUND_KEY_TTL_S)
    api_key, clear = services.api_key_create(
        team=team,
        actor=actor,
        name=f"Playground ({actor.get_username()})"[:100],
        scopes=[ApiKeyScope.INFERENCE],
        expires_at=expires_at,
        kind=ApiKeyKind.PLAYGROUND,
    )
    for old in playground_keys_live(team=team, user=actor)[settings.PLAYGROUND_KEYS_PER_PERSON :]:
        services.api_key_revoke(team=team, actor=actor, key_id=old.pk)
    return PlaygroundKey(key=clear, prefix=api_key.prefix, expires_at=expires_at)
