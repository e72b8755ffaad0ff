"""Writes for teams, members and API keys. Each write records an audit event.

Team, member and invitation services live in `accounts.team_services`; this module keeps the audit record,
the API keys and the bootstrap admin.
"""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts import keycache, keyhash
from accounts.addresses import current_address
from accounts.models import ApiKey, ApiKeyKind, ApiKeyScope, AuditEvent, Membership, Role, Team
from accounts.permissions import permission_require
from contract.apikeys import key_generate, key_is_well_formed, key_prefix
from core.errors import NotFound, ValidationFailed

User = get_user_model()


def audit_record(
    *,
    team: Team | None,
    actor,
    action: str,
    target: str = "",
    data: dict | None = None,
    before: dict | None = None,
    after: dict | None = None,
    address: str | None = None,
) -> AuditEvent:
    """Record one state change. `address` defaults to the address of the request being served.

    Callers pass `before`/`after` where the change has them. Never pass a secret (a clear key, a
    token, a password): the log is readable by team admins and exported as files.
    """
    return AuditEvent.objects.create(
        team=team,
        actor=actor if actor is not None and getattr(actor, "is_authenticated", False) else None,
        action=action,
        target=target[:200],
        data=data or {},
        before=before,
        after=after,
        address=address or current_address.get(),
    )


def _check_rate(rate_per_s: float | None, burst: int | None) -> None:
    if rate_per_s is not None and not 0 < rate_per_s <= 100_000:
        raise ValidationFailed("rate_per_s must be above 0 and at most 100000 requests per second")
    if burst is not None and not 1 <= burst <= 100_000:
        raise ValidationFailed("burst must be between 1 and 100000")
    if burst is not None and rate_per_s is None:
        raise ValidationFailed("burst needs rate_per_s")


_DEPLOYMENT_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
MAX_QUOTA = 10**15
LIMIT_FIELDS = ("name", "deployments", "rate_per_s", "burst", "expires_at", "quota_requests", "quota_images",
                "quota_tokens")  # fmt: skip


def _check_limits(limits: dict) -> dict:
    """Validated key settings (any subset of LIMIT_FIELDS); 422 naming the first bad one."""
    out = dict(limits)
    if "name" in out:
        out["name"] = (out["name"] or "").strip()
        if not out["name"] or len(out["name"]) > 100:
            raise ValidationFailed("key name must be 1 to 100 characters")
    if "deployments" in out:
        names = sorted(set(out["deployments"] or []))
        bad = [n for n in names if not isinstance(n, str) or not _DEPLOYMENT_NAME.fullmatch(n)]
        if bad or len(names) > 100:
            raise ValidationFailed("deployments must be up to 100 deployment names (a-z, 0-9, '-')")
        out["deployments"] = names
    for field in ("quota_requests", "quota_images", "quota_tokens"):
        value = out.get(field)
        if value is not None and not 1 <= value <= MAX_QUOTA:
            raise ValidationFailed(f"{field} must be between 1 and {MAX_QUOTA} (or null for no quota)")
    expires = out.get("expires_at")
    if expires is not None and (timezone.is_naive(expires) or expires <= timezone.now()):
        raise ValidationFailed("expires_at must be a future time with a timezone")
    return out


def api_key_create(
    *,
    team: Team,
    actor,
    name: str,
    scopes: list[str] | None = None,
    rate_per_s: float | None = None,
    burst: int | None = None,
    deployments: list[str] | None = None,
    expires_at: datetime | None = None,
    quota_requests: int | None = None,
    quota_images: int | None = None,
    quota_tokens: int | None = None,
    kind: str = ApiKeyKind.STANDARD,
) -> tuple[ApiKey, str]:
    """Create a key and return it with its clear text, which is never stored and shown only now.

    `kind` is `playground` only for the console's short-lived playground keys (`accounts.playground_keys`).

    Only the peppered HMAC (`accounts.keyhash`) is stored. Its signed cache entry is written at once, so
    runners called directly accept it from the first request.
    """
    _check_rate(rate_per_s, burst)
    limits = _check_limits({"name": name, "deployments": deployments or [], "expires_at": expires_at,
                            "quota_requests": quota_requests, "quota_images": quota_images,
                            "quota_tokens": quota_tokens})  # fmt: skip
    scopes = sorted(set(scopes or [ApiKeyScope.INFERENCE]))
    unknown = [s for s in scopes if s not in ApiKeyScope.values]
    if unknown:
        raise ValidationFailed(f"unknown scope(s): {', '.join(unknown)}")
    permission_require(team=team, user=actor, action="key.create")
    for _attempt in range(5):  # the 32-bit prefix is unique; a collision just draws again
        clear, prefix = key_generate()  # (also with a deleted key's, whose revision floor refuses all)
        if not ApiKey.objects.filter(prefix=prefix).exists() and not keycache.floor_exists(prefix):
            break
    stored = keyhash.hash_new(clear, prefix)
    with transaction.atomic():
        api_key = ApiKey.objects.create(
            team=team, created_by=actor, prefix=prefix, key_hash=stored.key_hash,
            hash_scheme=stored.hash_scheme, digest_sealed=stored.digest_sealed, scopes=scopes,
            rate_per_s=rate_per_s, burst=burst, kind=kind, **limits,
        )  # fmt: skip
        audit_record(team=team, actor=actor, action="api_key.create", target=prefix,
                     data={"scopes": scopes, "kind": kind, **_limits_for_audit(api_key)})  # fmt: skip
        transaction.on_commit(lambda: keycache.cache_put(api_key))
    return api_key, clear


