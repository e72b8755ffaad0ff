"""Local TCP ports."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A local TCP port with nothing listening on it: free to bind, and refused when connected to."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
