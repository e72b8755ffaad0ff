"""Tiny ASGI helpers the console's entry point uses before a request reaches Django or `/v1/`."""

from __future__ import annotations

import json

from core.errors import ApplicationError


def header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None


async def send_json(send, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
    body = json.dumps(payload).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def send_error(send, exc: ApplicationError) -> None:
    await send_json(send, exc.status, exc.as_dict(), exc.headers)
