"""Predict and embeddings requests in (image bodies, texts, ``top_k``), response bodies out.

The response shapes are written down as typed dicts so the wire format is visible in one place;
they are plain dicts at run time, so building them costs nothing extra.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, NotRequired, TypedDict

from aiohttp import BodyPartReader, web

from ..errors import BadRequest, InvalidInput, UnsupportedMediaType
from ..protocol import CHUNK, JSON_TYPE, check_length, fields_require, parse_json, read_body, read_limited

IMAGE_TYPES = frozenset({"image/jpeg", "image/jpg", "image/pjpeg", "image/png", "image/webp"})
MULTIPART_TYPE = "multipart/form-data"
ENCODINGS = ("float", "base64")
# The fields each body may carry; any other is refused with 422 naming it (``fields_require``).
EMBEDDINGS_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})  # OpenAI's
TEXT_FIELDS = frozenset({"inputs", "top_k"})  # predict on a text classifier
VECTOR_FIELDS = frozenset({"inputs"})  # predict on an embedding model
IMAGE_FIELDS = frozenset({"image", "top_k"})  # predict on an image classifier, as JSON or form fields


class Prediction(TypedDict):
    label: str
    index: int
    score: float


class Timing(TypedDict):
    queue: float
    inference: float
    total: float


class PredictResponse(TypedDict):
    """``POST /v1/deployments/{name}/predict``: ``predictions`` for classifiers, ``embeddings`` otherwise."""

    deployment: str
    model_version: str
    predictions: NotRequired[list[Prediction] | list[list[Prediction]]]
    embeddings: NotRequired[list[list[float]]]
    timing_ms: NotRequired[Timing]


class EmbeddingItem(TypedDict):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str  # a base64 string of little-endian float32 when asked for


class EmbeddingsUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(TypedDict):
    """OpenAI-compatible ``POST /v1/embeddings`` answer."""

    object: Literal["list"]
    data: list[EmbeddingItem]
    model: str
    usage: EmbeddingsUsage


@dataclass(frozen=True, slots=True)
class EmbeddingsRequest:
    model: str
    input: Any  # checked against the batcher's queue limit when served (parse_texts)
    encoding_format: str
    dimensions: Any


def parse_model(data: dict[str, Any]) -> str:
    """The OpenAI ``model`` field: the name of the deployment this runner serves."""
    model = data.get("model")
    if not isinstance(model, str):
        raise InvalidInput("'model' (the deployment name) is required")
    return model


def parse_embeddings(data: dict[str, Any], model: str) -> EmbeddingsRequest:
    """The rest of an embeddings request, read once the model is known to be served here."""
    fields_require(data, EMBEDDINGS_FIELDS)
    encoding = data.get("encoding_format", "float")
    if encoding not in ENCODINGS:
        raise InvalidInput("'encoding_format' must be 'float' or 'base64'")
    if "input" not in data:
        raise InvalidInput("'input' is required (a string or a list of strings)")
    return EmbeddingsRequest(model, data["input"], encoding, data.get("dimensions"))


def parse_inputs(data: dict[str, Any], allowed: frozenset[str] = TEXT_FIELDS) -> Any:
    """The ``inputs`` field of a text predict request (checked further by ``parse_texts``)."""
    fields_require(data, allowed)
    if "inputs" not in data:
        raise InvalidInput("JSON body needs an 'inputs' field (a string or a list of strings)")
    return data["inputs"]


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
            data = await read_limited(partial(part.read_chunk, CHUNK), limit, seen)
            seen += len(data)
            if part.name == "file":
                image = data
            elif part.name == "top_k":
                top_k = data.decode("utf-8", "replace").strip()
            else:
                raise InvalidInput(f"unknown form field '{part.name}': send 'file' and optionally 'top_k'")
    except (ValueError, AssertionError, RuntimeError, UnicodeDecodeError):
        raise BadRequest("malformed multipart/form-data body") from None
    if image is None:
        raise InvalidInput("multipart body has no 'file' field")
    return image, top_k


async def read_image_request(request: web.Request, limit: int, max_depth: int) -> tuple[bytes, Any]:
    """Return (image bytes, top_k as sent or None) from a raw, multipart or JSON body."""
    content_type = request.content_type.lower()
    if content_type in IMAGE_TYPES:
        return await read_body(request, limit), None
    if content_type == MULTIPART_TYPE:
        return await _read_multipart(request, limit)
    if content_type == JSON_TYPE:
        data = parse_json(await read_body(request, limit), max_depth)
        fields_require(data, IMAGE_FIELDS)
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
