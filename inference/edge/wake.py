"""Waking a deployment scaled to zero from the edge: one task message for the console's worker.

The edge has no database; it pushes ``contract.wake``'s message onto the console's Celery queue in the
same Redis. ``SET <p>:wake:<name> NX EX`` first, so a burst of held requests at every edge sends one
message per ``DEDUPE_S``; the task itself is idempotent (it only scales a deployment still at zero).
"""

from __future__ import annotations

import logging
import socket

from redis import asyncio as aioredis

from contract.redis_keys import RedisKeys
from contract.wake import wake_message, wake_queue_key

log = logging.getLogger("lantau.edge.wake")
DEDUPE_S = 5


class RedisWaker:
    def __init__(self, redis: aioredis.Redis, names: RedisKeys, origin: str = "") -> None:
        self._redis = redis
        self._names = names
        self._origin = origin or f"edge@{socket.gethostname()}"

    async def wake(self, deployment: str) -> None:
        if not await self._redis.set(self._names.wake(deployment), "1", nx=True, ex=DEDUPE_S):
            return  # asked already, by this edge or another, within DEDUPE_S
        await self._redis.lpush(wake_queue_key(self._names), wake_message(deployment, self._origin))
        log.info("asked deployment %s to wake from zero replicas", deployment)
