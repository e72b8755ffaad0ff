"""Push live updates to open pages: one helper, sent after commit, to per-team or per-object groups."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger("lantau.live")


def publish(group: str, handler: str, payload: dict[str, Any]) -> None:
    """Send `payload` to the consumers of `group` (their method `handler`) once the transaction commits."""

    def send() -> None:
        try:
            async_to_sync(get_channel_layer().group_send)(group, {"type": handler, "payload": payload})
        except Exception:  # a live update is best effort: never fail the write that caused it
            log.warning("could not publish to %s", group, exc_info=True)

    transaction.on_commit(send)
