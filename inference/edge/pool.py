"""A lean HTTP/1.1 client for the hot path: one-shot POSTs to replicas over pooled keep-alive connections.

aiohttp's client costs about 0.13 ms of CPU per forwarded request on the 2-core benchmark machine, as
much as a quarter of what the whole edge costs; this one writes the request head and the client's body
(untouched, no copy) in one ``writelines`` and parses the answer's head once. It serves answers with a
``Content-Length`` or chunked encoding; streams (``"stream": true``) go through aiohttp instead
(``upstream``). A pooled connection the replica closed while idle is detected before anything was
answered and the request goes out again once on a fresh connection.

Bodies are bounded (review finding L-G): an answer past ``max_answer_bytes`` (a declared
``Content-Length``, the chunks decoded so far, or a body read to the close) raises ``AnswerTooLarge``
as soon as it shows, and its connection is closed, never reused. Chunked bodies are decoded as they
come, each byte looked at once; bytes a replica sends on an idle connection close it.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

MAX_IDLE_PER_HOST = 128
MAX_HEAD_BYTES = 64 * 1024
MAX_CHUNK_LINE_BYTES = 1024  # a chunk-size line (hex size and extensions) or one trailer line
DEFAULT_MAX_ANSWER_BYTES = 4 * 10 * 1024**2  # 4 x the default request limit (--max-body-bytes)


class Closed(ConnectionError):
    """The connection ended before a whole answer came; ``answered`` tells whether any byte did."""

    def __init__(self, answered: bool) -> None:
        super().__init__("the replica closed the connection")
        self.answered = answered


class AnswerTooLarge(Exception):
    """The replica's answer body is larger than the limit; its connection is closed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the replica's answer is larger than the limit of {limit} bytes")
        self.limit = limit


class Answer:
    __slots__ = ("status", "headers", "body", "keep_alive")

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes, keep_alive: bool) -> None:
        self.status, self.headers, self.body, self.keep_alive = status, headers, body, keep_alive


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.limit = DEFAULT_MAX_ANSWER_BYTES  # set per exchange
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Answer] | None = None
        self._head: tuple[int, list[tuple[str, str]], int, bool, bool] | None = (
            None  # status, headers, length, chunked, keep
        )
        # Chunked decoding, kept between reads: the body so far, the size of the chunk whose data comes
        # next (None: a size line comes next), and whether the last chunk came (trailer lines follow).
        self._body = bytearray()
        self._chunk: int | None = None
        self._trailers = -1  # bytes of trailer lines so far; -1 before the last chunk

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            if self._head is not None and self._head[2] < 0 and not self._head[3]:  # read-to-close body
                waiter.set_result(self._answer(bytes(self._buffer), keep=False))
            else:
                waiter.set_exception(Closed(bool(self._buffer) or self._head is not None))

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():  # nothing was asked: a replica talking out of turn
            self._close()
            return
        self._buffer += data
        try:
            answer = self._parse()
        except ValueError as exc:  # a malformed answer: this connection is done for
            self._close()
            waiter.set_exception(ConnectionError(f"malformed answer from the replica: {exc}"))
            return
        except AnswerTooLarge as exc:  # stop reading now; the rest is never buffered
            self._close()
            waiter.set_exception(exc)
            return
        if answer is not None:
            waiter.set_result(answer)

    def _answer(self, body: bytes, *, keep: bool) -> Answer:
        assert self._head is not None
        status, headers, _, _, keep_alive = self._head
        return Answer(status, headers, body, keep_alive and keep)

    def _parse(self) -> Answer | None:
        buffer = self._buffer
        if self._head is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise ValueError("the replica's answer head is too large")
                return None
            self._head = _head(bytes(buffer[:end]))
            del buffer[: end + 4]
            if self._head[2] > self.limit and not self._head[3]:
                raise AnswerTooLarge(self.limit)  # a declared length: refused before its body comes
        length, chunked = self._head[2], self._head[3]
        if chunked:
            body = self._dechunk()
            return self._answer(body, keep=not self._buffer) if body is not None else None
        if length >= 0:
            if len(buffer) >= length:
                return self._answer(bytes(buffer[:length]), keep=len(buffer) == length)
        elif len(buffer) > self.limit:  # read to the close
            raise AnswerTooLarge(self.limit)
        return None

    def _dechunk(self) -> bytes | None:
        """Decode what came of a chunked body; the whole body once its last chunk (and trailers) came.

        Consumes the buffer as it goes, so each byte is looked at once whatever the number of reads."""
        buffer, body, pos = self._buffer, self._body, 0
        try:
            while True:
                size = self._chunk
                if size is None:  # a line: a chunk's size, or after the last chunk a trailer
                    end = buffer.find(b"\r\n", pos)
                    if end < 0:
                        if len(buffer) - pos > MAX_CHUNK_LINE_BYTES:
                            raise ValueError("a chunk-size or trailer line is too long")
                        return None
                    line, pos = buffer[pos:end], end + 2
                    if self._trailers >= 0:
                        if not line:
                            return bytes(body)
                        self._trailers += len(line) + 2
                        if self._trailers > MAX_HEAD_BYTES:
                            raise ValueError("the answer's trailers are too large")
                        continue
                    size = int(bytes(line).split(b";")[0], 16)
                    if size < 0:
                        raise ValueError("a negative chunk size")
                    if size == 0:
                        self._trailers = 0
                        continue
                    if size > self.limit - len(body):
                        raise AnswerTooLarge(self.limit)
                    self._chunk = size
                if len(buffer) - pos < size + 2:
                    return None
                if buffer[pos + size : pos + size + 2] != b"\r\n":
                    raise ValueError("a chunk is not followed by CRLF")
                body += buffer[pos : pos + size]
                pos += size + 2
                self._chunk = None
        finally:
            del buffer[:pos]

    def _close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    async def exchange(self, head: bytes, body: bytes, limit: int) -> Answer:
        assert self.transport is not None
        self._buffer.clear()
        self._body.clear()
        self._head, self._chunk, self._trailers, self.limit = None, None, -1, limit
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.writelines((head, body))
        try:
            return await self._waiter
        finally:
            self._waiter = None


