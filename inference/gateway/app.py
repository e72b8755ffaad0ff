"""The `/v1/` ASGI app: authenticate the key, find the deployment, forward to a replica, stream back."""

from __future__ import annotations

import json
import logging
import re

from django.conf import settings
from redis.exceptions import RedisError

from contract.apikeys import KeyIdentity
from contract.envelope import error_envelope
from core.errors import ApplicationError, BadRequest, NotFound, Unavailable
from inference.gateway import upstream
from inference.gateway.auth import authenticate, authorize, enforce_rate_limit
from inference.gateway.http import ClientGone, check_declared_length, header, read_body, send_error, send_json
from inference.gateway.limits import InFlight
from inference.gateway.openapi import OPENAPI_PATH, OPENAPI_V1
from inference.gateway.routing import NAME_PATTERN, Endpoint, Route, RouteTable
from inference.runner.protocol import json_depth_exceeds

log = logging.getLogger("lantau.gateway")
_PREDICT = re.compile(rf"^/v1/deployments/({NAME_PATTERN})/predict$")
_NAME = re.compile(rf"^{NAME_PATTERN}$")
_OPENAI = {"/v1/embeddings", "/v1/chat/completions", "/v1/completions"}
REDIS_RETRY_AFTER_S = "2"

routes = RouteTable()
inflight = InFlight()


class MethodNotAllowed(ApplicationError):
    status, type = 405, "method_not_allowed"


async def gateway_app(scope, receive, send) -> None:
    try:
        await _dispatch(scope, receive, send)
    except ClientGone:
        return
    except ApplicationError as exc:
        await send_error(send, exc)
    except RedisError as exc:  # key lookups need Redis: a stall or outage is a 503 to retry, never a 500
        log.warning("Redis unavailable while serving %s: %s", scope.get("path"), exc)
        unavailable = Unavailable("API keys cannot be verified right now; retry shortly")
        await send_json(send, 503, unavailable.as_dict(), {"Retry-After": REDIS_RETRY_AFTER_S})
    except Exception:
        log.exception("gateway error on %s", scope.get("path"))
        await send_json(send, 500, error_envelope("internal_error", "internal error"))


async def _dispatch(scope, receive, send) -> None:
    path, method = scope["path"], scope["method"]
    if path == OPENAPI_PATH:  # the contract itself is public, so clients can be generated without a key
        if method != "GET":
            raise MethodNotAllowed(f"{method} is not allowed on {path}; use GET", headers={"Allow": "GET"})
        return await send_json(send, 200, OPENAPI_V1)
    check_declared_length(scope, limit=settings.MAX_PREDICT_BYTES)  # before any work, even the key check
    identity = await authenticate(header(scope, b"authorization"), (scope.get("client") or (None,))[0])
    if path == "/v1/models":
        if method != "GET":
            raise MethodNotAllowed(f"{method} is not allowed on {path}; use GET", headers={"Allow": "GET"})
        names = [n for n in await routes.names_for_team(identity.team_id) if identity.allows(n)]
        data = [{"id": n, "object": "model", "owned_by": "lantau"} for n in names]
        return await send_json(send, 200, {"object": "list", "data": data})
    match = _PREDICT.match(path)
    if not (match or path in _OPENAI):
        raise NotFound(f"no such route: {method} {path}")
    if method != "POST":
        raise MethodNotAllowed(f"{method} is not allowed on {path}; use POST", headers={"Allow": "POST"})
    body = await read_body(scope, receive, limit=settings.MAX_PREDICT_BYTES)
    name = match.group(1) if match else _model_from_body(body)
    await enforce_rate_limit(identity)  # before the lookup: a flood of names costs no database query
    route = await routes.get(name)
    if route is None or route.team_id != identity.team_id:
        raise NotFound(f"deployment {name!r} not found")  # the same answer for another team's: no leak
    await authorize(identity, route.name)  # the key's deployment list (403) and monthly quota (429)
    with inflight.hold(deployment=route.name, team_id=route.team_id):
        await _forward(scope, send, route, path, body, identity)


def _model_from_body(body: bytes) -> str:
    """The ``model`` field of an OpenAI-style body, checked to be a deployment name before any lookup."""
    depth = settings.MAX_JSON_DEPTH
    if json_depth_exceeds(body, depth):
        raise BadRequest(f"the JSON body nests deeper than {depth} levels")
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadRequest("request body is not valid JSON") from None
    model = payload.get("model") if isinstance(payload, dict) else None
    if not isinstance(model, str) or not model:
        raise BadRequest("`model` (the deployment name) is required")
    if not _NAME.match(model):
        raise BadRequest(
            "`model` must be a deployment name: lowercase letters, digits and dashes, at most 63"
        )
    return model


async def _forward(scope, send, route: Route, path: str, body: bytes, identity: KeyIdentity) -> None:
    if route.paused:
        raise Unavailable(f"deployment {route.name!r} is paused", headers={"Retry-After": "5"})
    tried: set[int] = set()
    for _attempt in range(2):  # one retry elsewhere: predictions and embeddings are idempotent
        endpoint = routes.pick(route, tried)
        if endpoint is None:
            break
        tried.add(endpoint.replica_id)
        if await _try_endpoint(scope, send, endpoint, path, body, identity):
            return
    raise Unavailable(f"deployment {route.name!r} has no ready replica", headers={"Retry-After": "2"})


async def _try_endpoint(
    scope, send, endpoint: Endpoint, path: str, body: bytes, identity: KeyIdentity
) -> bool:
    """Send to one replica. False if it could not be reached (nothing was sent to the client yet)."""
    query = scope.get("query_string", b"").decode("latin-1")
    url = endpoint.url + path + (f"?{query}" if query else "")
    headers = {
        "Content-Type": header(scope, b"content-type") or "application/octet-stream",
        "X-Lantau-Runner-Token": endpoint.token,
        "X-Lantau-Key-Id": identity.key_id,
    }  # the runner counts usage per key
    routes.inflight[endpoint.replica_id] += 1
    try:
        outcome = await upstream.forward(send, url, body, headers)
    finally:
        routes.inflight[endpoint.replica_id] -= 1
    if outcome != "ok":  # unreachable, or died mid-answer: keep it out of rotation for a while
        routes.mark_suspect(endpoint)
    return outcome != "unreachable"
