"""The edge's route table: every deployment's signed entry from Redis, held in memory.

Changes are pushed: the console publishes the deployment's name on ``<prefix>:routes:changed`` after
rewriting its entry (``contract.routes``), and the edge re-reads that one entry. A full re-read
happens at start, after the subscription (re)connects, on ``*``, and every ``refresh_s`` as a safety
net for a lost message. The database is never polled. A request costs a dict lookup.
"""

from __future__ import annotations

import asyncio
import logging

from redis import asyncio as aioredis
from redis.exceptions import RedisError

from contract.redis_keys import RedisKeys
from contract.routes import ALL_ROUTES, RouteEntry, route_open
from contract.signing import Ed25519PublicKey

log = logging.getLogger("lantau.edge.routes")
RECONNECT_S = 1.0


class RedisRoutes:
    def __init__(
        self, redis: aioredis.Redis, names: RedisKeys, verifier: Ed25519PublicKey, edge_key: bytes,
        *, refresh_s: float = 30.0,
    ) -> None:  # fmt: skip
        self._redis = redis
        self._names = names
        self._verifier = verifier
        self._edge_key = edge_key
        self.refresh_s = refresh_s
        self._routes: dict[str, RouteEntry] = {}
        self.loaded = asyncio.Event()

    def __len__(self) -> int:
        return len(self._routes)

    async def get(self, name: str) -> RouteEntry | None:
        return self._routes.get(name)

    async def names_for_team(self, team_id: int) -> list[str]:
        return sorted(n for n, r in self._routes.items() if r.team_id == team_id)

    def replica_ids(self) -> set[int]:
        return {replica.id for route in self._routes.values() for replica in route.replicas}

    def _open(self, name: str, raw: bytes | str | None) -> RouteEntry | None:
        if raw is None:
            return None
        entry = route_open(raw, self._verifier, self._names.prefix, name, self._edge_key)
        if entry is None:
            log.warning("route entry of %r refused: unsigned, forged or for another install", name)
        return entry

    async def load_all(self) -> None:
        raw = await self._redis.hgetall(self._names.routes())
        table: dict[str, RouteEntry] = {}
        for field, value in raw.items():
            name = field.decode("utf-8", "replace") if isinstance(field, bytes) else field
            entry = self._open(name, value)
            if entry is not None:
                table[name] = entry
        self._routes = table
        self.loaded.set()

    async def load_one(self, name: str) -> None:
        entry = self._open(name, await self._redis.hget(self._names.routes(), name))
        if entry is None:
            self._routes.pop(name, None)
        else:
            self._routes[name] = entry

    async def follow(self) -> None:
        """Forever: subscribe to changes, re-read what changed, re-read everything every ``refresh_s``."""
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._names.routes_channel())
                await self.load_all()  # after subscribing: no change falls in between
                await self._listen(pubsub)
            except (RedisError, OSError) as exc:
                log.warning("route updates interrupted (%s); reconnecting", exc)
                await asyncio.sleep(RECONNECT_S)
            finally:
                await pubsub.aclose()

    async def _listen(self, pubsub: aioredis.client.PubSub) -> None:
        loop = asyncio.get_running_loop()
        next_refresh = loop.time() + self.refresh_s
        while True:
            message = await pubsub.get_message(timeout=min(1.0, self.refresh_s))
            if message is not None and message.get("type") == "message":
                name = message["data"].decode("utf-8", "replace")
                if name == ALL_ROUTES:
                    await self.load_all()
                else:
                    await self.load_one(name)
            if loop.time() >= next_refresh:
                await self.load_all()
                next_refresh = loop.time() + self.refresh_s
