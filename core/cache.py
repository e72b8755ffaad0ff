"""The console's Django cache stores JSON, never pickles (review H-B).

Django's Redis cache unpickles whatever it reads, and every node agent, runner and edge can reach
Redis: one value planted at a cache key would run code in the console. ``JsonSerializer`` replaces
Django's ``RedisSerializer``: integers stay plain Redis integers (so ``incr`` stays atomic), anything
else is JSON, and a value that is not JSON reads as a miss (``None``), never as code or an exception.
Callers therefore treat every value they read as data to check, as they would any Redis content.
"""

from __future__ import annotations

import json
import logging

log = logging.getLogger(__name__)


class JsonSerializer:
    """``CACHES[...]["OPTIONS"]["serializer"]``: what Django's RedisCacheClient calls to encode and decode."""

    def dumps(self, obj: object) -> bytes | int:
        if type(obj) is int:  # not bool: Redis INCR needs a plain integer, as Django's own serializer does
            return obj
        return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()

    def loads(self, data: bytes) -> object:
        try:
            return int(data)
        except ValueError:
            pass
        try:
            return json.loads(data)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            log.warning("cache: a value that is not JSON was read and ignored (%d bytes)", len(data))
            return None
