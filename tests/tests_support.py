"""Small helpers shared by in-process tests."""

from __future__ import annotations

import socket


def closed_port() -> int:
    """A local TCP port with nothing listening on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
