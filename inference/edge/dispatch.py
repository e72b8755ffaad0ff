"""One request through the data plane: authenticate, find the deployment, hold its in-flight slot,
pick a replica, forward, retry once elsewhere when that is safe, answer errors in the envelope.

Hosts (the edge process, the console's ``/v1/``) give the dispatcher a route source (``get(name)``,
``names_for_team(team)``), a key checker (``authenticate``, ``enforce_rate_limit``, ``authorize``), an
in-flight counter and an upstream client; the flow is the same for both.

Scale from zero: when a deployment that autoscales down to no replica (``RouteEntry.scales_from_zero``)
has no ready replica, the request is held, the deployment asked to wake (the host's ``Waker``) and the
route re-read every ``HOLD_POLL_S`` until a replica is ready; past ``cold_start_timeout_s`` it is
answered 503 with ``Retry-After``. Held requests count as in flight, so the in-flight limits bound them.

Retries: a replica that could not be reached (nothing was sent) is replaced by another for any
request; a timeout or a 5xx only for an idempotent one (predictions, embeddings, anything not
streamed), and never once a stream has sent bytes. Timeouts answer 504, never 500.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import Any, Protocol

from redis.exceptions import RedisError

from contract.apikeys import KeyIdentity
from contract.envelope import error_envelope
from contract.node_protocol import KEY_ID_HEADER
from contract.node_protocol import RUNNER_TOKEN_HEADER as TOKEN_HEADER
from contract.quotas import QUOTA_HEADER, quota_header
from contract.routes import REGION_HEADER, RouteEntry
from inference.runner.errors import BadRequest, NotFound, RunnerError
from inference.runner.protocol import json_depth_exceeds

from .balancer import Balancer
from .errors import MethodNotAllowed, NoReplica, UpstreamTimeout
from .http import ClientGone, Reply, Request, json_body, too_large
from .limits import InFlight
from .openapi import OPENAPI_PATH, OPENAPI_V1
from .upstream import (
    SENT,
    SENT_CUT,
    SERVER_ERROR,
    TIMEOUT,
    UNREACHABLE_,
    Held,
    Upstream,
)

log = logging.getLogger("lantau.edge")
NAME_PATTERN = r"[a-z0-9][a-z0-9-]{0,62}"  # a deployment name, as the console accepts it
_PREDICT = re.compile(rf"^/v1/deployments/({NAME_PATTERN})/predict$")
_NAME = re.compile(rf"^{NAME_PATTERN}$")
_REGION = re.compile(r"^[a-z0-9-]{1,32}$")
_OPENAI = frozenset({"/v1/embeddings", "/v1/chat/completions", "/v1/completions"})
REDIS_RETRY_AFTER_S = "2"
MAX_TRIES = 4  # replicas tried per request: unreachable ones, plus one retry after a timeout or 5xx
HOLD_POLL_S = 0.1  # how often a held request looks for a ready replica (an in-memory lookup at the edge)
COLD_RETRY_AFTER_S = "5"
JSON = [("Content-Type", "application/json")]


class RouteSource(Protocol):
    async def get(self, name: str) -> RouteEntry | None: ...
    async def names_for_team(self, team_id: int) -> list[str]: ...


class KeyChecker(Protocol):
    async def authenticate(self, authorization: str | None, address: str | None = None) -> KeyIdentity: ...
    async def enforce_rate_limit(self, identity: KeyIdentity) -> None: ...
    async def authorize(self, identity: KeyIdentity, deployment: str) -> None: ...


class Waker(Protocol):
    async def wake(self, deployment: str) -> None: ...


class NoWaker:
    """A host that cannot wake deployments: held requests just wait for a replica (or the timeout)."""

    async def wake(self, deployment: str) -> None:
        return None


class Dispatcher:
    """Hosts set or override ``routes``, ``keys``, ``inflight``, ``waker``, ``cold_start_timeout_s``,
    ``max_body`` and ``max_json_depth``."""

    answerable: tuple[type[Exception], ...] = (RunnerError,)

    def __init__(
        self, *, routes: RouteSource, keys: KeyChecker, balancer: Balancer, upstream: Upstream,
        inflight: InFlight, max_body: int = 10 * 1024**2, max_json_depth: int = 32,
        waker: Waker | None = None, cold_start_timeout_s: float = 120.0,
    ) -> None:  # fmt: skip
        self.routes = routes
        self.keys = keys
        self.balancer = balancer
        self.upstream = upstream
        self.inflight = inflight
        self.max_body = max_body
        self.max_json_depth = max_json_depth
        self.waker: Waker = waker or NoWaker()
        self.cold_start_timeout_s = cold_start_timeout_s

    async def serve(self, request: Request, reply: Reply) -> None:
        """Answer ``request``; every failure becomes the error envelope (never a traceback)."""
        try:
            await self._dispatch(request, reply)
        except ClientGone:
            return
        except self.answerable as exc:
            await reply.send(exc.status, [*JSON, *exc.headers.items()], json_body(exc.as_dict()))  # type: ignore[attr-defined]
        except RedisError as exc:  # key checks need Redis: a stall or an outage is a 503 to retry
            log.warning("Redis unavailable while serving %s: %s", request.path, exc)
            body = error_envelope("unavailable", "API keys cannot be verified right now; retry shortly")
            await reply.send(503, [*JSON, ("Retry-After", REDIS_RETRY_AFTER_S)], json_body(body))
        except Exception:
            log.exception("edge error on %s", request.path)
            await reply.send(500, JSON, json_body(error_envelope("internal_error", "internal error")))

    async def _dispatch(self, request: Request, reply: Reply) -> None:
        path, method = request.path, request.method
        if path == OPENAPI_PATH:  # the contract itself is public, so clients can be generated without a key
            _allow(method, path, "GET")
            return await reply.send(200, JSON, json_body(OPENAPI_V1))
        limit = self.max_body
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large(limit)  # before any work, even the key check
        identity = await self.keys.authenticate(request.headers.get("authorization"), request.client)
        # Every authenticated route spends the key's rate limit, /v1/models too (review finding L-D), and
        # before the body is read or any route looked up: a flood of names or listings costs nothing.
        await self.keys.enforce_rate_limit(identity)
        if path == "/v1/models":
            _allow(method, path, "GET")
            names = [n for n in await self.routes.names_for_team(identity.team_id) if identity.allows(n)]
            data = [{"id": n, "object": "model", "owned_by": "lantau"} for n in names]
            return await reply.send(200, JSON, json_body({"object": "list", "data": data}))
        match = _PREDICT.match(path)
        if not (match or path in _OPENAI):
            raise NotFound(f"no such route: {method} {path}")
        _allow(method, path, "POST")
        body = await request.read_body(limit)
        name, stream = (match.group(1), False) if match else self._model_from_body(body)
        route = await self.routes.get(name)
        if route is None or route.team_id != identity.team_id:
            raise NotFound(f"deployment {name!r} not found")  # the same answer for another team's: no leak
        await self.keys.authorize(identity, route.name)  # the key's deployment list (403), quota (429)
        with self.inflight.hold(deployment=route.name, team_id=route.team_id):
            if route.scales_from_zero and not route.replicas and not route.paused:
                route = await self._hold_until_ready(route)
            await self._forward(request, reply, route, body, identity, stream)

    async def _hold_until_ready(self, route: RouteEntry) -> RouteEntry:
        """Wake the deployment and wait for a ready replica; 503 with Retry-After past the timeout."""
        try:
            await self.waker.wake(route.name)
        except Exception:  # a lost wake-up is retried by the next request; this one still waits
            log.warning("could not wake deployment %s", route.name, exc_info=True)
        deadline = time.monotonic() + self.cold_start_timeout_s
        while time.monotonic() < deadline:
            await asyncio.sleep(HOLD_POLL_S)
            current = await self.routes.get(route.name)
            if current is None or current.team_id != route.team_id:
                raise NotFound(f"deployment {route.name!r} not found")  # deleted while held
            if current.replicas or not current.scales_from_zero:
                return current
        raise NoReplica(
            f"deployment {route.name!r} is starting from zero replicas and none was ready within "
            f"{self.cold_start_timeout_s:g} s; retry shortly",
            headers={"Retry-After": COLD_RETRY_AFTER_S},
        )

    def _model_from_body(self, body: bytes) -> tuple[str, bool]:
        """The ``model`` field of an OpenAI-style body, checked to be a deployment name; and ``stream``."""
        depth = self.max_json_depth
        if json_depth_exceeds(body, depth):
            raise BadRequest(f"the JSON body nests deeper than {depth} levels")
        try:
            payload: Any = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise BadRequest("request body is not valid JSON") from None
        model = payload.get("model") if isinstance(payload, dict) else None
        if not isinstance(model, str) or not model:
            raise BadRequest("`model` (the deployment name) is required")
        if not _NAME.match(model):
            raise BadRequest(
                "`model` must be a deployment name: lowercase letters, digits and dashes, at most 63"
            )
        return model, payload.get("stream") is True

    async def _forward(
        self, request: Request, reply: Reply, route: RouteEntry, body: bytes, identity: KeyIdentity,
        stream: bool,
    ) -> None:  # fmt: skip
        if route.paused:
            raise NoReplica(f"deployment {route.name!r} is paused", headers={"Retry-After": "5"})
        region = request.headers.get(REGION_HEADER.lower())
        if region is not None and not _REGION.match(region):
            raise BadRequest(f"{REGION_HEADER} must be a region name: lowercase letters, digits and dashes")
        target = request.path + ("?" + request.query if request.query else "")
        headers = {"Content-Type": request.headers.get("content-type") or "application/octet-stream",
                   KEY_ID_HEADER: identity.key_id, TOKEN_HEADER: ""}  # fmt: skip  # the runner counts usage per key
        if identity.quota.limited:  # the runner reserves the request's room in it (inference.runner.usage)
            headers[QUOTA_HEADER] = quota_header(identity.quota)
        tried: set[int] = set()
        held: Held | None = None
        timed_out = False
        balancer = self.balancer
        while len(tried) < MAX_TRIES:
            replica = balancer.pick(route, tried, region)
            if replica is None:
                break
            tried.add(replica.id)
            headers[TOKEN_HEADER] = replica.token
            # A 5xx is held back while another try may follow: idempotent requests, once.
            may_retry = not stream and held is None and not timed_out
            balancer.inflight[replica.id] += 1
            try:
                outcome, held_now = await self.upstream.forward(
                    reply, replica, target, body, headers, hold_5xx=may_retry, stream=stream
                )
            finally:
                balancer.inflight[replica.id] -= 1
            if outcome == SENT:
                balancer.succeeded(replica.id)
                return
            balancer.failed(replica.id)
            if outcome == SENT_CUT or (outcome == SERVER_ERROR and held_now is None):
                return  # the client has its answer (or the part of a stream that came)
            if outcome == UNREACHABLE_:
                continue  # nothing reached the replica: any request may go elsewhere
            held, timed_out = held_now or held, timed_out or outcome == TIMEOUT
            if not may_retry:
                break
        if held is not None:
            return await reply.send(held.status, held.headers, held.body)
        if timed_out:
            raise UpstreamTimeout(f"deployment {route.name!r} did not answer in time; retry shortly",
                                  headers={"Retry-After": "2"})  # fmt: skip
        raise NoReplica(f"deployment {route.name!r} has no ready replica", headers={"Retry-After": "2"})


def _allow(method: str, path: str, allowed: str) -> None:
    if method != allowed:
        raise MethodNotAllowed(
            f"{method} is not allowed on {path}; use {allowed}", headers={"Allow": allowed}
        )
