"""Calling the console's `/v1/` gateway in-process: one event loop per test, cleaned up after it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from asgiref.sync import sync_to_async
from django.db import connections

from inference.gateway import auth, upstream


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    """Run a test's requests in one event loop (the gateway's Redis client and pooled HTTP session belong
    to it), then close the database connections the gateway opened in worker threads and those clients."""

    async def main() -> None:
        try:
            await scenario()
        finally:
            await sync_to_async(connections.close_all)()
            if auth._redis is not None:
                await auth._redis.aclose()
                auth._redis = None
            if upstream._session is not None:
                await upstream._session.close()
                upstream._session = None

    asyncio.run(main())
