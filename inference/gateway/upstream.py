"""Forwarding to runner replicas over pooled keep-alive connections (aiohttp's client).

aiohttp rather than httpx: measured through daphne on this project's 2-core machine, httpx cost the
console about twice the CPU per forwarded request (see docs/performance.md). Answers stream back
chunk by chunk as the runner writes them, so Server-Sent Events pass through unbuffered.
"""

from __future__ import annotations

import aiohttp
from django.conf import settings
from yarl import URL

# Sent back to the client as the runner wrote them; the body is forwarded byte for byte (no
# decompression), so its Content-Length stays true.
PASS_HEADERS = frozenset({b"content-type", b"content-length", b"retry-after", b"cache-control"})
# The replica could not be reached or dropped the connection before answering: safe to retry elsewhere.
UNREACHABLE = (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)

_session: aiohttp.ClientSession | None = None


def session() -> aiohttp.ClientSession:
    """One pooled client per process, created in the serving event loop on first use."""
    global _session
    if _session is None or _session.closed:
        connector = aiohttp.TCPConnector(
            limit=256, limit_per_host=64, keepalive_timeout=30, ttl_dns_cache=300
        )
        timeout = aiohttp.ClientTimeout(total=settings.GATEWAY_TIMEOUT_S, sock_connect=2.0)
        _session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False, skip_auto_headers=("User-Agent",)
        )
    return _session


async def forward(send, url: str, body: bytes, headers: dict[str, str]) -> str:
    """POST to a replica and stream its answer to the ASGI ``send``.

    Returns ``"unreachable"`` when the replica could not be reached (nothing was sent to the client
    yet, so another replica may be tried), ``"cut"`` when it died mid-answer, else ``"ok"``.
    """
    try:
        # encoded=True: the client's query string goes out exactly as it came in.
        response = await session().post(URL(url, encoded=True), data=body, headers=headers)
    except UNREACHABLE:
        return "unreachable"
    async with response:
        raw = [(k.lower(), v) for k, v in response.raw_headers if k.lower() in PASS_HEADERS]
        await send({"type": "http.response.start", "status": response.status, "headers": raw})
        outcome = "ok"
        try:
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except (TimeoutError, aiohttp.ClientError):
            outcome = "cut"  # the headers are gone already: end the body, the client sees it truncated
        await send({"type": "http.response.body", "body": b""})
    return outcome
