"""One Redis subscription per console process for every deployment-metrics websocket (review M-G).

Runners publish a summary per second on ``<prefix>:metrics:<deployment>``. Each socket used to open a
Redis client of its own (and SCAN the whole keyspace on connect), so a flood of sockets from one member
exhausted Redis's ``maxclients`` and every key check answered 503. Now a process holds one pub/sub
connection and a few command connections (``HUB_CONNECTIONS`` in all), whatever the number of sockets: ``subscribe`` gives a socket a
bounded queue of the deployment's summaries (the oldest is dropped when a slow page falls behind), and
``latest`` reads the replicas' last summaries by key (MGET of the replicas the database knows), not by
SCAN. What reaches a queue is checked first: a JSON object of bounded size, never bytes passed through.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import defaultdict

from django.conf import settings
from redis import asyncio as aioredis
from redis.exceptions import RedisError

from contract.redis_keys import RedisKeys

log = logging.getLogger(__name__)
HUB_CONNECTIONS = 4  # Redis connections of one process's hub, its subscription included
QUEUE_SIZE = 32  # summaries held per socket (one a second per replica): a slow page drops the oldest
MAX_SUMMARY_BYTES = 65536


def summary_text(raw: object) -> str | None:
    """A runner's summary as text for a page, when it is a JSON object; anything else that reached
    Redis (not UTF-8, not JSON, a planted value) is dropped: Redis content is data to check."""
    if not isinstance(raw, bytes) or len(raw) > MAX_SUMMARY_BYTES:
        return None
    try:
        text = raw.decode()
        return text if isinstance(json.loads(text), dict) else None
    except (ValueError, RecursionError):
        return None


class MetricsHub:
    """The process's metrics subscriptions, for the event loop it was made in."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.redis = aioredis.Redis.from_url(settings.REDIS_URL, max_connections=HUB_CONNECTIONS)
        self.pubsub = self.redis.pubsub()
        self.queues: dict[str, set[asyncio.Queue[str]]] = defaultdict(set)
        self.reader: asyncio.Task | None = None

    async def subscribe(self, deployment: str) -> asyncio.Queue[str]:
        channel = RedisKeys(settings.REDIS_PREFIX).metrics_channel(deployment)
        queue: asyncio.Queue[str] = asyncio.Queue(QUEUE_SIZE)
        first = not self.queues[channel]
        self.queues[channel].add(queue)
        if first:
            await self.pubsub.subscribe(channel)
        if self.reader is None or self.reader.done():
            self.reader = asyncio.create_task(self._read())
        return queue

    async def unsubscribe(self, deployment: str, queue: asyncio.Queue[str]) -> None:
        channel = RedisKeys(settings.REDIS_PREFIX).metrics_channel(deployment)
        self.queues[channel].discard(queue)
        if not self.queues[channel]:
            del self.queues[channel]
            try:
                await self.pubsub.unsubscribe(channel)
            except (RedisError, OSError):
                pass

    async def latest(self, deployment: str, replica_ids: list[int]) -> list[str]:
        """The last second of each replica, for an instant first point on a page."""
        if not replica_ids:
            return []
        names = RedisKeys(settings.REDIS_PREFIX)
        values = await self.redis.mget([names.metrics_last(deployment, str(r)) for r in replica_ids])
        return [text for v in values if (text := summary_text(v)) is not None]

    async def _read(self) -> None:
        while self.queues:
            try:
                message = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            except (RedisError, OSError) as exc:
                log.warning("metrics hub: Redis read failed (%s); retrying", exc)
                await asyncio.sleep(1.0)
                continue
            if not message or message.get("type") != "message":
                continue
            text = summary_text(message.get("data"))
            channel = message.get("channel")
            name = channel.decode(errors="replace") if isinstance(channel, bytes) else str(channel)
            if text is None:
                continue
            for queue in list(self.queues.get(name, ())):
                if queue.full():
                    queue.get_nowait()  # a slow page loses its oldest summary, never the process its memory
                queue.put_nowait(text)


_hub: MetricsHub | None = None


def hub() -> MetricsHub:
    """This process's hub (a new one when the event loop changed, as between tests)."""
    global _hub
    if _hub is None or _hub.loop is not asyncio.get_running_loop():
        _hub = MetricsHub()
    return _hub
