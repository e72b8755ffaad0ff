"""The runner's aiohttp app: the error/auth middleware, health routes and the app factory.

Route families live in their own packages, each split into routes (HTTP), protocol (parsing,
response shapes) and serving (logic): ``predict/`` and ``generation/``. Their shared state is
``state.State``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from contract.envelope import error_envelope
from contract.node_protocol import RUNNER_TOKEN_HEADER as TOKEN_HEADER

from .access import Caller
from .config import IMAGE_CLASSIFICATION, Manifest, RunnerConfig
from .edge import Edge
from .errors import PayloadTooLarge, RunnerError
from .generation import routes as generation_routes
from .metrics import Metrics
from .predict import routes as predict_routes
from .state import CALLER, START, STATE, State
from .usage import METER, USAGE, Meter, admit

log = logging.getLogger("lantau.runner.app")

__all__ = ["STATE", "TOKEN_HEADER", "State", "create_app"]
PUBLIC_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})
HTTP_ERROR_TYPES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
# Routes that admit the request against its key's quota themselves, once they know what to reserve
# (generation: the prompt plus max_tokens); the middleware admits every other request before its handler.
ADMITTED_BY_HANDLER = frozenset({"/v1/chat/completions", "/v1/completions"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(
    status: int, type_: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    return web.json_response(error_envelope(type_, message), status=status, headers=headers)


async def _admit(request: web.Request, state: State, caller: Caller | None, route: str) -> None:
    """Reserve room in the key's monthly quota (429 when spent) before any work; keys without one skip."""
    usage = state.edge.usage
    if caller is None or caller.key_id is None or usage is None or not caller.quota.limited:
        return
    request[METER] = Meter(usage, caller.key_id, caller.quota)
    if route not in ADMITTED_BY_HANDLER:
        await admit(request, images=1 if state.manifest.task == IMAGE_CLASSIFICATION else 0)


def _count_usage(request: web.Request, state: State, response: web.StreamResponse | None) -> None:
    """Count the request against its key: whatever the outcome once the handler noted usage (work was
    done; ``response`` None: the client went away or the handler was cancelled), otherwise only when it
    succeeded. What its admission reserved is released once that is counted."""
    caller = request.get(CALLER)
    usage = state.edge.usage
    if caller is None or caller.key_id is None or usage is None:
        return
    meter = request.get(METER)
    reservation = meter.reservation if meter is not None else None
    consumed = request.get(USAGE)
    if consumed is None and (response is None or response.status >= 400):
        usage.release(reservation)
        return
    images, tokens = consumed or (0, 0)
    usage.add(caller.key_id, images, tokens, None if caller.via_gateway else request.remote, reservation)


@web.middleware
async def guard_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Check who calls and admit it against its quota, map every failure to the error contract, count the
    request and its usage (in a ``finally``: a client that leaves mid-stream is counted too)."""
    request[START] = time.perf_counter()
    state = request.app[STATE]
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    error_type = None
    response: web.StreamResponse | None = None
    try:
        try:
            if route not in PUBLIC_ROUTES:
                caller = request[CALLER] = await state.edge.access.check(request.headers)
                await _admit(request, state, caller, route)
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
            raise  # the client went away: nothing to answer, but the finally still counts its usage
        except Exception:
            log.exception("internal error while serving %s %s", request.method, route)
            error_type = "internal_error"
            response = error_response(500, error_type, "internal error; see the runner log")
        state.metrics.observe_request(route, response.status, error_type)
        return response
    finally:
        _count_usage(request, state, response)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.ready:
        return web.json_response({"status": "ready"})
    status = "draining" if state.draining else "loading"
    return web.json_response(
        {"status": status, **error_envelope("not_ready", f"the runner is {status}")},
        status=503,
        headers={"Retry-After": "1"},
    )


async def metrics_text(request: web.Request) -> web.Response:
    body = request.app[STATE].metrics.render()
    return web.Response(text=body, content_type="text/plain", headers={"X-Content-Type-Options": "nosniff"})


def create_app(config: RunnerConfig, manifest: Manifest, metrics: Metrics) -> web.Application:
    """The runner's app, answering ``/healthz`` at once; routes serve once ``state.batcher`` is set."""
    app = web.Application(middlewares=[guard_middleware], client_max_size=config.max_body_bytes)
    state = State(config, manifest, metrics, Edge(config, manifest, metrics))
    app.cleanup_ctx.append(state.edge.lifespan)
    metrics.ready = lambda: state.ready
    metrics.queue_depth = lambda: len(state.batcher) if state.batcher is not None else 0
    app[STATE] = state
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_text)
    predict_routes.register(app)  # /v1/deployments/{name}/predict, /v1/embeddings
    generation_routes.register(app, STATE)  # /v1/chat/completions, /v1/completions
    return app
