"""Request bodies for every route family: size-limited reads and JSON objects in, Python values out.

Task-specific parsing lives beside its routes (``predict/protocol.py``, ``generation/protocol.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from .errors import BadRequest, InvalidInput, PayloadTooLarge, UnsupportedMediaType

JSON_TYPE = "application/json"
CHUNK = 64 * 1024
DEFAULT_JSON_DEPTH = 32  # --max-json-depth; the deepest body this project's routes need is 4
# JSON strings (brackets inside them do not nest) and everything that is not a bracket: both are dropped
# before counting, so the depth check runs at C speed over the body and only loops over brackets.
_JSON_STRING = re.compile(rb'"(?:[^"\\]+|\\.)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


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


def json_depth_exceeds(body: bytes, limit: int) -> bool:
    """True when the body's arrays and objects nest deeper than ``limit`` (checked before parsing, so a
    body nested 100,000 levels deep never reaches the recursive parser)."""
    brackets = _JSON_STRING.sub(b'""', body).translate(None, _NOT_BRACKETS)
    depth = 0
    for byte in brackets:
        if byte in b"[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def parse_json(body: bytes, max_depth: int = DEFAULT_JSON_DEPTH) -> dict[str, Any]:
    """The body as a JSON object; 400 when it is not UTF-8, not JSON or nested deeper than ``max_depth``."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("the body is not valid UTF-8") from None
    if json_depth_exceeds(body, max_depth):
        raise BadRequest(f"the JSON body nests deeper than {max_depth} levels")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:  # unreachable after the depth check; kept so no parser path can answer 500
        raise BadRequest(f"the JSON body nests deeper than {max_depth} levels") from None
    if not isinstance(data, dict):
        raise InvalidInput("the JSON body must be an object")
    return data


async def read_json(request: web.Request, limit: int, max_depth: int = DEFAULT_JSON_DEPTH) -> dict[str, Any]:
    if request.content_type != JSON_TYPE:
        raise UnsupportedMediaType(f"expected Content-Type {JSON_TYPE}, got {request.content_type or 'none'}")
    return parse_json(await read_body(request, limit), max_depth)


def fields_require(data: dict[str, Any], allowed: frozenset[str], where: str = "") -> None:
    """Refuse (422) a field this route does not read, naming it: silently ignoring a misspelt
    ``max_token`` would answer with the default length and leave the caller none the wiser."""
    unknown = sorted(key for key in data if key not in allowed)
    if unknown:
        place = f"{where}.{unknown[0]}" if where else unknown[0]
        raise InvalidInput(f"unknown field '{place}': this route takes {', '.join(sorted(allowed))}")
