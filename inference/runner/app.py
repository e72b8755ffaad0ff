"""HTTP routes and the error/auth middleware. Routes only translate HTTP to pipeline calls."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import web

from .access import TOKEN_HEADER, Caller
from .batcher import Batcher, BatchResult
from .config import FEATURE_EXTRACTION, TEXT_CLASSIFICATION, Manifest, RunnerConfig, preprocess_pool_size
from .edge import Edge
from .errors import InvalidInput, NotFound, NotReady, PayloadTooLarge, RunnerError
from .generation import routes as generation_routes
from .metrics import Metrics
from .postprocess import top_k
from .protocol import parse_texts, parse_top_k, read_image_request, read_json
from .usage import USAGE, record_usage

log = logging.getLogger("lantau.runner.app")

__all__ = ["STATE", "TOKEN_HEADER", "State", "create_app"]
PUBLIC_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})
HTTP_ERROR_TYPES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Typed request storage keys (aiohttp >= 3.14); plain strings on older releases.
if hasattr(web, "RequestKey"):
    START: Any = web.RequestKey("lantau_start", float)
    TIMING: Any = web.RequestKey("lantau_timing", list)
    CALLER: Any = web.RequestKey("lantau_caller", Caller)
else:  # pragma: no cover
    START, TIMING, CALLER = "lantau_start", "lantau_timing", "lantau_caller"


@dataclass
class State:
    """Everything the routes need; ``pipeline`` and ``batcher`` are set once warm-up is done."""

    config: RunnerConfig
    manifest: Manifest
    metrics: Metrics
    edge: Edge
    preprocess_pool: ThreadPoolExecutor = field(init=False)
    pipeline: Any = None
    batcher: Batcher | None = None
    draining: bool = False

    def __post_init__(self) -> None:
        self.preprocess_pool = ThreadPoolExecutor(
            preprocess_pool_size(self.config.preprocess_threads), thread_name_prefix="lantau-preprocess"
        )

    @property
    def ready(self) -> bool:
        return self.batcher is not None and not self.draining

    def serving(self) -> tuple[Any, Batcher]:
        if not self.ready:
            raise NotReady("the runner is shutting down" if self.draining else "the model is still loading")
        assert self.batcher is not None
        return self.pipeline, self.batcher

    async def preprocess(self, func: Callable[[Any], Any], value: Any, count: int = 1) -> Any:
        """Run ``func(value)`` in the pre-processing pool; the batcher knows ``count`` items are coming."""
        _, batcher = self.serving()
        started = time.perf_counter()
        with batcher.incoming(count):
            result = await asyncio.get_running_loop().run_in_executor(self.preprocess_pool, func, value)
        self.metrics.observe_preprocess(time.perf_counter() - started)
        return result

    async def infer(self, request: web.Request, items: Sequence[Any]) -> list[BatchResult]:
        _, batcher = self.serving()
        futures = batcher.submit(items)
        # Cancelling the handler (client gone) cancels the queued futures, so the batcher skips them.
        results = [await futures[0]] if len(futures) == 1 else list(await asyncio.gather(*futures))
        total = time.perf_counter() - request[START]
        self.metrics.observe_latency(
            max(r.queue_s for r in results), max(r.inference_s for r in results), total
        )
        request[TIMING] = results
        return results


STATE = web.AppKey("lantau_state", State)


def error_response(
    status: int, type_: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    return web.json_response({"error": {"type": type_, "message": message}}, status=status, headers=headers)


def _timing(request: web.Request) -> dict[str, float]:
    results: list[BatchResult] = request[TIMING]
    total = time.perf_counter() - request[START]
    queue = max(r.queue_s for r in results)
    inference = max(r.inference_s for r in results)
    return {
        "queue": round(queue * 1000, 3),
        "inference": round(inference * 1000, 3),
        "total": round(total * 1000, 3),
    }


def _count_usage(request: web.Request, state: State, response: web.StreamResponse) -> None:
    caller = request.get(CALLER)
    usage = state.edge.usage
    if caller is not None and caller.key_id is not None and usage is not None and response.status < 400:
        images, tokens = request.get(USAGE, (0, 0))
        usage.add(caller.key_id, images, tokens)


@web.middleware
async def guard_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Check who calls, map every failure to the error contract, count the request and its usage."""
    request[START] = time.perf_counter()
    state = request.app[STATE]
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    error_type = None
    try:
        if route not in PUBLIC_ROUTES:
            request[CALLER] = await state.edge.access.check(request.headers)
        response = await handler(request)
    except RunnerError as exc:
        error_type = exc.type
        response = error_response(exc.status, exc.type, exc.message, exc.headers)
        if isinstance(exc, PayloadTooLarge):
            response.force_close()  # do not drain an oversized upload just to keep the connection
    except web.HTTPException as exc:
        error_type = HTTP_ERROR_TYPES.get(exc.status, "http_error")
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        response = error_response(exc.status, error_type, exc.reason, headers)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("internal error while serving %s %s", request.method, route)
        error_type = "internal_error"
        response = error_response(500, error_type, "internal error; see the runner log")
    state.metrics.observe_request(route, response.status, error_type)
    _count_usage(request, state, response)
    return response


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.ready:
        return web.json_response({"status": "ready"})
    status = "draining" if state.draining else "loading"
    return web.json_response(
        {"status": status, "error": {"type": "not_ready", "message": f"the runner is {status}"}},
        status=503,
        headers={"Retry-After": "1"},
    )


