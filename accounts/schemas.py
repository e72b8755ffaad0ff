from datetime import datetime

from ninja import Schema


class ApiKeyIn(Schema):
    name: str
    scopes: list[str] = ["inference"]
    rate_per_s: float | None = None  # requests per second (token bucket), none = unlimited
    burst: int | None = None


class ApiKeyOut(Schema):
    id: int
    name: str
    prefix: str
    scopes: list[str]
    rate_per_s: float | None
    burst: int | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class ApiKeyCreatedOut(ApiKeyOut):
    key: str


class MemberIn(Schema):
    username: str
    role: str = "member"


class MemberOut(Schema):
    username: str
    role: str
    created_at: datetime

    @staticmethod
    def resolve_username(obj):
        return obj.user.username


class MemberCreatedOut(Schema):
    username: str
    role: str
    created_at: datetime
    password: str | None = None  # only when the account was created now; shown once
