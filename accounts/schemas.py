from datetime import date, datetime

from django.utils import timezone
from ninja import Field, Schema

from core.schemas import StrictIn


class ApiKeyLimits(StrictIn):
    """What a key may do, set at creation and changed with PATCH; null = no limit."""

    deployments: list[str] = Field(default=[], description="deployment names this key may call; empty = all")
    rate_per_s: float | None = Field(default=None, description="requests per second (token bucket)")
    burst: int | None = None
    expires_at: datetime | None = Field(default=None, description="after this time the key is refused")
    quota_requests: int | None = Field(default=None, description="requests per UTC calendar month")
    quota_images: int | None = Field(default=None, description="images per UTC calendar month")
    quota_tokens: int | None = Field(default=None, description="tokens per UTC calendar month")


class ApiKeyIn(ApiKeyLimits):
    name: str
    scopes: list[str] = ["inference"]


class ApiKeyPatch(ApiKeyLimits):
    """Only the fields sent are changed."""

    name: str | None = None


class ApiKeyOut(Schema):
    id: int
    name: str
    prefix: str
    scopes: list[str]
    deployments: list[str]
    rate_per_s: float | None
    burst: int | None
    expires_at: datetime | None
    quota_requests: int | None
    quota_images: int | None
    quota_tokens: int | None
    created_at: datetime
    last_used_at: datetime | None
    last_used_address: str | None
    revoked_at: datetime | None


class ApiKeyCreatedOut(ApiKeyOut):
    key: str


class UsageCounts(Schema):
    requests: int
    images: int
    tokens: int


class UsageDay(UsageCounts):
    day: date


class ApiKeyUsageOut(Schema):
    key_id: int
    month: UsageCounts  # this UTC month so far, including what is not yet rolled up
    days: list[UsageDay]  # rolled up, per UTC day, oldest first; days without use left out


class MemberOut(Schema):
    username: str
    role: str
    created_at: datetime

    @staticmethod
    def resolve_username(obj):
        return obj.user.username


class RoleIn(StrictIn):
    role: str


class TeamIn(StrictIn):
    name: str


class TeamOut(Schema):
    id: int
    name: str
    role: str  # the caller's role in it

    @staticmethod
    def resolve_id(obj):
        return obj.team.pk

    @staticmethod
    def resolve_name(obj):
        return obj.team.name


class InvitationIn(StrictIn):
    role: str = "member"
    email: str = ""


class InvitationOut(Schema):
    id: int
    role: str
    email: str
    created_by: str | None
    created_at: datetime
    expires_at: datetime
    state: str

    @staticmethod
    def resolve_created_by(obj):
        return obj.created_by.username if obj.created_by else None

    @staticmethod
    def resolve_state(obj):
        return obj.state_at(timezone.now())


class InvitationCreatedOut(InvitationOut):
    url: str  # the one-time link; shown in this answer only


class AuditEventOut(Schema):
    id: int
    created_at: datetime
    actor: str | None
    action: str
    target: str
    before: dict | None
    after: dict | None
    data: dict
    address: str | None

    @staticmethod
    def resolve_actor(obj):
        return obj.actor.username if obj.actor else None


class AuditPageOut(Schema):
    count: int
    limit: int
    offset: int
    items: list[AuditEventOut]
