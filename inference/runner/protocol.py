"""Request parsing for the inference contract: bodies in, validated Python values out."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from aiohttp import BodyPartReader, web

from .errors import BadRequest, InvalidInput, PayloadTooLarge, UnsupportedMediaType

IMAGE_TYPES = frozenset({"image/jpeg", "image/jpg", "image/pjpeg", "image/png", "image/webp"})
JSON_TYPE = "application/json"
MULTIPART_TYPE = "multipart/form-data"
CHUNK = 64 * 1024


def check_length(request: web.Request, limit: int) -> None:
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"the body is {request.content_length} bytes; the limit is {limit}")


async def _read_limited(read_chunk: Any, limit: int, seen: int = 0) -> bytes:
    body = bytearray()
    while chunk := await read_chunk():
        body += chunk
        if seen + len(body) > limit:  # Content-Length may be absent (chunked) or wrong
            raise PayloadTooLarge(f"the body is over the limit of {limit} bytes")
    return bytes(body)


async def read_body(request: web.Request, limit: int) -> bytes:
    check_length(request, limit)
    return await _read_limited(lambda: request.content.read(CHUNK), limit)


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


def decode_base64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise InvalidInput("'image' must be a base64 string")
    if value.startswith("data:") and "," in value:  # tolerate data: URLs
        value = value.split(",", 1)[1]
    try:
        return base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("'image' is not valid base64") from None


async def _read_multipart(request: web.Request, limit: int) -> tuple[bytes, Any]:
    """Stream the parts, keeping field ``file`` and an optional ``top_k``; count every byte."""
    check_length(request, limit)
    image: bytes | None = None
    top_k: Any = None
    seen = 0
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                raise InvalidInput("nested multipart bodies are not supported")
            data = await _read_limited(lambda part=part: part.read_chunk(CHUNK), limit, seen)
            seen += len(data)
            if part.name == "file":
                image = data
            elif part.name == "top_k":
                top_k = data.decode("utf-8", "replace").strip()
    except (ValueError, AssertionError, RuntimeError, UnicodeDecodeError):
        raise BadRequest("malformed multipart/form-data body") from None
    if image is None:
        raise InvalidInput("multipart body has no 'file' field")
    return image, top_k


async def read_image_request(request: web.Request, limit: int) -> tuple[bytes, Any]:
    """Return (image bytes, top_k as sent or None) from a raw, multipart or JSON body."""
    content_type = request.content_type.lower()
    if content_type in IMAGE_TYPES:
        return await read_body(request, limit), None
    if content_type == MULTIPART_TYPE:
        return await _read_multipart(request, limit)
    if content_type == JSON_TYPE:
        data = parse_json(await read_body(request, limit))
        if "image" not in data:
            raise InvalidInput("JSON body needs an 'image' field (base64)")
        return decode_base64(data["image"]), data.get("top_k")
    raise UnsupportedMediaType(
        f"unsupported Content-Type {content_type or 'none'}; send image/jpeg, image/png, image/webp, "
        "multipart/form-data with a 'file' field, or JSON with a base64 'image'"
    )


def parse_top_k(value: Any, classes: int, default: int = 5) -> int:
    if value is None:
        return min(default, classes)
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise InvalidInput(f"top_k must be an integer, got {value!r}") from None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= classes:
        raise InvalidInput(f"top_k must be an integer from 1 to {classes}")
    return value


def parse_texts(value: Any, field: str, limit: int) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise InvalidInput(f"'{field}' must be a string or a list of strings")
    if not texts:
        raise InvalidInput(f"'{field}' must not be an empty list")
    if len(texts) > limit:
        raise InvalidInput(f"'{field}' holds {len(texts)} texts; the limit is {limit}")
    if any(not text.strip() for text in texts):
        raise InvalidInput("text inputs must not be empty")
    return texts
