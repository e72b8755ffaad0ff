"""What the API-key reader tests (findings L-K, L-D, M-F, M-A) share: a Redis prefix of the test's own,
the console's `/v1/` gateway state reset as a fresh process would have it, a real edge process, the
runners' key cache (``inference.runner.keys.KeyCache``, which edges use too) on the real Redis, and
database queries counted on the gateway's database thread."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from redis import asyncio as aioredis

from accounts import keycache, keyhash
from contract import apikeys
from inference.gateway import app as gateway_app_module
from inference.gateway import auth
from inference.gateway.routing import RouteTable
from inference.runner import launch
from inference.runner.keys import KeyCache
from tests.support.edges import start_edge


def use_own_prefix(settings_fixture) -> Callable[[], None]:
    """Give the test a Redis prefix of its own; returns the clean-up."""
    settings_fixture.REDIS_PREFIX = f"sec-keys-{secrets.token_hex(4)}"

    def clean() -> None:
        stale = list(keycache.client().scan_iter(match=f"{settings.REDIS_PREFIX}:*"))
        if stale:
            keycache.client().delete(*stale)

    return clean


def fresh_gateway(monkeypatch) -> None:
    """The console's `/v1/` as a newly started process: no client, no remembered entries or revisions."""
    monkeypatch.setattr(auth, "_redis", None)
    monkeypatch.setattr(auth, "_limiter", None)
    monkeypatch.setattr(auth, "_opened", {})
    monkeypatch.setattr(gateway_app_module, "routes", RouteTable())
    # What the fixes added (looked up by name, so these tests also run, and fail, against older code).
    monkeypatch.setattr(auth, "_floors", {}, raising=False)
    if hasattr(apikeys, "Revisions"):
        monkeypatch.setattr(auth, "_revisions", apikeys.Revisions(), raising=False)
    if hasattr(auth, "KnownPrefixes"):
        monkeypatch.setattr(auth, "_known", auth.KnownPrefixes(), raising=False)


def restart_gateway_memory() -> None:
    """What a restarted console process forgets (call inside a scenario, between requests)."""
    auth._opened.clear()
    auth._floors.clear()
    auth._revisions = apikeys.Revisions()
    auth._known = auth.KnownPrefixes()


def runner_keys(ttl_s: float = 1.0) -> tuple[KeyCache, aioredis.Redis]:
    """A runner's (and an edge's) key cache on the suite's Redis, as ``inference.runner.edge`` builds it."""
    redis = aioredis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    return KeyCache(redis, keycache.names(), keyhash.signer().public_key(), ttl_s=ttl_s), redis


def entry_name(prefix: str) -> str:
    return keycache.names().api_key(prefix)


def edge(tmp_path: Path) -> launch.RunnerProcess:
    """A real edge process (``python -m inference.edge``) for region hk on this test's prefix."""
    process = start_edge("hk", tmp_path / "edge.log")
    process.wait_ready(60)
    return process


def edge_get(process: launch.RunnerProcess, path: str, key: str) -> httpx.Response:
    return httpx.get(f"{process.url}{path}", headers={"Authorization": f"Bearer {key}"}, timeout=10)


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


class DbThreadQueries:
    """Queries run on the gateway's database thread (``inference.gateway.db.db_read`` uses asgiref's
    thread-sensitive executor, which ``sync_to_async`` shares): ``async with DbThreadQueries() as q``."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self._context: CaptureQueriesContext | None = None

    async def __aenter__(self) -> DbThreadQueries:
        def start() -> CaptureQueriesContext:
            context = CaptureQueriesContext(connection)
            context.__enter__()
            return context

        self._context = await sync_to_async(start)()
        return self

    async def __aexit__(self, *exc: object) -> None:
        context = self._context
        assert context is not None

        def stop() -> list[str]:
            context.__exit__(None, None, None)
            return [query["sql"] for query in context.captured_queries]

        self.queries = await sync_to_async(stop)()
