"""Login throttling: failed sign-ins counted per username and per address in the cache (Redis).

After `LANTAU_LOGIN_MAX_FAILURES` failures within `LANTAU_LOGIN_WINDOW_S` seconds, for the same
username or from the same address, sign-in answers 429 with `Retry-After` until the window ends,
even with the right password, so guessing stays slow for one account and for one source.
A success clears the username's counter (not the address's: one valid account must not reset a
guessing run against others).
"""

from __future__ import annotations

import hashlib
import time

from django.conf import settings
from django.core.cache import cache


def _keys(username: str, address: str | None) -> list[str]:
    # Hashed so an odd username cannot produce an odd cache key.
    name = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
    keys = [f"login-fail:user:{name}"]
    if address:
        keys.append(f"login-fail:addr:{address}")
    return keys


def retry_after(username: str, address: str | None) -> int:
    """Seconds until sign-in is allowed again; 0 when not locked out."""
    waits = []
    for key in _keys(username, address):
        values = cache.get_many([key, key + ":until"])
        count, until = values.get(key, 0), values.get(key + ":until", 0)
        if count >= settings.LOGIN_MAX_FAILURES:
            waits.append(int(until - time.time()) + 1)
    return max([w for w in waits if w > 0], default=0)


def _increment(key: str, window: int) -> int:
    # add() only sets a missing key, and incr() is atomic in Redis, so parallel guesses all count.
    cache.add(key + ":until", time.time() + window, timeout=window)
    cache.add(key, 0, timeout=window)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add() and incr(): a new window starts
        cache.set(key + ":until", time.time() + window, timeout=window)
        cache.set(key, 1, timeout=window)
        return 1


def failure_record(username: str, address: str | None) -> bool:
    """Count one failure; True when this failure starts a lockout."""
    counts = [_increment(key, settings.LOGIN_WINDOW_S) for key in _keys(username, address)]
    return settings.LOGIN_MAX_FAILURES in counts


def success_record(username: str) -> None:
    key = _keys(username, None)[0]
    cache.delete_many([key, key + ":until"])
