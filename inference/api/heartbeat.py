"""The node agents' heartbeat, served before Django (``console.asgi``): ``POST /api/v1/nodes/heartbeat``.

A fleet of 200 agents beating every 2 s is 100 requests a second. Through Django under daphne each
one ran in a thread of its own (asgiref's executor) with a PostgreSQL connection of its own, opened
and closed per request, behind the whole middleware stack and ninja: at 200 agents the console
answered about a quarter of them (docs/performance.md, "Fleet"). Here a heartbeat is read by the
event loop and run by a small pool of threads that keep their connections (``CONN_MAX_AGE``):

- the body is read here (at most ``MAX_BODY_BYTES``, else 413) and handed to
  ``inference.api.nodes.heartbeat_answer``, the same checks and answer as the ninja view (credential
  first, then the body; one indexed read authenticates, so a removed node or a rotated credential is
  refused at its next heartbeat), and ``inference.services.nodes.node_heartbeat`` (liveness in Redis,
  PostgreSQL written only on change);
- at most ``HEARTBEAT_THREADS`` heartbeats use PostgreSQL at once, on connections they keep; the rest
  wait for a thread, not for a connection, so people's pages keep theirs;
- a flood cannot delay real heartbeats (review M-E): before its body is read, a heartbeat needs a
  well-formed node credential (401 otherwise), and a credential that did not authenticate recently
  (``KnownCredentials``) spends a global budget of ``LANTAU_HEARTBEAT_UNKNOWN_PER_S`` database checks a
  second (503 with ``Retry-After`` beyond it: a real new node beats again in two seconds); at most
  ``HEARTBEAT_MAX_WAITING`` heartbeats wait for a thread (503 beyond);
- errors keep the project's envelope (``{"error": {"type", "message"}}``) with the statuses the
  management API gives: 401, 400, 409, 413, 422, 503 when the database is unreachable, 500 otherwise.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import (
    DatabaseError,
    DataError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
)

from contract.apikeys import bearer_token
from contract.envelope import error_envelope
from core.errors import ApplicationError, PayloadTooLarge, Unauthorized, Unavailable, ValidationFailed
from inference.api.nodes import HEARTBEAT_UNAUTHORIZED, heartbeat_answer
from inference.credentials import token_hash

log = logging.getLogger("lantau.nodes")
PATH = "/api/v1/nodes/heartbeat"
# Most of a heartbeat's time is spent waiting for PostgreSQL and Redis, so threads overlap those
# waits; each keeps one connection, well under max_connections (100 by default).
HEARTBEAT_THREADS = 8
MAX_BODY_BYTES = 1024 * 1024  # an inventory and a few dozen replica reports take a few KiB
CONNECTION_CHECK_S = 10.0  # how often a pool thread lets Django drop an old or broken connection
# The headers Django's middleware puts on every answer (SecurityMiddleware, X-Frame-Options, CSP).
_HEADERS = [
    (b"content-type", b"application/json"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
]

HEARTBEAT_MAX_WAITING = 256  # heartbeats admitted but not yet on a thread: 200 agents' worth and more
NODE_CREDENTIAL = re.compile(r"ltn_[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32) after the prefix
KNOWN_MAX = 100_000

_pool = ThreadPoolExecutor(max_workers=HEARTBEAT_THREADS, thread_name_prefix="heartbeat")
_local = threading.local()


class KnownCredentials:
    """Digests of node credentials that authenticated recently (a bounded LRU), and the budget of
    database checks a second for the others: a flood of made-up credentials costs no thread and no
    query beyond the budget, so real heartbeats keep theirs (review M-E)."""

    def __init__(self) -> None:
        self.digests: OrderedDict[str, None] = OrderedDict()
        self.tokens: float | None = None  # full at the first heartbeat: a fleet reconnecting after a restart
        self.refilled = time.monotonic()
        self.waiting = 0  # admitted, not yet answered
        self.refused_unknown = 0  # counted for the tests and the logs

    def admit(self, digest: str) -> bool:
        if digest in self.digests:
            self.digests.move_to_end(digest)
            return True
        now = time.monotonic()
        rate = float(settings.HEARTBEAT_UNKNOWN_PER_S)
        burst = 4 * rate  # four seconds' worth: 200 agents reconnecting at once with the default
        self.tokens = burst if self.tokens is None else min(burst, self.tokens + (now - self.refilled) * rate)
        self.refilled = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.refused_unknown += 1
        return False

    def authenticated(self, digest: str) -> None:
        self.digests[digest] = None
        self.digests.move_to_end(digest)
        while len(self.digests) > KNOWN_MAX:
            self.digests.popitem(last=False)

    def refused(self, digest: str) -> None:
        self.digests.pop(digest, None)  # removed or rotated: it pays the budget again


known = KnownCredentials()
BUSY = Unavailable(
    "the console is busy answering heartbeats; beat again shortly", headers={"Retry-After": "1"}
)


def handles(scope: dict) -> bool:
    return scope["path"] == PATH and scope.get("method") == "POST"


def _in_thread(token: str | None, body: bytes) -> dict:
    """One heartbeat on a pool thread, on the thread's own long-lived connection."""
    now = time.monotonic()
    if now - getattr(_local, "checked", 0.0) >= CONNECTION_CHECK_S:
        close_old_connections()  # what Django does around each request: age and health of the connection
        _local.checked = now
    try:
        return heartbeat_answer(token, body)
    except DatabaseError:
        connection.close()  # never reuse a connection in an unknown state
        raise


