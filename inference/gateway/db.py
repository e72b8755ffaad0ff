"""Database reads for the gateway, which runs outside Django's request cycle.

Django drops a broken connection only when a request starts or ends; the gateway is a plain ASGI app,
so after PostgreSQL restarts its worker thread would keep a dead connection and fail every read. A
read that fails to reach the database closes that connection (the next read opens a fresh one) and
answers 503 with `Retry-After`, the contract's word for "try again shortly".
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import Error, InterfaceError, OperationalError, connection

from core.errors import Unavailable

P = ParamSpec("P")
T = TypeVar("T")
RETRY_AFTER_S = "2"


def _guarded(read: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    try:
        return read(*args, **kwargs)
    except (OperationalError, InterfaceError):
        with suppress(Error):
            connection.close()
        raise Unavailable(
            "the database is unavailable; retry shortly", headers={"Retry-After": RETRY_AFTER_S}
        ) from None


async def db_read(read: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``read`` in Django's database thread; a lost database is a 503, and the next read reconnects."""
    return await sync_to_async(_guarded)(read, *args, **kwargs)
