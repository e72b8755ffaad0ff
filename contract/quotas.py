"""Monthly quotas per API key: the limits a cache entry carries and the one refusal every reader gives.

Months are UTC calendar months. Runners count what each key used this month in
``<prefix>:usage-month:<key_id>:<YYYY-MM>`` (``contract.redis_keys``); the gateway and the runners
compare those counters with the key's limits before serving and answer 429 ``quota_exceeded`` with
``Retry-After`` up to the start of the next month once a limit is spent.

Requests in flight hold a reservation (``<prefix>:quota-reserved:<key_id>``, see
``inference.runner.usage``) that counts as used until the runner settles it with what the request
really consumed, so parallel requests cannot overrun a quota. The gateway and edges tell runners a
key's limits in ``QUOTA_HEADER`` (sent with the runner token, so only they can set it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

USAGE_FIELDS = ("requests", "images", "tokens")
_NOUNS = {"requests": "request", "images": "image", "tokens": "token"}
QUOTA_HEADER = "X-Lantau-Key-Quota"  # gateway/edge -> runner: the key's limits, as ``quota_header`` writes


@dataclass(frozen=True, slots=True)
class Quota:
    """Monthly limits; None = unlimited."""

    requests: int | None = None
    images: int | None = None
    tokens: int | None = None

    @property
    def limited(self) -> bool:
        return any(limit is not None for limit in (self.requests, self.images, self.tokens))

    def as_dict(self) -> dict[str, int]:
        return {f: v for f in USAGE_FIELDS if (v := getattr(self, f)) is not None}

    @classmethod
    def from_dict(cls, data: object) -> Quota | None:
        """The quota in an entry, or None when it is malformed (the entry is then refused)."""
        if not isinstance(data, dict) or set(data) - set(USAGE_FIELDS):
            return None
        for value in data.values():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                return None
        return cls(**data)


def quota_header(quota: Quota) -> str:
    """``QUOTA_HEADER``'s value for a key's limits: compact JSON, e.g. ``{"requests":10}``."""
    return json.dumps(quota.as_dict(), separators=(",", ":"), sort_keys=True)


def quota_from_header(value: str | None) -> Quota | None:
    """The limits in ``QUOTA_HEADER`` (no header: unlimited), or None when the value is malformed."""
    if value is None:
        return Quota()
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):
        return None
    return Quota.from_dict(data)


def month_of(now: datetime) -> str:
    """``YYYY-MM`` of a moment, in UTC: the suffix of the month counters."""
    return now.astimezone(UTC).strftime("%Y-%m")


def next_month_start(now: datetime) -> datetime:
    now = now.astimezone(UTC)
    year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
    return datetime(year, month, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class QuotaRefusal:
    message: str
    retry_after_s: int


def quota_refusal(quota: Quota, used: Mapping[str, int], now: datetime) -> QuotaRefusal | None:
    """Why the key may not be served this month, or None while every limit has room."""
    for field in USAGE_FIELDS:
        limit = getattr(quota, field)
        if limit is not None and used.get(field, 0) >= limit:
            reset = next_month_start(now)
            return QuotaRefusal(
                f"monthly {_NOUNS[field]} quota of {limit} spent; resets on {reset:%Y-%m-%d}",
                max(1, math.ceil((reset - now.astimezone(UTC)).total_seconds())),
            )
    return None


def usage_from_redis(row: Mapping[Any, Any] | None) -> dict[str, int]:
    """A usage hash as read from Redis (bytes or str fields) as ``{field: int}``; junk counts as 0."""
    out = dict.fromkeys(USAGE_FIELDS, 0)
    for name, value in (row or {}).items():
        field = name.decode() if isinstance(name, bytes) else name
        if field in out:
            try:
                out[field] = int(value)
            except ValueError:
                continue
    return out