def _head(raw: bytes) -> tuple[int, list[tuple[str, str]], int, bool, bool]:
    lines = raw.decode("latin-1").split("\r\n")
    status_line = lines[0]
    if not status_line.startswith("HTTP/1.") or len(status_line) < 12:
        raise ValueError("not an HTTP/1.x answer")
    status = int(status_line[9:12])
    headers: list[tuple[str, str]] = []
    length, chunked, keep = -1, False, status_line.startswith("HTTP/1.1")
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name, value = name.strip(), value.strip()
        lower = name.lower()
        if lower == "content-length":
            length = int(value)
        elif lower == "transfer-encoding":
            chunked = "chunked" in value.lower()
        elif lower == "connection":
            keep = value.lower() == "keep-alive" or (keep and value.lower() != "close")
        headers.append((name, value))
    if status in (204, 304) or 100 <= status < 200:
        length = 0
    return status, headers, length, chunked, keep


class Pool:
    """Idle keep-alive connections per replica address; a request takes one (or opens one) and gives it
    back after a whole answer that allows reuse."""

    def __init__(
        self, connect_timeout_s: float = 2.0, max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.max_answer_bytes = max_answer_bytes
        self._idle: dict[str, list[_Connection]] = {}
        self._addresses: dict[str, tuple[str, int, bytes]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def _address(self, base: str) -> tuple[str, int, bytes]:
        found = self._addresses.get(base)
        if found is None:
            parts = urlsplit(base)
            if parts.scheme != "http" or not parts.hostname:
                raise ConnectionError(f"unsupported replica URL {base!r}")
            found = (parts.hostname, parts.port or 80, parts.netloc.encode("latin-1"))
            self._addresses[base] = found
        return found

    async def _open(self, host: str, port: int) -> _Connection:
        loop = asyncio.get_running_loop()
        _, connection = await asyncio.wait_for(
            loop.create_connection(_Connection, host, port), self.connect_timeout_s
        )
        return connection

    async def post(
        self, base: str, target: str, headers: bytes, body: bytes, limit: int | None = None
    ) -> Answer:
        """POST ``body`` to ``base + target``; ``headers`` are ready-made ``Name: value\\r\\n`` lines.
        Raises OSError/ConnectionError when the replica cannot be reached or drops the connection, and
        AnswerTooLarge (the connection closed) for a body larger than ``limit`` (``max_answer_bytes``)."""
        host, port, netloc = self._address(base)
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop that opened them (tests run several)
            self._idle, self._loop = {}, loop
        head = b"".join((b"POST ", target.encode("latin-1"), b" HTTP/1.1\r\nHost: ", netloc,
                         b"\r\nContent-Length: ", str(len(body)).encode(), b"\r\n", headers, b"\r\n"))  # fmt: skip
        limit = self.max_answer_bytes if limit is None else limit
        idle = self._idle.setdefault(base, [])
        while idle:
            connection = idle.pop()
            if connection.closed:
                continue
            try:
                return self._done(base, connection, await connection.exchange(head, body, limit))
            except Closed as exc:
                if exc.answered:
                    raise
                break  # closed by the replica while idle: once more on a fresh connection
            except BaseException:
                _drop(connection)
                raise
        connection = await self._open(host, port)
        try:
            return self._done(base, connection, await connection.exchange(head, body, limit))
        except BaseException:
            _drop(connection)
            raise

    def _done(self, base: str, connection: _Connection, answer: Answer) -> Answer:
        idle = self._idle[base]
        if answer.keep_alive and not connection.closed and len(idle) < MAX_IDLE_PER_HOST:
            idle.append(connection)
        else:
            _drop(connection)
        return answer

    def close(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                _drop(connection)
        self._idle.clear()


def _drop(connection: _Connection) -> None:
    if connection.transport is not None and not connection.closed:
        connection.transport.close()