async def metrics_text(request: web.Request) -> web.Response:
    body = request.app[STATE].metrics.render()
    return web.Response(text=body, content_type="text/plain", headers={"X-Content-Type-Options": "nosniff"})


async def predict(request: web.Request) -> web.Response:
    state = request.app[STATE]
    name = request.match_info["name"]
    if name != state.manifest.deployment:
        raise NotFound(f"this runner does not serve deployment {name!r}")
    pipeline, _ = state.serving()
    if state.manifest.task == FEATURE_EXTRACTION:
        data = await read_json(request, state.config.max_body_bytes)
        if "inputs" not in data:
            raise InvalidInput("JSON body needs an 'inputs' field (a string or a list of strings)")
        vectors, _ = await _embed(request, state, data["inputs"], "inputs")
        return _answer(request, state, embeddings=[v.tolist() for v in vectors])
    if state.manifest.task == TEXT_CLASSIFICATION:
        return await _classify_texts(request, state, pipeline)
    image, requested_k = await read_image_request(request, state.config.max_body_bytes)
    k = parse_top_k(
        requested_k if requested_k is not None else request.query.get("top_k"), len(pipeline.labels)
    )
    array = await state.preprocess(pipeline.prepare, image)
    scores = (await state.infer(request, [array]))[0].value
    record_usage(request, images=1)
    labels = pipeline.labels
    predictions = [{"label": labels[i], "index": i, "score": score} for i, score in top_k(scores, k)]
    return _answer(request, state, predictions=predictions)


async def _classify_texts(request: web.Request, state: State, pipeline: Any) -> web.Response:
    """JSON ``{"inputs": "text" | ["text", ...], "top_k": 5}`` -> ``predictions``: one ranked list per input."""
    data = await read_json(request, state.config.max_body_bytes)
    if "inputs" not in data:
        raise InvalidInput("JSON body needs an 'inputs' field (a string or a list of strings)")
    k = parse_top_k(data.get("top_k", request.query.get("top_k")), len(pipeline.labels))
    scores, _ = await _embed(request, state, data["inputs"], "inputs")
    labels = pipeline.labels
    ranked = [[{"label": labels[i], "index": i, "score": s} for i, s in top_k(row, k)] for row in scores]
    return _answer(request, state, predictions=ranked)


def _answer(request: web.Request, state: State, **payload: Any) -> web.Response:
    body = {"deployment": state.manifest.deployment, "model_version": state.manifest.model_version}
    body.update(payload)
    body["timing_ms"] = _timing(request)
    return web.json_response(body)


async def _embed(
    request: web.Request, state: State, value: Any, field_name: str
) -> tuple[list[np.ndarray], int]:
    pipeline, batcher = state.serving()
    texts = parse_texts(value, field_name, batcher.max_queue)
    encoded = await state.preprocess(pipeline.prepare, texts, len(texts))
    results = await state.infer(request, encoded)
    tokens = sum(len(e) for e in encoded)
    record_usage(request, tokens=tokens)
    return [r.value for r in results], tokens


async def embeddings(request: web.Request) -> web.Response:
    """OpenAI-compatible ``POST /v1/embeddings``; ``model`` is the deployment name."""
    state = request.app[STATE]
    data = await read_json(request, state.config.max_body_bytes)
    model = data.get("model")
    if not isinstance(model, str):
        raise InvalidInput("'model' (the deployment name) is required")
    if model != state.manifest.deployment:
        raise NotFound(f"this runner does not serve model {model!r}")
    if state.manifest.task != FEATURE_EXTRACTION:
        raise NotFound(f"model {model!r} is an {state.manifest.task} model and does not serve embeddings")
    encoding = data.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise InvalidInput("'encoding_format' must be 'float' or 'base64'")
    if "input" not in data:
        raise InvalidInput("'input' is required (a string or a list of strings)")
    pipeline, _ = state.serving()
    dimensions = data.get("dimensions")
    if dimensions is not None and dimensions != pipeline.dimensions:
        raise InvalidInput(f"this model only produces {pipeline.dimensions} dimensions")
    vectors, tokens = await _embed(request, state, data["input"], "input")
    items = [
        {"object": "embedding", "index": i, "embedding": _encode_vector(vector, encoding)}
        for i, vector in enumerate(vectors)
    ]
    return web.json_response(
        {
            "object": "list",
            "data": items,
            "model": state.manifest.deployment,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


def _encode_vector(vector: np.ndarray, encoding: str) -> Any:
    if encoding == "base64":  # what the official OpenAI clients request by default
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def create_app(config: RunnerConfig, manifest: Manifest, metrics: Metrics) -> web.Application:
    app = web.Application(middlewares=[guard_middleware], client_max_size=config.max_body_bytes)
    state = State(config, manifest, metrics, Edge(config, manifest, metrics))
    app.cleanup_ctx.append(state.edge.lifespan)
    metrics.ready = lambda: state.ready
    metrics.queue_depth = lambda: len(state.batcher) if state.batcher is not None else 0
    app[STATE] = state
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_text)
    app.router.add_post("/v1/deployments/{name}/predict", predict)
    app.router.add_post("/v1/embeddings", embeddings)
    generation_routes.register(app, STATE)  # /v1/chat/completions, /v1/completions
    return app
