"""Tiny ASGI helpers for the gateway: read a bounded body, send JSON and errors."""

from __future__ import annotations

import json

from core.errors import ApplicationError, PayloadTooLarge


class ClientGone(Exception):
    """The client disconnected while we were reading its request."""


def header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None


def check_declared_length(scope: dict, *, limit: int) -> None:
    """413 when the declared Content-Length is over ``limit``. daphne has buffered the body by now
    (docs/security.md, "Data plane": a proxy's body limit stops it earlier); this spares the key check,
    the lookup and the copy."""
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body is larger than the limit of {limit} bytes")


async def read_body(scope: dict, receive, *, limit: int) -> bytes:
    check_declared_length(scope, limit=limit)
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body is larger than the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_json(send, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
    body = json.dumps(payload).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def send_error(send, exc: ApplicationError) -> None:
    await send_json(send, exc.status, exc.as_dict(), exc.headers)
