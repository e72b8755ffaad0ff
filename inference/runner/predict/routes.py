"""HTTP routes ``POST /v1/deployments/{name}/predict`` and ``POST /v1/embeddings`` (OpenAI-compatible).

Routes only translate HTTP: read the body (protocol), hand parsed values to the serving logic
(serving), answer JSON. Errors are raised as ``RunnerError`` and turned into the error contract by
the app's middleware.
"""

from __future__ import annotations

from aiohttp import web

from ..config import FEATURE_EXTRACTION, TEXT_CLASSIFICATION
from ..protocol import read_json
from ..state import STATE
from . import serving
from .protocol import VECTOR_FIELDS, parse_embeddings, parse_inputs, parse_model, read_image_request


async def predict(request: web.Request) -> web.Response:
    """An image (raw, multipart or base64 JSON) to classify, or JSON ``inputs`` to classify or embed."""
    state = request.app[STATE]
    serving.pipeline_for(state, request.match_info["name"])
    limit, depth = state.config.max_body_bytes, state.config.limits.json_depth
    if state.manifest.task == FEATURE_EXTRACTION:
        data = await read_json(request, limit, depth)
        return web.json_response(
            await serving.embed_inputs(request, state, parse_inputs(data, VECTOR_FIELDS))
        )
    if state.manifest.task == TEXT_CLASSIFICATION:
        data = await read_json(request, limit, depth)
        inputs = parse_inputs(data)
        requested_k = data.get("top_k", request.query.get("top_k"))
        return web.json_response(await serving.classify_texts(request, state, inputs, requested_k))
    image, requested_k = await read_image_request(request, limit, depth)
    if requested_k is None:
        requested_k = request.query.get("top_k")
    return web.json_response(await serving.classify_image(request, state, image, requested_k))


async def embeddings(request: web.Request) -> web.Response:
    """OpenAI-compatible ``POST /v1/embeddings``; ``model`` is the deployment name."""
    state = request.app[STATE]
    data = await read_json(request, state.config.max_body_bytes, state.config.limits.json_depth)
    model = parse_model(data)
    serving.check_embeddings_model(state, model)
    parsed = parse_embeddings(data, model)
    return web.json_response(await serving.embeddings(request, state, parsed))


def register(app: web.Application) -> None:
    """Add the predict and embeddings routes to the runner's app."""
    app.router.add_post("/v1/deployments/{name}/predict", predict)
    app.router.add_post("/v1/embeddings", embeddings)
