"""The `/v1/` ASGI app: authenticate the key, find the deployment, forward to a replica, stream back."""

from __future__ import annotations

import json
import logging
import re

from django.conf import settings

from contract.apikeys import KeyIdentity
from contract.envelope import error_envelope
from core.errors import ApplicationError, BadRequest, NotFound, Unavailable
from inference.gateway import upstream
from inference.gateway.auth import authenticate, enforce_rate_limit
from inference.gateway.http import ClientGone, header, read_body, send_error, send_json
from inference.gateway.routing import Endpoint, Route, RouteTable

log = logging.getLogger("lantau.gateway")
_PREDICT = re.compile(r"^/v1/deployments/([a-z0-9][a-z0-9-]{0,62})/predict$")
_OPENAI = {"/v1/embeddings", "/v1/chat/completions", "/v1/completions"}

routes = RouteTable()


class MethodNotAllowed(ApplicationError):
    status, type = 405, "method_not_allowed"


async def gateway_app(scope, receive, send) -> None:
    try:
        await _dispatch(scope, receive, send)
    except ClientGone:
        return
    except ApplicationError as exc:
        await send_error(send, exc)
    except Exception:
        log.exception("gateway error on %s", scope.get("path"))
        await send_json(send, 500, error_envelope("internal_error", "internal error"))


async def _dispatch(scope, receive, send) -> None:
    path, method = scope["path"], scope["method"]
    identity = await authenticate(header(scope, b"authorization"))
    if path == "/v1/models":
        if method != "GET":
            raise MethodNotAllowed(f"{method} is not allowed on {path}; use GET", headers={"Allow": "GET"})
        names = await routes.names_for_team(identity.team_id)
        data = [{"id": n, "object": "model", "owned_by": "lantau"} for n in names]
        return await send_json(send, 200, {"object": "list", "data": data})
    match = _PREDICT.match(path)
    if not (match or path in _OPENAI):
        raise NotFound(f"no such route: {method} {path}")
    if method != "POST":
        raise MethodNotAllowed(f"{method} is not allowed on {path}; use POST", headers={"Allow": "POST"})
    body = await read_body(scope, receive, limit=settings.MAX_PREDICT_BYTES)
    name = match.group(1) if match else _model_from_body(body)
    route = await routes.get(name)
    if route is None or route.team_id != identity.team_id:
        raise NotFound(f"deployment {name!r} not found")  # the same answer for another team's: no leak
    await enforce_rate_limit(identity)
    await _forward(scope, send, route, path, body, identity)


def _model_from_body(body: bytes) -> str:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("request body is not valid JSON") from None
    model = payload.get("model") if isinstance(payload, dict) else None
    if not isinstance(model, str) or not model:
        raise BadRequest("`model` (the deployment name) is required")
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
