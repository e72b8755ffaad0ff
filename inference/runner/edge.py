"""The runner's Redis-backed services, alive for as long as the HTTP app: key checks, rate limits,
usage counters and the live metrics publisher. Without ``--redis-url`` only the token check exists."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator

from redis import asyncio as aioredis

from contract.signing import Ed25519PublicKey, public_key_from_text

from .access import Access
from .config import Manifest, RunnerConfig
from .keys import KeyCache
from .live import LivePublisher
from .metrics import Metrics
from .ratelimit import RateLimiter
from .usage import UsageRecorder

log = logging.getLogger("lantau.runner.edge")


def _verify_key(manifest: Manifest) -> Ed25519PublicKey | None:
    """The console's public key for API-key entries; without a valid one every API key is refused."""
    if manifest.key_verify_key is None:
        log.warning("the manifest has no key_verify_key: API keys will be refused")
        return None
    try:
        return public_key_from_text(manifest.key_verify_key)
    except ValueError as exc:
        log.warning("the manifest's key_verify_key is unusable (%s): API keys will be refused", exc)
        return None


class Edge:
    def __init__(self, config: RunnerConfig, manifest: Manifest, metrics: Metrics) -> None:
        self._named = bool(config.replica)
        self.redis: aioredis.Redis | None = None
        self.usage: UsageRecorder | None = None
        self.live: LivePublisher | None = None
        self._tasks: list[asyncio.Task[None]] = []
        keys = limiter = None
        if config.redis_url:
            self.redis = aioredis.Redis.from_url(
                config.redis_url, socket_timeout=1.0, socket_connect_timeout=1.0, health_check_interval=30
            )
            names = config.redis_keys
            keys = KeyCache(self.redis, names, _verify_key(manifest))
            limiter = RateLimiter(self.redis, names)
            self.usage = UsageRecorder(self.redis, names)
            self.live = LivePublisher(
                self.redis,
                metrics,
                names=names,
                deployment=manifest.deployment,
                model_version=manifest.model_version,
                replica=config.replica or f"{socket.gethostname()}:{config.port}",  # see listening_on
                token=config.token,
            )
            if manifest.team_id is None:
                log.warning("the manifest names no team_id: API keys will be refused")
        self.access = Access(token=config.token, team_id=manifest.team_id, keys=keys, limiter=limiter,
                             deployment=manifest.deployment, usage=self.usage)  # fmt: skip

    def listening_on(self, port: int) -> None:
        """Without ``--replica``, this process is named host:port once the port is known."""
        if self.live is not None and not self._named:
            self.live.rename(f"{socket.gethostname()}:{port}")

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.usage is not None:
            self._tasks.append(loop.create_task(self.usage.run(), name="lantau-usage"))
        if self.live is not None:
            self._tasks.append(loop.create_task(self.live.run(), name="lantau-live-metrics"))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.redis is not None:
            with contextlib.suppress(Exception):
                await self.redis.aclose()

    async def lifespan(self, app: object) -> AsyncIterator[None]:
        """For ``app.cleanup_ctx``: run the background tasks while the app serves."""
        self.start()
        yield
        await self.close()
