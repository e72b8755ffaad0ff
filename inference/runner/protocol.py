"""Request bodies for every route family: size-limited reads and JSON objects in, Python values out.

Task-specific parsing lives beside its routes (``predict/protocol.py``, ``generation/protocol.py``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from .errors import BadRequest, InvalidInput, PayloadTooLarge, UnsupportedMediaType

JSON_TYPE = "application/json"
CHUNK = 64 * 1024


def check_length(request: web.Request, limit: int) -> None:
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"the body is {request.content_length} bytes; the limit is {limit}")


async def read_limited(read_chunk: Callable[[], Awaitable[bytes]], limit: int, seen: int = 0) -> bytes:
    """Read chunks until the stream ends; refuse once ``seen`` plus what was read passes ``limit``."""
    body = bytearray()
    while chunk := await read_chunk():
        body += chunk
        if seen + len(body) > limit:  # Content-Length may be absent (chunked) or wrong
            raise PayloadTooLarge(f"the body is over the limit of {limit} bytes")
    return bytes(body)


async def read_body(request: web.Request, limit: int) -> bytes:
    check_length(request, limit)
    return await read_limited(lambda: request.content.read(CHUNK), limit)


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("the body is not valid UTF-8") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(data, dict):
        raise InvalidInput("the JSON body must be an object")
    return data


async def read_json(request: web.Request, limit: int) -> dict[str, Any]:
    if request.content_type != JSON_TYPE:
        raise UnsupportedMediaType(f"expected Content-Type {JSON_TYPE}, got {request.content_type or 'none'}")
    return parse_json(await read_body(request, limit))
