"""Login throttling: failed sign-ins counted in the cache (Redis), per address and per account.

After `LANTAU_LOGIN_MAX_FAILURES` failures within `LANTAU_LOGIN_WINDOW_S` seconds, sign-in answers
429 with `Retry-After` until the window ends, even with the right password, for:

- the same address, whatever the username (one source cannot guess across accounts);
- the same username from browsers it has never signed in from (many sources cannot guess one account);
- the same username from one known browser (a *device cookie*, below), counted for that browser alone.

A successful sign-in leaves a device cookie: a signed value naming the account and a random device id
(`lantau_device`, HttpOnly, 180 days). A browser that shows a valid one for the username it signs in as
is judged only by its own counter, so a stranger who fails five times as `admin` locks out other
unknown browsers, never the administrator's own (review L-E; OWASP's "device cookies" design).
A success clears the username's and the device's counters (not the address's: one valid account must
not reset a guessing run against others).

Counters are read as data: the cache stores JSON (`core.cache`), and a value that is not a count
(planted by whoever can write Redis) counts as zero, never as code.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

import redis
from django.conf import settings
from django.core import signing
from django.core.cache import cache

DEVICE_COOKIE = "lantau_device"
DEVICE_MAX_AGE_S = 180 * 86400
_DEVICE_SALT = "lantau.login-device"


def _name(username: str) -> str:
    # Hashed so an odd username cannot produce an odd cache key.
    return hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Attempt:
    """Who is signing in: the username typed, the client's address, the device id its cookie proves."""

    username: str
    address: str | None = None
    device: str | None = None  # only when the cookie is valid for this username

    def keys(self) -> list[str]:
        keys = [f"login-fail:addr:{self.address}"] if self.address else []
        if self.device:
            keys.append(f"login-fail:device:{_name(self.username)}:{self.device}")
        else:
            keys.append(f"login-fail:user:{_name(self.username)}")
        return keys


def device_of(cookie: str | None, username: str) -> str | None:
    """The device id in a valid, unexpired device cookie issued to ``username``; None otherwise."""
    if not cookie:
        return None
    try:
        value = signing.loads(cookie, salt=_DEVICE_SALT, max_age=DEVICE_MAX_AGE_S)
    except signing.BadSignature:  # SignatureExpired is one
        return None
    if not isinstance(value, dict) or value.get("u") != _name(username):
        return None
    device = value.get("d")
    return device if isinstance(device, str) and device.isalnum() and len(device) <= 32 else None


def device_cookie(username: str) -> str:
    """A new device cookie's value for ``username`` (set on a successful sign-in)."""
    return signing.dumps({"u": _name(username), "d": secrets.token_hex(12)}, salt=_DEVICE_SALT)


def _number(value: object) -> float:
    """A count or a time read from the cache; anything else (a planted value) is 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0.0, float(value))


def retry_after(attempt: Attempt) -> int:
    """Seconds until sign-in is allowed again; 0 when not locked out."""
    waits = []
    for key in attempt.keys():
        values = cache.get_many([key, key + ":until"])
        count, until = _number(values.get(key)), _number(values.get(key + ":until"))
        if count >= settings.LOGIN_MAX_FAILURES:
            waits.append(int(until - time.time()) + 1)
    return max([w for w in waits if w > 0], default=0)


def _increment(key: str, window: int) -> int:
    # add() only sets a missing key, and incr() is atomic in Redis, so parallel guesses all count.
    cache.add(key + ":until", time.time() + window, timeout=window)
    cache.add(key, 0, timeout=window)
    try:
        return cache.incr(key)
    except (ValueError, redis.ResponseError):
        # Expired between add() and incr(), or a planted value that is no integer (Redis refuses
        # INCR): a new window starts.
        cache.set(key + ":until", time.time() + window, timeout=window)
        cache.set(key, 1, timeout=window)
        return 1


def failure_record(attempt: Attempt) -> bool:
    """Count one failure; True when this failure starts a lockout."""
    counts = [_increment(key, settings.LOGIN_WINDOW_S) for key in attempt.keys()]
    return settings.LOGIN_MAX_FAILURES in counts


def success_record(attempt: Attempt) -> None:
    keys = [f"login-fail:user:{_name(attempt.username)}"]
    if attempt.device:
        keys.append(f"login-fail:device:{_name(attempt.username)}:{attempt.device}")
    cache.delete_many([k for key in keys for k in (key, key + ":until")])
