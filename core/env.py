"""Strict readers for settings taken from the environment.

Each helper refuses a value it cannot understand with a message naming the variable, so a typo in
deployment configuration stops the process at start instead of silently falling back to a default.
"""

from __future__ import annotations

import os
from typing import overload
from urllib.parse import unquote, urlsplit


class ConfigError(Exception):
    """A setting in the environment is missing or malformed."""


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@overload
def env_str(name: str) -> str | None: ...
@overload
def env_str(name: str, default: str) -> str: ...
@overload
def env_str(name: str, default: str | None) -> str | None: ...


def env_str(name: str, default: str | None = None) -> str | None:
    """The variable's value; ``default`` when it is unset or empty."""
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean: use one of 1/0, true/false, yes/no, on/off")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} is below the minimum {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name}={value} is above the maximum {maximum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def parse_database_url(url: str, *, name: str = "DATABASE_URL") -> dict:
    """Turn `postgres://user:pass@host:port/db` into a Django DATABASES entry (PostgreSQL only)."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ConfigError(f"{name} must be a postgres:// URL, got scheme {parts.scheme!r}")
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise ConfigError(f"{name} names no database (expected postgres://user@host:port/dbname)")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{name} has an invalid port") from None
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": database,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(port or ""),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }


def check_redis_url(url: str, *, name: str = "REDIS_URL") -> str:
    scheme = urlsplit(url).scheme
    if scheme not in {"redis", "rediss", "unix"}:
        raise ConfigError(f"{name} must be a redis:// URL, got scheme {scheme!r}")
    return url
