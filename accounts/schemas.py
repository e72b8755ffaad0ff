from datetime import datetime

from ninja import Schema


class ApiKeyIn(Schema):
    name: str
    scopes: list[str] = ["inference"]


class ApiKeyOut(Schema):
    id: int
    name: str
    prefix: str
    scopes: list[str]
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class ApiKeyCreatedOut(ApiKeyOut):
    key: str
