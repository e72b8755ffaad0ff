"""Which address a request came from, for the audit log and login throttling.

`REMOTE_ADDR` is the peer. `X-Forwarded-For` is believed only when that peer is listed in
`LANTAU_TRUSTED_PROXIES` (addresses or networks); otherwise anyone could write any address into
the audit log or dodge the per-address login throttle. The address of the request being served is
kept in a context variable (set by `console.middleware.RequestAddressMiddleware`) so services can
record it without a request parameter.
"""

from __future__ import annotations

import ipaddress
from contextvars import ContextVar

from django.conf import settings

current_address: ContextVar[str | None] = ContextVar("lantau_request_address", default=None)


def _valid(raw: str) -> str | None:
    try:
        return str(ipaddress.ip_address(raw.strip()))
    except ValueError:
        return None


def _trusted(peer: str) -> bool:
    address = ipaddress.ip_address(peer)
    for entry in settings.TRUSTED_PROXIES:
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def client_address(meta: dict) -> str | None:
    """The caller's address from a request's META (or an ASGI scope turned into one)."""
    peer = _valid(str(meta.get("REMOTE_ADDR") or ""))
    if peer is None:
        return None
    forwarded = str(meta.get("HTTP_X_FORWARDED_FOR") or "")
    if not forwarded or not _trusted(peer):
        return peer
    # Walk from the nearest hop: the first address not itself a trusted proxy is the client.
    for hop in reversed([h for h in forwarded.split(",") if h.strip()]):
        address = _valid(hop)
        if address is None:
            return peer
        if not _trusted(address):
            return address
    return peer
