"""One Redis subscription per console process for every deployment-metrics websocket (review M-G).

Runners publish a summary per second on ``<prefix>:metrics:<deployment>``. Each socket used to open a
Redis client of its own (and SCAN the whole keyspace on connect), so a flood of sockets from one member
exhausted Redis's ``maxclients`` and every key check answered 503. Now a process holds one pub/sub
connection and a few command connections (``HUB_CONNECTIONS`` in all), whatever the number of sockets: ``subscribe`` gives a socket a
bounded queue of the deployment's summaries (the oldest is dropped when a slow page falls behind), and
``latest`` reads the replicas' last summaries by key (MGET of the replicas the database knows), not by
SCAN. What reaches a queue is checked first: sealed by a replica of that deployment with its runner
token (``contract.summaries``), of bounded size, re-serialised, never bytes passed through.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import defaultdict

from channels.db import database_sync_to_async
from django.conf import settings
from redis import asyncio as aioredis
from redis.exceptions import RedisError

from contract.redis_keys import RedisKeys
from contract.summaries import SummaryRefused, summary_open
from inference.credentials import runner_token
from inference.models import Replica

log = logging.getLogger(__name__)
HUB_CONNECTIONS = 4  # Redis connections of one process's hub, its subscription included
QUEUE_SIZE = 32  # summaries held per socket (one a second per replica): a slow page drops the oldest
MAX_SUMMARY_BYTES = 65536
OWNER_MISS_S = 10.0  # a replica not (yet) in the database is looked up again after this long
MAX_OWNERS = 100_000


def _named_replica(raw: object) -> int:
    """The replica a published summary names (to find its token); its seal is checked after."""
    if not isinstance(raw, bytes | str) or len(raw) > MAX_SUMMARY_BYTES:
        raise SummaryRefused("not a short string")
    sealed = json.loads(raw)
    body = (
        json.loads(sealed["body"])
        if isinstance(sealed, dict) and isinstance(sealed.get("body"), str)
        else None
    )
    replica = body.get("replica") if isinstance(body, dict) else None
    if not isinstance(replica, str) or not replica.isdigit() or len(replica) > 18:
        raise SummaryRefused("it names no replica")
    return int(replica)


def summary_text(raw: object, deployment: str, replica: int | None = None) -> str | None:
    """A runner's summary as JSON text for a page, when it is sealed by ``replica`` (for a published
    one, by the replica it names) for ``deployment`` (``contract.summaries``); anything else that reached
    Redis (not sealed, another replica's, stale, not JSON) is dropped: Redis content is data to check."""
    try:
        if replica is None:
            replica = _named_replica(raw)
        summary = summary_open(raw, token=runner_token(replica), prefix=settings.REDIS_PREFIX,
                               deployment=deployment, replica=str(replica))  # fmt: skip
    except (SummaryRefused, ValueError, RecursionError, KeyError, TypeError):
        return None
    return json.dumps(summary, separators=(",", ":"))


def _deployment_of(replica: int) -> str | None:
    return Replica.objects.filter(pk=replica).values_list("deployment__name", flat=True).first()


class MetricsHub:
    """The process's metrics subscriptions, for the event loop it was made in."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.redis = aioredis.Redis.from_url(settings.REDIS_URL, max_connections=HUB_CONNECTIONS)
        self.pubsub = self.redis.pubsub()
        self.channel_prefix = RedisKeys(settings.REDIS_PREFIX).metrics_channel("")
        self.queues: dict[str, set[asyncio.Queue[str]]] = defaultdict(set)
        self.reader: asyncio.Task | None = None
        self.owners: dict[int, tuple[str | None, float]] = {}  # replica -> (its deployment, when looked up)

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
        texts = (summary_text(v, deployment, r) for r, v in zip(replica_ids, values, strict=True))
        return [text for text in texts if text is not None]

    async def _owned(self, text: str, channel_deployment: str) -> bool:
        """Whether the replica a sealed summary names belongs to the channel's deployment (a host holds
        its own replicas' tokens and could seal for another deployment's channel); looked up once per
        replica (a replica never changes deployment), a miss again after ``OWNER_MISS_S``."""
        replica = int(json.loads(text)["replica"])
        owner, at = self.owners.get(replica, (None, 0.0))
        if owner is None and time.monotonic() - at > OWNER_MISS_S:
            if len(self.owners) >= MAX_OWNERS:
                self.owners.clear()
            owner = await database_sync_to_async(_deployment_of)(replica)
            self.owners[replica] = (owner, time.monotonic())
        return owner == channel_deployment

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
            channel = message.get("channel")
            name = channel.decode(errors="replace") if isinstance(channel, bytes) else str(channel)
            deployment = name.removeprefix(self.channel_prefix)
            text = summary_text(message.get("data"), deployment)
            if text is None or not await self._owned(text, deployment):
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