def _limits_for_audit(api_key: ApiKey) -> dict:
    out = {f: getattr(api_key, f) for f in LIMIT_FIELDS if f != "name"}
    out["expires_at"] = api_key.expires_at.isoformat() if api_key.expires_at else None
    return out


def api_key_update(*, team: Team, actor, key_id: int, changes: dict) -> ApiKey:
    """Change a key's name, deployments, rate limit, expiry or quotas (`changes` holds only the fields
    sent). The entry is rewritten after commit, so the gateway and runners apply it on the next request."""
    unknown = set(changes) - set(LIMIT_FIELDS)
    if unknown:
        raise ValidationFailed(f"cannot change: {', '.join(sorted(unknown))}")
    changes = _check_limits(changes)
    permission_require(team=team, user=actor, action="key.update")
    with transaction.atomic():
        # A playground key cannot be changed (its expiry stays minutes away): as if it did not exist.
        api_key = (
            ApiKey.objects.select_for_update()
            .filter(team=team, pk=key_id)
            .exclude(kind=ApiKeyKind.PLAYGROUND)
            .first()
        )
        if api_key is None:
            raise NotFound("API key not found")
        if api_key.created_by_id != actor.pk:  # members change their own keys; admins anyone's
            permission_require(team=team, user=actor, action="key.manage_others")
        if api_key.revoked_at is not None:
            raise ValidationFailed("a revoked key cannot be changed")
        before = _limits_for_audit(api_key)
        for field, value in changes.items():
            setattr(api_key, field, value)
        _check_rate(api_key.rate_per_s, api_key.burst)
        api_key.revision += 1  # the entry before this change must not be written back (M-A)
        api_key.save(update_fields=[*changes, "revision"])
        audit_record(team=team, actor=actor, action="api_key.update", target=api_key.prefix,
                     before=before, after=_limits_for_audit(api_key))  # fmt: skip
        transaction.on_commit(lambda: keycache.cache_put(api_key))
    return api_key


def _key_row(clear_key: str) -> ApiKey | None:
    return ApiKey.objects.select_related("team", "created_by").filter(prefix=key_prefix(clear_key)).first()


def api_key_match(*, clear_key: str) -> ApiKey | None:
    """The key row whose prefix and peppered HMAC (constant-time) match a clear key, usable or not."""
    if not key_is_well_formed(clear_key):
        return None
    api_key = _key_row(clear_key)
    return api_key if api_key is not None and keyhash.hash_matches(api_key, clear_key) else None


def api_key_check(*, clear_key: str) -> ApiKey | None:
    """The usable key row for a clear key, checked against the database (prefix lookup, constant-time
    HMAC compare, not revoked, not expired, its creator not deactivated); None otherwise. A legacy
    SHA-256 row, or one hashed under a previous pepper, is rehashed under the current pepper here, on
    its first successful use."""
    api_key = api_key_match(clear_key=clear_key)
    return api_key_usable(api_key, clear_key) if api_key is not None else None


def api_key_usable(api_key: ApiKey, clear_key: str) -> ApiKey | None:
    """``api_key`` (which ``clear_key`` matched) when usable now, rehashed if due; None otherwise."""
    if not api_key.usable_at(timezone.now()):
        return None
    if keyhash.needs_rehash(api_key):
        stored = keyhash.hash_new(clear_key, api_key.prefix)
        ApiKey.objects.filter(pk=api_key.pk, hash_scheme=api_key.hash_scheme).update(
            key_hash=stored.key_hash, hash_scheme=stored.hash_scheme, digest_sealed=stored.digest_sealed
        )
        api_key.key_hash, api_key.hash_scheme = stored.key_hash, stored.hash_scheme
        api_key.digest_sealed = stored.digest_sealed
    return api_key


