"""The once-per-second live summary, published to Redis for the console's live charts.

Each second: ``PUBLISH <prefix>:metrics:<deployment> <json>`` for open pages and
``SET <prefix>:metrics:last:<deployment>:<replica> <json> EX 10`` (``contract.redis_keys``) for whoever arrives later, in one
pipeline. The JSON holds p50/p95/p99 latency of the last second, requests/s, errors, throttled
requests, mean batch size and queue depth (see ``metrics.Window.summary``). With a runner token (every
runner an agent starts has one) each summary goes out sealed with it (``contract.summaries``), and the
console acts only on sealed ones; a runner started by hand without a token publishes the plain JSON.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from redis import asyncio as aioredis
from redis.exceptions import RedisError

from contract.redis_keys import RedisKeys
from contract.summaries import summary_seal

from .metrics import Metrics

log = logging.getLogger("lantau.runner.live")

LAST_TTL_S = 10
WARN_EVERY_S = 60.0


class LivePublisher:
    def __init__(
        self,
        redis: aioredis.Redis,
        metrics: Metrics,
        *,
        names: RedisKeys,
        deployment: str,
        model_version: str,
        replica: str,
        token: str | None = None,
        interval_s: float = 1.0,
    ) -> None:
        self._redis = redis
        self._token = token
        self._metrics = metrics
        self._names = names
        self.interval_s = interval_s
        self.identity = {"deployment": deployment, "model_version": model_version, "replica": replica}
        self.channel = names.metrics_channel(deployment)
        self.last_key = ""
        self.rename(replica)
        self._warned = 0.0

    def rename(self, replica: str) -> None:
        self.identity["replica"] = replica
        self.last_key = self._names.metrics_last(self.identity["deployment"], replica)

    def payload(self) -> str:
        summary = {**self.identity, "ts": round(time.time(), 3), **self._metrics.take_window()}
        body = json.dumps(summary, separators=(",", ":"))
        if self._token is None:
            return body
        return summary_seal(body, token=self._token, prefix=self._names.prefix,
                            deployment=self.identity["deployment"], replica=self.identity["replica"])  # fmt: skip

    async def publish_once(self) -> None:
        payload = self.payload()
        pipe = self._redis.pipeline(transaction=False)
        pipe.publish(self.channel, payload)
        pipe.set(self.last_key, payload, ex=LAST_TTL_S)
        try:
            await pipe.execute()
        except (RedisError, OSError) as exc:
            now = time.monotonic()
            if now - self._warned > WARN_EVERY_S:
                self._warned = now
                log.warning("live metrics not published, Redis unreachable: %s", exc)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            next_at += self.interval_s
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            await self.publish_once()
