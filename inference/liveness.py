"""Node liveness and fresh inventories in Redis, so a heartbeat costs no PostgreSQL write.

Each heartbeat ZADDs the node's name with the time into ``<p>:nodes:seen`` and SETs its inventory
under ``<p>:nodes:inventory:<node>`` (contract.redis_keys); in the same round trip it appends the
node's chart figures to their history and asks whether any page watches them (the channel layer's
group), so a heartbeat costs one Redis round trip and no channel-layer send while nobody looks. The sweep reads the sorted set; the
scheduler overlays the fresh inventories on the rows (which are written only when something
changed, or every LANTAU_NODE_PERSIST_EVERY_S). When Redis is unreachable callers fall back to
PostgreSQL: ``remember`` returns False and the heartbeat writes the row.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

import redis
from django.conf import settings
from redis.exceptions import RedisError

from contract.redis_keys import RedisKeys

log = logging.getLogger("lantau.nodes")
NODE_NAME = re.compile(r"[-a-zA-Z0-9_]{1,64}")  # Node.name is a SlugField(max_length=64)
INVENTORY_TTL_S = 600


@cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def _names() -> RedisKeys:
    return RedisKeys(settings.REDIS_PREFIX)


@dataclass(frozen=True)
class Remembered:
    kept: bool  # False: Redis could not take the heartbeat (the caller then writes PostgreSQL)
    watched: bool  # a page may be showing the node's figures: send them to its channel group


@dataclass(frozen=True)
class Stats:
    """A heartbeat's chart figures: appended to the node's history (the last ``keep``, read by its
    page; ``inference.live``), pushed to ``group`` when watched."""

    raw: str
    keep: int
    ttl_s: int
    group: str


def remember(name: str, inventory: dict, at: float, stats: Stats | None = None) -> Remembered:
    """Record a heartbeat (and its chart figures) in one round trip."""
    names = _names()
    watchers = _group_key(stats.group) if stats else None
    try:
        pipe = _redis().pipeline(transaction=False)
        pipe.zadd(names.nodes_seen(), {name: at})
        pipe.set(names.node_inventory(name), json.dumps(inventory, separators=(",", ":")), ex=INVENTORY_TTL_S)
        if stats is not None:
            key = names.node_stats(name)
            cast(Any, pipe.rpush(key, stats.raw)).ltrim(key, -stats.keep, -1).expire(key, stats.ttl_s)
        if watchers is not None:
            pipe.zcard(watchers)
        answers = pipe.execute()
    except (RedisError, OSError) as exc:
        log.warning("heartbeat of %s not kept in Redis: %s", name, exc)
        return Remembered(kept=False, watched=False)
    return Remembered(kept=True, watched=stats is not None and (watchers is None or bool(answers[-1])))


def _group_key(group: str) -> str | None:
    """The Redis key of a channel group's members under channels_redis; None with another layer (then
    every heartbeat is sent to the group, as without this check)."""
    from channels.layers import get_channel_layer

    key_of = getattr(get_channel_layer(), "_group_key", None)  # channels_redis: a sorted set per group
    if not callable(key_of):
        return None
    key = key_of(group)
    return key.decode() if isinstance(key, bytes) else str(key)


def seen_all() -> dict[str, float]:
    """Every node's last heartbeat time (seconds since the epoch); empty when Redis is unreachable."""
    try:
        pairs = _redis().zrange(_names().nodes_seen(), 0, -1, withscores=True)
    except (RedisError, OSError):
        return {}
    # Node names are slugs; a member that is not one (not UTF-8, planted) names no node and is skipped.
    out = {}
    for n, t in cast(Any, pairs):
        name = n.decode(errors="replace") if isinstance(n, bytes) else str(n)
        if NODE_NAME.fullmatch(name):
            out[name] = float(t)
    return out


def inventories(names: list[str]) -> dict[str, dict]:
    """The last reported inventory of each node that has one in Redis."""
    if not names:
        return {}
    try:
        raws = _redis().mget([_names().node_inventory(n) for n in names])
    except (RedisError, OSError):
        return {}
    out = {}
    for name, raw in zip(names, cast(Any, raws), strict=True):
        if raw:
            try:
                inventory = json.loads(raw)
            except (ValueError, RecursionError):
                continue
            if isinstance(inventory, dict):
                out[name] = inventory
    return out


def forget(name: str) -> None:
    names = _names()
    try:
        cast(Any, _redis().pipeline(transaction=False).zrem(names.nodes_seen(), name)).delete(
            names.node_inventory(name)
        ).execute()
    except (RedisError, OSError):
        pass


def first_in_window(what: str, window_s: float) -> bool:
    """True for the first caller of ``what`` in each ``window_s`` seconds, across console processes
    (and True when Redis cannot say: acting twice is better than never)."""
    key = f"{settings.REDIS_PREFIX}:nodes:once:{what}"
    try:
        return bool(_redis().set(key, b"1", nx=True, px=max(1, int(window_s * 1000))))
    except (RedisError, OSError):
        return True
