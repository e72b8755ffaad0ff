"""The OpenAPI 3.1 document of the public `/v1/` contract, served at `/v1/openapi.json` without a key.

Served by the edge and by the console's `/v1/` (``inference.edge.dispatch``). It is written by hand in
one place because the data plane is a plain ASGI/aiohttp app (no framework derives it);
`tests/security/test_fuzz_api.py` checks that every gateway route appears here and fuzzes the running
gateway from this document, so a route or answer that drifts from it fails the suite.
"""

from __future__ import annotations

from typing import Any

OPENAPI_PATH = "/v1/openapi.json"
_ERROR_CODES = {
    "400": "The body is not what the route reads (bad JSON, missing `model`, bad base64, broken multipart).",
    "401": "No key, a malformed key, or an unknown or revoked one.",
    "403": "The key lacks the `inference` scope.",
    "404": "No such route, or no deployment of that name for the key's team.",
    "405": "The route exists for another method (see `Allow`).",
    "413": "The body is larger than the limit.",
    "415": "The Content-Type is not one the route reads.",
    "422": "The input is well-formed but not acceptable (not an image, wrong field type, out of range, "
    "a field the route does not take).",
    "429": "The key's rate limit is spent; retry after `Retry-After` seconds.",
    "503": "The deployment is paused, has no ready replica, or a replica is overloaded; retry after "
    "`Retry-After` seconds. A deployment scaled to zero holds the request while a replica starts and "
    "answers this only when none is ready within the cold-start timeout.",
    "504": "The replica did not answer within the upstream timeout; retry after `Retry-After` seconds.",
}
_RETRY_AFTER = {
    "Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "string"}}
}


def _error(code: str) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "description": _ERROR_CODES[code],
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    if code in ("429", "503", "504"):
        answer["headers"] = _RETRY_AFTER
    return answer


def _answers(ok: dict[str, Any], *codes: str) -> dict[str, Any]:
    return {"200": ok, **{code: _error(code) for code in codes}}


def _json(ref: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}


_POST_ERRORS = ("400", "401", "403", "404", "405", "413", "415", "422", "429", "503", "504")
_TEXTS = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
_TOP_K = {"type": "integer", "minimum": 1, "description": "How many classes to return (default 5)."}
_GENERATION_FIELDS: dict[str, Any] = {
    "model": {"type": "string", "description": "The deployment name."},
    "max_tokens": {"type": "integer", "minimum": 1},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "top_k": {"type": "integer", "minimum": 0},
    "seed": {"type": "integer", "minimum": 0},
    "stop": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 4}]},
    "stream": {"type": "boolean", "description": "Answer with Server-Sent Events ending `data: [DONE]`."},
    "stream_options": {
        "type": "object",
        "properties": {"include_usage": {"type": "boolean"}},
        "additionalProperties": False,
    },
    # Accepted at their defaults only: one choice, no log-probabilities, no penalties.
    "n": {"const": 1},
    "logprobs": {"const": False},
    "presence_penalty": {"const": 0},
    "frequency_penalty": {"const": 0},
    "user": {"type": "string", "description": "The caller's end-user id; accepted, not used."},
}
_STREAM = {
    "text/event-stream": {
        # One server-sent event: `data` holds a chunk's JSON, an error envelope, or `[DONE]`.
        "schema": {
            "type": "object",
            "required": ["data"],
            "properties": {"data": {"type": "string"}, "event": {"type": "string"}},
        },
        "description": "`data: <chunk JSON>` lines, then `data: [DONE]`; an error mid-stream is sent as "
        '`data: {"error": ...}` before the stream ends.',
    }
}