def api_key_cache_miss(*, clear_key: str) -> str | None:
    """The gateway's fallback when Redis has no valid entry for a well-formed key: check the database,
    then write the entry back unless a revocation's tombstone got there first (then the key is refused,
    however the two raced). Unknown prefixes get a short negative entry; a dead key (revoked, expired,
    its creator deactivated) its tombstone and floor again, over whatever entry was written back. One
    query. Returns the entry or None."""
    if not key_is_well_formed(clear_key):
        return None
    prefix, row = key_prefix(clear_key), _key_row(clear_key)
    if row is None:
        keycache.cache_negative(prefix)
        return None
    if not row.usable_at(timezone.now()):
        keycache.cache_revoke(prefix, row.revision, keycache.floor_ttl(row))
        return None
    if keyhash.hash_matches(row, clear_key) and api_key_usable(row, clear_key) is not None:
        return keycache.cache_fill(row)
    keycache.cache_fill(row)  # a real key with a wrong secret: cache its entry so the next guess costs none
    return None


def api_key_known_prefixes() -> list[str]:
    """The prefixes of every usable key (the console's ``/v1/`` refuses any other without a query, M-F)."""
    now = timezone.now()
    return list(
        ApiKey.objects.filter(revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .exclude(created_by__is_active=False)
        .values_list("prefix", flat=True)
    )


def api_keys_sync() -> int:
    """Rewrite the Redis entries of all usable keys and tombstone revoked or expired ones (safety net for a
    flushed Redis; every minute)."""
    for user in User.objects.filter(is_active=False, pk__in=ApiKey.objects.filter(revoked_at__isnull=True)
                                    .values("created_by")):  # fmt: skip
        api_keys_revoke_of_inactive(user=user)  # deactivated without User.save() (a queryset update, SQL)
    now = timezone.now()
    recent = now - timedelta(seconds=settings.APIKEY_TOMBSTONE_TTL_S)
    active = list(
        ApiKey.objects.select_related("created_by")
        .filter(revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
    )
    dead = list(ApiKey.objects.filter(Q(revoked_at__gte=recent) | Q(expires_at__gte=recent, expires_at__lte=now))
                .values_list("prefix", flat=True))  # fmt: skip
    # Floors of every dead key, however old (a playground key's only until its floor's own TTL ends).
    floors = list(
        ApiKey.objects.filter(Q(revoked_at__isnull=False) | Q(expires_at__lte=now))
        .exclude(kind=ApiKeyKind.PLAYGROUND, expires_at__lt=now - timedelta(seconds=keycache.PLAYGROUND_FLOOR_MARGIN_S))
        .only("prefix", "revision", "kind", "expires_at")
    )  # fmt: skip
    return keycache.cache_sync(active, dead, floors)


def api_key_revoke(*, team: Team, actor, key_id: int) -> ApiKey:
    """Revoke a key; a tombstone replaces its cache entry at once so the gateway and runners refuse it."""
    permission_require(team=team, user=actor, action="key.revoke")
    with transaction.atomic():
        api_key = ApiKey.objects.select_for_update().filter(team=team, pk=key_id).first()
        if api_key is None:
            raise NotFound("API key not found")
        if api_key.created_by_id != actor.pk:  # members revoke their own keys; admins anyone's
            permission_require(team=team, user=actor, action="key.manage_others")
        if api_key.revoked_at is None:
            _revoke_row(api_key, team=team, actor=actor)
    keycache.cache_revoke(api_key.prefix, api_key.revision, keycache.floor_ttl(api_key))
    return api_key


def _revoke_row(api_key: ApiKey, *, team: Team, actor, data: dict | None = None) -> None:
    """Mark a locked row revoked, bumping its revision (every entry signed before is refused), audited."""
    api_key.revoked_at = timezone.now()
    api_key.revision += 1
    api_key.save(update_fields=["revoked_at", "revision"])
    audit_record(team=team, actor=actor, action="api_key.revoke", target=api_key.prefix,
                 before={"state": "active"}, after={"state": "revoked"}, data=data)  # fmt: skip


def api_keys_revoke_of_inactive(*, user) -> list[str]:
    """Revoke every key of a deactivated user (review finding L-K), tombstoned and floored once committed.
    Reactivating the user does not bring them back: they create new keys. Returns the prefixes."""
    revoked: list[ApiKey] = []
    with transaction.atomic():
        if User.objects.filter(pk=user.pk, is_active=False).exists():
            for api_key in (
                ApiKey.objects.select_for_update(of=("self",))
                .select_related("team")
                .filter(created_by=user, revoked_at__isnull=True)
            ):
                _revoke_row(api_key, team=api_key.team, actor=None, data={"reason": "owner_deactivated"})
                revoked.append(api_key)

        def tombstone() -> None:
            for api_key in revoked:
                keycache.cache_revoke(api_key.prefix, api_key.revision, keycache.floor_ttl(api_key))

        transaction.on_commit(tombstone)
    return [api_key.prefix for api_key in revoked]


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
