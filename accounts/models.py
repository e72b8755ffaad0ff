"""Teams, their members and roles, API keys (stored as hashes) and the audit log."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    """What a member may do is decided by `accounts.permissions.PERMISSIONS` (role by action)."""

    OWNER = "owner", "Owner"  # everything, including deleting the team and changing owners
    ADMIN = "admin", "Admin"  # members other than owners, other people's keys, everything below
    MEMBER = "member", "Member"  # uploads models, runs jobs, deploys, manages own API keys
    VIEWER = "viewer", "Viewer"  # reads only


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="membership_unique_team_user")]

    @property
    def can_write(self) -> bool:
        """For templates only (which buttons to show); services decide with `accounts.permissions`."""
        return self.role in (Role.OWNER, Role.ADMIN, Role.MEMBER)


class ApiKeyScope(models.TextChoices):
    INFERENCE = "inference", "Inference (/v1/)"
    MANAGE = "manage", "Management API (/api/v1/)"


class ApiKeyKind(models.TextChoices):
    STANDARD = "standard", "Standard"
    # Minted by the console's playground for the signed-in person: inference only, expires in minutes,
    # left out of the team's key lists (accounts.playground_keys).
    PLAYGROUND = "playground", "Playground (short-lived)"


class ApiKey(models.Model):
    """A bearer key, found by its unique `prefix`. The clear key is shown once at creation and never stored.

    `key_hash` is HMAC-SHA256(pepper, key) under the pepper named in `hash_scheme`
    (``hmac-sha256:<pepper id>``); rows made before peppering hold the plain SHA-256 (scheme ``sha256``)
    and are rehashed on their first successful use. `digest_sealed` is the key's SHA-256, encrypted under
    the pepper, from which the console rebuilds the signed Redis entry that runners check (they cannot
    compute an HMAC without the pepper). See `contract.apikeys` and docs/security.md.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_keys")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64, unique=True)
    hash_scheme = models.CharField(max_length=32, default="sha256")
    digest_sealed = models.CharField(max_length=128, blank=True)
    scopes = models.JSONField(default=list)
    # Deployment names this key may call; empty = every deployment of the team.
    deployments = models.JSONField(default=list, blank=True)
    # Token bucket enforced by the gateway and the runners (requests per second, bucket size); null = none.
    rate_per_s = models.FloatField(null=True, blank=True)
    burst = models.PositiveIntegerField(null=True, blank=True)
    # Monthly quotas (UTC calendar months); null = unlimited.
    quota_requests = models.PositiveBigIntegerField(null=True, blank=True)
    quota_images = models.PositiveBigIntegerField(null=True, blank=True)
    quota_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    last_used_address = models.GenericIPAddressField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    kind = models.CharField(max_length=16, choices=ApiKeyKind.choices, default=ApiKeyKind.STANDARD)
    # Bumped by every change and by revocation; signed into the key's Redis entry and its revision floor,
    # so readers refuse an older entry written back over a newer one (replay, review finding M-A).
    revision = models.PositiveBigIntegerField(default=1)

    class Meta:
        ordering = ["-created_at"]

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def usable_at(self, now) -> bool:
        """Neither revoked nor expired at `now`, and its creator (if any is left) not deactivated."""
        return (
            self.revoked_at is None
            and (self.expires_at is None or now < self.expires_at)
            and not self.owner_inactive
        )

    @property
    def owner_inactive(self) -> bool:
        """Its creator is a user deactivated with `is_active=False` (review finding L-K)."""
        return self.created_by is not None and not self.created_by.is_active


class ApiKeyUsage(models.Model):
    """What one key used in one hour (UTC), rolled up from the runners' Redis counters by
    `accounts.usage.usage_rollup`; survives a Redis restart and feeds quotas and charts."""

    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="usage_hours")
    hour = models.DateTimeField()
    requests = models.BigIntegerField(default=0)
    images = models.BigIntegerField(default=0)
    tokens = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["hour"]
        constraints = [
            models.UniqueConstraint(fields=["api_key", "hour"], name="apikeyusage_unique_key_hour")
        ]


class ApiKeyUsageBatch(models.Model):
    """A roll-up batch already added to `ApiKeyUsage`: a rerun after a crash finds it and adds nothing."""

    batch = models.CharField(max_length=80, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)


class AuditEvent(models.Model):
    """One state change: who (`actor`), what (`action`, `target`), the state `before` and `after` where
    the change has them, extra `data`, when, and from which `address`. Never holds a secret."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, null=True, related_name="audit_events")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    action = models.CharField(max_length=64)
    target = models.CharField(max_length=200, blank=True)
    data = models.JSONField(default=dict, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    address = models.GenericIPAddressField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [
            models.Index(fields=["team", "-created_at"]),
            models.Index(fields=["team", "action"], name="auditevent_team_action"),
        ]


class Invitation(models.Model):
    """A one-time link to join a team with a role. Only the token's SHA-256 is stored; the link is
    shown once to the person who created it. States: pending, then accepted, revoked or expired."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    email = models.EmailField(blank=True)  # a note for the inviter; the link works for whoever opens it
    token_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def state_at(self, now) -> str:
        if self.accepted_at is not None:
            return "accepted"
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if now >= self.expires_at else "pending"
