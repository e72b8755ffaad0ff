"""Writes for teams, members and API keys. Each write records an audit event."""

from __future__ import annotations

import re
import secrets

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from accounts import keycache
from accounts.models import ApiKey, ApiKeyScope, AuditEvent, Membership, Role, Team
from contract.apikeys import key_generate
from core.errors import Forbidden, NotFound, ValidationFailed

User = get_user_model()


def audit_record(
    *, team: Team | None, actor, action: str, target: str = "", data: dict | None = None
) -> None:
    AuditEvent.objects.create(team=team, actor=actor, action=action, target=target, data=data or {})


def require_writer(*, team: Team, user) -> Membership:
    """Return the user's membership of `team`, refusing viewers and outsiders."""
    membership = Membership.objects.filter(team=team, user=user).first()
    if membership is None:
        raise NotFound("team not found")
    if not membership.can_write:
        raise Forbidden("your role in this team is read-only")
    return membership


@transaction.atomic
def team_create(*, name: str, owner) -> Team:
    """Create a team with `owner` as its first member."""
    if Team.objects.filter(name=name).exists():
        raise ValidationFailed(f"a team named {name!r} already exists")
    team = Team.objects.create(name=name)
    Membership.objects.create(team=team, user=owner, role=Role.OWNER)
    audit_record(team=team, actor=owner, action="team.create", target=name)
    return team


@transaction.atomic
def member_add(*, team: Team, user, role: str, actor) -> Membership:
    """Add `user` to `team` with `role`; only owners may do so."""
    acting = Membership.objects.filter(team=team, user=actor).first()
    if acting is None or acting.role != Role.OWNER:
        raise Forbidden("only team owners can add members")
    if role not in Role.values:
        raise ValidationFailed(f"unknown role {role!r}")
    membership, _ = Membership.objects.update_or_create(team=team, user=user, defaults={"role": role})
    audit_record(team=team, actor=actor, action="member.add", target=user.username, data={"role": role})
    return membership


def _check_rate(rate_per_s: float | None, burst: int | None) -> None:
    if rate_per_s is not None and not 0 < rate_per_s <= 100_000:
        raise ValidationFailed("rate_per_s must be above 0 and at most 100000 requests per second")
    if burst is not None and not 1 <= burst <= 100_000:
        raise ValidationFailed("burst must be between 1 and 100000")
    if burst is not None and rate_per_s is None:
        raise ValidationFailed("burst needs rate_per_s")


def api_key_create(
    *,
    team: Team,
    actor,
    name: str,
    scopes: list[str] | None = None,
    rate_per_s: float | None = None,
    burst: int | None = None,
) -> tuple[ApiKey, str]:
    """Create a key and return it with its clear text, which is never stored and shown only now.

    Its cache entry is written at once, so runners called directly accept it from the first request.
    """
    _check_rate(rate_per_s, burst)
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise ValidationFailed("key name must be 1 to 100 characters")
    scopes = sorted(set(scopes or [ApiKeyScope.INFERENCE]))
    unknown = [s for s in scopes if s not in ApiKeyScope.values]
    if unknown:
        raise ValidationFailed(f"unknown scope(s): {', '.join(unknown)}")
    require_writer(team=team, user=actor)
    clear, prefix, digest = key_generate()
    with transaction.atomic():
        api_key = ApiKey.objects.create(
            team=team,
            created_by=actor,
            name=name,
            prefix=prefix,
            key_hash=digest,
            scopes=scopes,
            rate_per_s=rate_per_s,
            burst=burst,
        )
        audit_record(
            team=team,
            actor=actor,
            action="api_key.create",
            target=prefix,
            data={"scopes": scopes, "rate_per_s": rate_per_s, "burst": burst},
        )
        transaction.on_commit(lambda: keycache.cache_put(api_key))
    return api_key, clear


def api_keys_sync() -> int:
    """Rewrite the Redis entries of all active keys and drop revoked ones (safety net for a flushed Redis)."""
    active = list(ApiKey.objects.filter(revoked_at__isnull=True))
    revoked = list(ApiKey.objects.filter(revoked_at__isnull=False).values_list("key_hash", flat=True))
    return keycache.cache_sync(active, revoked)


def api_key_revoke(*, team: Team, actor, key_id: int) -> ApiKey:
    """Revoke a key; the cache entry goes at once so the gateway refuses it on the next request."""
    require_writer(team=team, user=actor)
    with transaction.atomic():
        api_key = ApiKey.objects.select_for_update().filter(team=team, pk=key_id).first()
        if api_key is None:
            raise NotFound("API key not found")
        if api_key.revoked_at is None:
            api_key.revoked_at = timezone.now()
            api_key.save(update_fields=["revoked_at"])
            audit_record(team=team, actor=actor, action="api_key.revoke", target=api_key.prefix)
    keycache.cache_drop(api_key.key_hash)
    return api_key


def user_ensure_admin(*, username: str = "admin", team_name: str = "default") -> tuple[object, str | None]:
    """Create the first superuser and its team if missing; return (user, password or None if it existed)."""
    user = User.objects.filter(username=username).first()
    if user is not None:
        return user, None
    password = secrets.token_urlsafe(12)
    with transaction.atomic():
        user = User.objects.create_superuser(username=username, email="", password=password)
        team = Team.objects.filter(name=team_name).first() or Team.objects.create(name=team_name)
        Membership.objects.get_or_create(team=team, user=user, defaults={"role": Role.OWNER})
        audit_record(team=team, actor=user, action="user.bootstrap_admin", target=username)
    return user, password


def member_invite(*, team: Team, actor, username: str, role: str) -> tuple[Membership, str | None]:
    """Add a user to the team, creating the account when it does not exist (its password is returned once)."""
    if not re.fullmatch(r"[\w.@+-]{1,150}", username or ""):
        raise ValidationFailed("username may contain letters, digits and @.+-_ (max 150)")
    password = None
    with transaction.atomic():
        user = User.objects.filter(username=username).first()
        if user is None:
            password = secrets.token_urlsafe(12)
            user = User.objects.create_user(username=username, password=password)
        membership = member_add(team=team, user=user, role=role, actor=actor)
    return membership, password
