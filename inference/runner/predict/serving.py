"""Serving logic for predict and embeddings: parsed values in, pre-process, batch, rank or encode.

Routes (``routes.py``) read HTTP and hand over parsed values; nothing here reads a body.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import numpy as np
from aiohttp import web

from ..batcher import BatchResult
from ..config import FEATURE_EXTRACTION, TEXT_GENERATION
from ..errors import InvalidInput, NotFound
from ..pipelines import FeatureExtraction, ImageClassification, TextClassification
from ..postprocess import top_k
from ..state import START, TIMING, State
from ..usage import record_usage
from .protocol import (
    EmbeddingItem,
    EmbeddingsRequest,
    EmbeddingsResponse,
    Prediction,
    PredictResponse,
    Timing,
    parse_texts,
    parse_top_k,
)


def pipeline_for(state: State, name: str) -> Any:
    """The pipeline serving deployment ``name``: 404 for another deployment, 503 until warm."""
    if name != state.manifest.deployment:
        raise NotFound(f"this runner does not serve deployment {name!r}")
    if state.manifest.task == TEXT_GENERATION:  # its pipeline has no labels or encoder to predict with
        raise NotFound(f"{name!r} is a text-generation model: use /v1/chat/completions or /v1/completions")
    pipeline, _ = state.serving()
    return pipeline


def check_embeddings_model(state: State, model: str) -> None:
    if model != state.manifest.deployment:
        raise NotFound(f"this runner does not serve model {model!r}")
    if state.manifest.task != FEATURE_EXTRACTION:
        raise NotFound(f"model {model!r} is an {state.manifest.task} model and does not serve embeddings")


async def classify_image(
    request: web.Request, state: State, image: bytes, requested_k: Any
) -> PredictResponse:
    """One image's ``top_k`` best labels; ``requested_k`` is as sent (body, form or query) or None."""
    pipeline: ImageClassification = state.pipeline
    k = parse_top_k(requested_k, len(pipeline.labels))
    array = await state.preprocess(pipeline.prepare, image)
    scores = (await state.infer(request, [array]))[0].value
    record_usage(request, images=1)
    labels = pipeline.labels
    predictions: list[Prediction] = [
        {"label": labels[i], "index": i, "score": score} for i, score in top_k(scores, k)
    ]
    return _answer(request, state, predictions=predictions)


async def classify_texts(
    request: web.Request, state: State, inputs: Any, requested_k: Any
) -> PredictResponse:
    """One ranked list of labels per input text."""
    pipeline: TextClassification = state.pipeline
    k = parse_top_k(requested_k, len(pipeline.labels))
    scores, _ = await embed(request, state, inputs, "inputs")
    labels = pipeline.labels
    ranked: list[list[Prediction]] = [
        [{"label": labels[i], "index": i, "score": s} for i, s in top_k(row, k)] for row in scores
    ]
    return _answer(request, state, predictions=ranked)


async def embed_inputs(request: web.Request, state: State, inputs: Any) -> PredictResponse:
    """One vector per input text, in the predict answer's shape."""
    vectors, _ = await embed(request, state, inputs, "inputs")
    return _answer(request, state, embeddings=[v.tolist() for v in vectors])


async def embed(
    request: web.Request, state: State, value: Any, field_name: str
) -> tuple[list[np.ndarray], int]:
    """Tokenize ``value`` (a text or a list), run it through the batcher; return (rows, token count)."""
    pipeline, batcher = state.serving()
    texts = parse_texts(value, field_name, min(batcher.max_queue, state.config.limits.inputs))
    encoded = await state.preprocess(pipeline.prepare, texts, len(texts))
    results = await state.infer(request, encoded)
    tokens = sum(len(e) for e in encoded)
    record_usage(request, tokens=tokens)
    return [r.value for r in results], tokens


async def embeddings(request: web.Request, state: State, parsed: EmbeddingsRequest) -> EmbeddingsResponse:
    """OpenAI-compatible embeddings for a request whose model was checked by ``check_embeddings_model``."""
    pipeline: FeatureExtraction
    pipeline, _ = state.serving()
    if parsed.dimensions is not None and parsed.dimensions != pipeline.dimensions:
        raise InvalidInput(f"this model only produces {pipeline.dimensions} dimensions")
    vectors, tokens = await embed(request, state, parsed.input, "input")
    items: list[EmbeddingItem] = [
        {"object": "embedding", "index": i, "embedding": _encode_vector(vector, parsed.encoding_format)}
        for i, vector in enumerate(vectors)
    ]
    return {
        "object": "list",
        "data": items,
        "model": state.manifest.deployment,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _answer(
    request: web.Request,
    state: State,
    *,
    predictions: list[Prediction] | list[list[Prediction]] | None = None,
    embeddings: list[list[float]] | None = None,
) -> PredictResponse:
    body: PredictResponse = {
        "deployment": state.manifest.deployment,
        "model_version": state.manifest.model_version,
    }
    if predictions is not None:
        body["predictions"] = predictions
    if embeddings is not None:
        body["embeddings"] = embeddings
    body["timing_ms"] = _timing(request)
    return body


def _timing(request: web.Request) -> Timing:
    results: list[BatchResult] = request[TIMING]
    total = time.perf_counter() - request[START]
    queue = max(r.queue_s for r in results)
    inference = max(r.inference_s for r in results)
    return {
        "queue": round(queue * 1000, 3),
        "inference": round(inference * 1000, 3),
        "total": round(total * 1000, 3),
    }


def _encode_vector(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":  # what the official OpenAI clients request by default
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    values: list[float] = vector.tolist()
    return values