_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["type", "message"],
                "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
            }
        },
    },
    "ModelList": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "data": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "object"],
                    "properties": {
                        "id": {"type": "string"},
                        "object": {"const": "model"},
                        "owned_by": {"type": "string"},
                    },
                },
            },
        },
    },
    "Prediction": {
        "type": "object",
        "required": ["label", "index", "score"],
        "properties": {
            "label": {"type": "string"},
            "index": {"type": "integer"},
            "score": {"type": "number"},
        },
    },
    "PredictResponse": {
        "type": "object",
        "required": ["deployment", "model_version"],
        "properties": {
            "deployment": {"type": "string"},
            "model_version": {"type": "string"},
            "predictions": {
                "description": "One list per input for text classifiers, one list for an image.",
                "type": "array",
                "items": {
                    "oneOf": [
                        {"$ref": "#/components/schemas/Prediction"},
                        {"type": "array", "items": {"$ref": "#/components/schemas/Prediction"}},
                    ]
                },
            },
            "embeddings": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
            "timing_ms": {
                "type": "object",
                "properties": {
                    "queue": {"type": "number"},
                    "inference": {"type": "number"},
                    "total": {"type": "number"},
                },
            },
        },
    },
    "ImageJson": {
        "type": "object",
        "required": ["image"],
        "properties": {
            "image": {"type": "string", "description": "Base64 (or a data: URL)."},
            "top_k": _TOP_K,
        },
        "additionalProperties": False,
    },
    "TextInputs": {
        "type": "object",
        "required": ["inputs"],
        "properties": {"inputs": _TEXTS, "top_k": _TOP_K},
        "additionalProperties": False,
        "description": "`top_k` for text classifiers only.",
    },
    "EmbeddingsRequest": {
        "type": "object",
        "required": ["model", "input"],
        "properties": {
            "model": {"type": "string", "description": "The deployment name."},
            "input": _TEXTS,
            "encoding_format": {"enum": ["float", "base64"]},
            "dimensions": {"type": "integer", "minimum": 1},
            "user": {"type": "string", "description": "The caller's end-user id; accepted, not used."},
        },
        "additionalProperties": False,
    },
    "EmbeddingsResponse": {
        "type": "object",
        "required": ["object", "data", "model"],
        "properties": {
            "object": {"const": "list"},
            "model": {"type": "string"},
            "data": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["object", "index", "embedding"],
                    "properties": {
                        "object": {"const": "embedding"},
                        "index": {"type": "integer"},
                        "embedding": {
                            "oneOf": [{"type": "array", "items": {"type": "number"}}, {"type": "string"}]
                        },
                    },
                },
            },
            "usage": {"type": "object"},
        },
    },
    "ChatRequest": {
        "type": "object",
        "required": ["model", "messages"],
        "properties": {
            **_GENERATION_FIELDS,
            "max_completion_tokens": {"type": "integer", "minimum": 1},
            "messages": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["role", "content"],
                    "properties": {
                        "role": {"enum": ["system", "user", "assistant"]},
                        "content": {"type": "string"},
                        "name": {"type": "string"},
                    },
                    "additionalProperties": False,
                },
            },
        },
        "additionalProperties": False,
    },
    "CompletionRequest": {
        "type": "object",
        "required": ["model", "prompt"],
        "properties": {**_GENERATION_FIELDS, "prompt": {"type": "string"}, "echo": {"const": False}},
        "additionalProperties": False,
    },
    "Completion": {
        "type": "object",
        "required": ["id", "object", "created", "model", "choices"],
        "properties": {
            "id": {"type": "string"},
            "object": {"enum": ["chat.completion", "text_completion"]},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {"type": "array", "items": {"type": "object"}},
            "usage": {"type": "object"},
        },
    },
}


def _predict() -> dict[str, Any]:
    image = {"schema": {"type": "string", "format": "binary"}}
    return {
        "summary": "Classify an image or texts, or embed texts, with one deployment",
        "description": "Image models read a raw image body, a multipart field `file`, or JSON with a "
        "base64 `image`; text models read JSON `inputs`. `top_k` may also be a query parameter.",
        "parameters": [
            {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
            {"name": "top_k", "in": "query", "required": False, "schema": _TOP_K},
        ],
        "requestBody": {
            "required": True,
            "content": {
                "image/jpeg": image,
                "image/png": image,
                "image/webp": image,
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["file"],
                        "properties": {"file": {"type": "string", "format": "binary"}, "top_k": _TOP_K},
                    }
                },
                "application/json": {
                    "schema": {
                        "oneOf": [
                            {"$ref": "#/components/schemas/ImageJson"},
                            {"$ref": "#/components/schemas/TextInputs"},
                        ]
                    }
                },
            },
        },
        "responses": _answers(
            {"description": "The answer.", "content": _json("PredictResponse")}, *_POST_ERRORS
        ),
    }


def _generation(summary: str, request: str) -> dict[str, Any]:
    ok = {
        "description": "The completion, or a stream of chunks.",
        "content": {**_json("Completion"), **_STREAM},
    }
    return {
        "summary": summary,
        "requestBody": {"required": True, "content": _json(request)},
        "responses": _answers(ok, *_POST_ERRORS),
    }


OPENAPI_V1: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "Lantau inference API",
        "version": "1",
        "description": "The public `/v1/` contract: predictions, OpenAI-compatible chat, completions and "
        'embeddings. Every answer other than 200 is `{"error": {"type", "message"}}`.',
    },
    "security": [{"bearer": []}],
    "paths": {
        OPENAPI_PATH: {
            "get": {
                "summary": "This document",
                "security": [],
                "responses": {
                    "200": {"description": "The OpenAPI document.", "content": {"application/json": {}}}
                },
            }
        },
        "/v1/models": {
            "get": {
                "summary": "The deployments this key may call",
                "responses": _answers(
                    {"description": "OpenAI-style list.", "content": _json("ModelList")}, "401", "403", "405"
                ),
            }
        },
        "/v1/deployments/{name}/predict": {"post": _predict()},
        "/v1/chat/completions": {"post": _generation("OpenAI-compatible chat completion", "ChatRequest")},
        "/v1/completions": {"post": _generation("OpenAI-compatible text completion", "CompletionRequest")},
        "/v1/embeddings": {
            "post": {
                "summary": "OpenAI-compatible embeddings",
                "requestBody": {"required": True, "content": _json("EmbeddingsRequest")},
                "responses": _answers(
                    {"description": "One vector per input.", "content": _json("EmbeddingsResponse")},
                    *_POST_ERRORS,
                ),
            }
        },
    },
    "components": {
        "schemas": _SCHEMAS,
        "securitySchemes": {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "An API key with the `inference` scope: `Authorization: Bearer lt_...`.",
            }
        },
    },
}