async def app(scope: dict, receive, send) -> None:
    """The ASGI application for ``POST PATH`` (``console.asgi`` routes it here)."""
    token = None
    for key, value in scope.get("headers", ()):
        if key == b"authorization":
            token = bearer_token(value.decode("latin-1"))
    refusal = _admission(token)
    if refusal is not None:  # decided before the body is read, without a thread or a query
        await _send(send, refusal.status, refusal.as_dict(), refusal.headers)
        return
    assert token is not None
    digest = token_hash(token)
    known.waiting += 1
    try:
        try:
            body = await _read_body(receive)
        except ApplicationError as exc:
            await _send(send, exc.status, exc.as_dict(), exc.headers)
            return
        except ConnectionAbortedError:  # the agent went away mid-body: nobody to answer
            return
        try:
            answer = await asyncio.get_running_loop().run_in_executor(_pool, _in_thread, token, body)
        except Exception as exc:  # noqa: BLE001 - every failure is answered in the envelope
            if isinstance(exc, Unauthorized):
                known.refused(digest)
            status, payload, headers = _failure(exc)
            await _send(send, status, payload, headers)
            return
        known.authenticated(digest)
        await _send(send, 200, answer)
    finally:
        known.waiting -= 1


def _admission(token: str | None) -> ApplicationError | None:
    """Why this heartbeat is refused before anything is read, or None to go on."""
    if not token or not NODE_CREDENTIAL.fullmatch(token):
        return Unauthorized(HEARTBEAT_UNAUTHORIZED)
    if known.waiting >= HEARTBEAT_MAX_WAITING:
        return BUSY
    if not known.admit(token_hash(token)):
        return BUSY
    return None


def _failure(exc: Exception) -> tuple[int, dict, dict[str, str]]:
    """What console.api's handlers answer for ``exc``: status, envelope and headers."""
    if isinstance(exc, ApplicationError):
        return exc.status, exc.as_dict(), exc.headers
    if isinstance(exc, DataError):  # a value PostgreSQL refuses (a NUL character): the caller's input
        refused = ValidationFailed(
            "a value cannot be stored: out of range, or holding a NUL (\\u0000) character"
        )
        return refused.status, refused.as_dict(), {}
    if isinstance(exc, OperationalError | InterfaceError):
        down = Unavailable("the database is unavailable; retry shortly", headers={"Retry-After": "5"})
        return down.status, down.as_dict(), down.headers
    log.error("unhandled error in %s", PATH, exc_info=exc)
    return 500, error_envelope("internal_error", "internal error; the details are in the server log"), {}


async def _read_body(receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionAbortedError("the agent went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise PayloadTooLarge(f"request body is larger than the limit of {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send(send, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
    body = json.dumps(payload, separators=(",", ":")).encode()
    raw = [*_HEADERS, (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
