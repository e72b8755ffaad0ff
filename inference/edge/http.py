"""The two hosts' plumbing: a request as the dispatcher sees it, and a reply it writes, for ASGI (the
console's ``/v1/`` under daphne) and for aiohttp's server (the edge process)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from aiohttp import web

from inference.runner.errors import PayloadTooLarge

Headers = list[tuple[str, str]]


class ClientGone(Exception):
    """The client disconnected while we were reading its request."""


class Request:
    __slots__ = ("method", "path", "query", "headers", "client", "read_body")

    def __init__(
        self, method: str, path: str, query: str, headers: Mapping[str, str], client: str | None,
        read_body: Callable[[int], Awaitable[bytes]],
    ) -> None:  # fmt: skip
        self.method, self.path, self.query = method, path, query
        self.headers = headers  # looked up with lower-case names
        self.client = client
        self.read_body = read_body


class Reply(Protocol):
    async def send(self, status: int, headers: Headers, body: bytes) -> None: ...
    async def start(self, status: int, headers: Headers) -> None: ...
    async def write(self, chunk: bytes) -> None: ...
    async def finish(self) -> None: ...


def too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body is larger than the limit of {limit} bytes")


def json_body(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload).encode()


# ASGI ----------------------------------------------------------------------------------------------


def asgi_request(scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]]) -> Request:
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}

    async def read_body(limit: int) -> bytes:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    client = (scope.get("client") or (None,))[0]
    query = scope.get("query_string", b"").decode("latin-1")
    return Request(scope["method"], scope["path"], query, headers, client, read_body)


class AsgiReply:
    __slots__ = ("_send",)

    def __init__(self, send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        self._send = send

    async def send(self, status: int, headers: Headers, body: bytes) -> None:
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        raw.append((b"content-length", str(len(body)).encode()))
        await self._send({"type": "http.response.start", "status": status, "headers": raw})
        await self._send({"type": "http.response.body", "body": body})

    async def start(self, status: int, headers: Headers) -> None:
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        await self._send({"type": "http.response.start", "status": status, "headers": raw})

    async def write(self, chunk: bytes) -> None:
        await self._send({"type": "http.response.body", "body": chunk, "more_body": True})

    async def finish(self) -> None:
        await self._send({"type": "http.response.body", "body": b""})


# aiohttp's server ----------------------------------------------------------------------------------


def aiohttp_request(request: web.BaseRequest) -> Request:
    async def read_body(limit: int) -> bytes:
        declared = request.content_length
        if declared is not None:
            if declared > limit:
                raise too_large(limit)
            return await request.content.readexactly(declared) if declared else b""
        chunks, size = [], 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            chunks.append(chunk)
        return b"".join(chunks)

    return Request(request.method, request.path, request.query_string, request.headers, request.remote,
                   read_body)  # fmt: skip


class AiohttpReply:
    """Collects the answer: a whole one becomes a ``web.Response``; a stream is written as it comes."""

    __slots__ = ("_request", "response")

    def __init__(self, request: web.BaseRequest) -> None:
        self._request = request
        self.response: web.StreamResponse | None = None

    async def send(self, status: int, headers: Headers, body: bytes) -> None:
        self.response = web.Response(status=status, body=body, headers=headers)

    async def start(self, status: int, headers: Headers) -> None:
        self.response = web.StreamResponse(status=status, headers=headers)
        await self.response.prepare(self._request)

    async def write(self, chunk: bytes) -> None:
        assert self.response is not None
        await self.response.write(chunk)

    async def finish(self) -> None:
        assert self.response is not None
        await self.response.write_eof()
