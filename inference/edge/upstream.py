"""Forwarding to one replica over pooled keep-alive connections (aiohttp's client).

An answer with a length is read whole and handed back, so the caller decides, with nothing sent yet,
whether a 5xx is passed on or tried elsewhere; Server-Sent Events stream through chunk by chunk. The
request body goes out as the client sent it (never re-encoded); the runner's ``Content-Type``,
``Retry-After``, ``Cache-Control`` and ``X-Lantau-*`` headers come back with ``X-Lantau-Served-By``.

Answers are bounded (review finding L-G): a body larger than ``max_answer_bytes`` is cut off, its
connection to the replica closed, and the client gets a 502 ``bad_gateway`` in the error envelope (held
like any 5xx, so another replica may answer instead). A stream passes through as it comes, so it is
bounded per line instead: a line of Server-Sent Events longer than ``max_answer_bytes`` ends the stream
(the client sees it cut, as when a replica dies mid-way) and closes the replica's connection.
"""

from __future__ import annotations

import asyncio

import aiohttp
from yarl import URL

from contract.envelope import error_envelope
from contract.routes import SERVED_BY_HEADER, RouteReplica

from .http import Headers, Reply, json_body
from .pool import DEFAULT_MAX_ANSWER_BYTES, AnswerTooLarge, Pool

PASS_HEADERS = frozenset({"content-type", "retry-after", "cache-control"})
UNREACHABLE = (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
               aiohttp.ClientPayloadError)  # fmt: skip

# Outcomes of one attempt.
SENT, SENT_CUT, UNREACHABLE_, TIMEOUT, SERVER_ERROR = "sent", "cut", "unreachable", "timeout", "5xx"


class Held:
    """A whole answer not sent yet: a 5xx the caller may replace by another replica's answer."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Headers, body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


def answer_headers(response: aiohttp.ClientResponse, served_by: str) -> Headers:
    headers = [
        (k, v)
        for k, v in response.headers.items()
        if (lower := k.lower()) in PASS_HEADERS or lower.startswith("x-lantau-")
    ]
    headers.append((SERVED_BY_HEADER, served_by))
    return headers


def too_large_held(limit: int, served_by: str) -> Held:
    """The 502 a client gets for an answer larger than the limit (the replica's body never reaches it)."""
    message = f"the replica's answer is larger than the limit of {limit} bytes; it was cut off"
    body = json_body(error_envelope("bad_gateway", message))
    return Held(502, [("Content-Type", "application/json"), (SERVED_BY_HEADER, served_by)], body)


async def read_bounded(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body of ``response``, or AnswerTooLarge (the connection closed) past ``limit`` bytes."""
    if response.content_length is not None and response.content_length > limit:
        response.close()
        raise AnswerTooLarge(limit)
    chunks, size = [], 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > limit:
            response.close()
            raise AnswerTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


class Upstream:
    def __init__(
        self,
        timeout_s: float,
        connect_timeout_s: float = 2.0,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_answer_bytes = max_answer_bytes
        self._session: aiohttp.ClientSession | None = None
        self.pool = Pool(connect_timeout_s)

    def session(self) -> aiohttp.ClientSession:
        """One pooled client per process, created in the serving event loop on first use."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=512, limit_per_host=128, keepalive_timeout=30,
                                             ttl_dns_cache=300)  # fmt: skip
            timeout = aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=self.connect_timeout_s)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=timeout, auto_decompress=False, skip_auto_headers=("User-Agent",)
            )
        return self._session

    async def close(self) -> None:
        self.pool.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def forward(
        self, reply: Reply, replica: RouteReplica, target: str, body: bytes, headers: dict[str, str],
        *, hold_5xx: bool, stream: bool = False,
    ) -> tuple[str, Held | None]:  # fmt: skip
        """POST to ``replica`` and answer the client, or say why not.

        (SENT, None): answered. (SENT_CUT, None): a stream died mid-way (the client sees it end).
        (UNREACHABLE_/TIMEOUT, None): nothing was sent to the client. (SERVER_ERROR, held): a 5xx read
        whole and, with ``hold_5xx``, not sent, for the caller to pass on or replace; an answer larger
        than ``max_answer_bytes`` is such a 5xx, a 502 of our own.
        """
        if stream:
            return await self._forward_stream(reply, replica, target, body, headers)
        lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1")
        try:
            async with asyncio.timeout(self.timeout_s):
                answer = await self.pool.post(replica.url, target, lines, body, self.max_answer_bytes)
        except TimeoutError:
            return TIMEOUT, None
        except OSError:  # refused, reset, closed before a whole answer: nothing reached the client
            return UNREACHABLE_, None
        except AnswerTooLarge as exc:
            return await self._held(reply, too_large_held(exc.limit, replica.served_by()), hold_5xx)
        passed = [
            (k, v)
            for k, v in answer.headers
            if (low := k.lower()) in PASS_HEADERS or low.startswith("x-lantau-")
        ]
        passed.append((SERVED_BY_HEADER, replica.served_by()))
        if answer.status >= 500:
            return await self._held(reply, Held(answer.status, passed, answer.body), hold_5xx)
        await reply.send(answer.status, passed, answer.body)
        return SENT, None

    @staticmethod
    async def _held(reply: Reply, held: Held, hold_5xx: bool) -> tuple[str, Held | None]:
        if hold_5xx:
            return SERVER_ERROR, held
        await reply.send(held.status, held.headers, held.body)
        return SERVER_ERROR, None

    async def _forward_stream(
        self, reply: Reply, replica: RouteReplica, target: str, body: bytes, headers: dict[str, str]
    ) -> tuple[str, Held | None]:
        """A stream (aiohttp's client): Server-Sent Events go to the client chunk by chunk."""
        limit = self.max_answer_bytes
        try:
            url = URL(replica.url + target, encoded=True)  # the query goes out exactly as it came in
            async with self.session().post(url, data=body, headers=headers) as response:
                answer = answer_headers(response, replica.served_by())
                if response.content_type == "text/event-stream" and response.status < 300:
                    return await self._stream(reply, response, answer, limit), None
                content = await read_bounded(response, limit)
        except UNREACHABLE:
            return UNREACHABLE_, None
        except TimeoutError:
            return TIMEOUT, None
        except AnswerTooLarge:
            return await self._held(reply, too_large_held(limit, replica.served_by()), False)
        if response.status >= 500:
            await reply.send(response.status, answer, content)
            return SERVER_ERROR, None
        await reply.send(response.status, answer, content)
        return SENT, None

    @staticmethod
    async def _stream(reply: Reply, response: aiohttp.ClientResponse, headers: Headers, limit: int) -> str:
        await reply.start(response.status, headers)
        outcome = SENT
        line = 0  # bytes of the current line so far (events are lines; no line may pass the limit)
        try:
            async for chunk in response.content.iter_any():
                newline = chunk.rfind(b"\n")
                if newline < 0:
                    line += len(chunk)
                    whole = 0  # what of the chunk may go out before a cut: whole lines only
                elif line and line + chunk.find(b"\n") > limit:
                    line, whole = limit + 1, 0  # the line this chunk ends was too long already
                else:
                    line, whole = len(chunk) - newline - 1, newline + 1
                if line > limit:  # the client never gets the giant line, only the whole lines before it
                    if whole:
                        await reply.write(chunk[:whole])
                    response.close()
                    outcome = SENT_CUT
                    break
                await reply.write(chunk)
        except (TimeoutError, asyncio.IncompleteReadError, aiohttp.ClientError):
            outcome = SENT_CUT  # the headers are gone already: end the body, the client sees it truncated
        await reply.finish()
        return outcome
