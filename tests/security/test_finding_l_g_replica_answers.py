"""Review finding L-G: edges and the console's `/v1/` buffered a replica's answer with no size limit and
re-parsed a chunked body from its start after every read (O(n²)). A rogue replica (a node of finding
H-A) answering endless small chunks, a 4 GB ``Content-Length`` or one giant line of Server-Sent Events
could exhaust their memory or CPU until the upstream timeout, for every request routed to it.

Answers are now bounded (``LANTAU_MAX_ANSWER_BYTES``, the edge's ``--max-answer-bytes``): past the limit
the client gets a 502 ``bad_gateway`` in the error envelope and the replica's connection is closed, not
reused; a stream is bounded per line and ends (cut) at a line past the limit. The rogue replica here is a
real HTTP server on 127.0.0.1 behind the real gateway and a real edge process.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from pathlib import Path

import httpx
import pytest

from accounts.services import api_key_create
from inference.gateway import app as gateway_app_module
from inference.routes_publish import routes_publish_all
from tests.security.dataplane import call, colour_deployment, serve_replica
from tests.security.key_readers import fresh_gateway, use_own_prefix
from tests.support.edges import start_edge
from tests.support.gateway import run

pytestmark = pytest.mark.django_db(transaction=True)  # the gateway reads the database from its own thread

LIMIT = 64 * 1024
PREDICT = "/v1/deployments/colours/predict"
CHAT = "/v1/chat/completions"
ROGUE_CAP = 24 * 1024**2  # the rogue stops sending there (then idles): a broken build fails, not swaps
TIMEOUT_S = 6  # the upstream timeout: a build without the limit waits this long, then answers 504


class Rogue(socketserver.ThreadingTCPServer):
    """A replica answering as ``mode`` says; it records each connection and whether the peer closed it."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = "ok"
        self.connections = 0
        self.closed_by_peer = threading.Event()
        self.sent = 0
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: Rogue = self.server  # type: ignore[assignment]
        server.connections += 1
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = sock.makefile("rb")
        try:
            while True:  # keep-alive: one request after another
                length = 0
                while (line := reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if not line:
                    return
                reader.read(length)
                self.answer(sock, server, server.mode)
        except OSError:
            server.closed_by_peer.set()

    def answer(self, sock: socket.socket, server: Rogue, mode: str) -> None:
        if mode == "ok":
            body = b'{"ok": true}'
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))  # fmt: skip
            return
        if mode == "many-chunks":  # a legitimate answer of 400,000 one-byte chunks (2.4 MB on the wire)
            sock.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            piece = b"1\r\nx\r\n" * 1000
            for _ in range(400):  # in small reads, as a slow link would deliver them
                sock.sendall(piece)
                time.sleep(0.002)
            sock.sendall(b"0\r\n\r\n")
            return
        if mode == "endless-chunks":
            sock.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            piece = b"1\r\nx\r\n" * 2000
        elif mode == "huge-length":
            sock.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4000000000\r\n\r\n"
            )
            piece = b"x" * 65536
        else:  # giant-sse-line: one good event, then a line that never ends
            sock.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            event = b'data: {"choices": []}\n\n'
            sock.sendall(b"%x\r\n%s\r\n" % (len(event), event))
            sock.sendall(b"6\r\ndata: \r\n")
            piece = b"%x\r\n%s\r\n" % (8192, b"x" * 8192)
        while server.sent < ROGUE_CAP:
            sock.sendall(piece)
            server.sent += len(piece)
        while True:  # idle until the peer goes away (recv returns b"" or fails)
            if sock.recv(65536) == b"":
                raise ConnectionResetError("closed by the peer")


@pytest.fixture
def rogue():
    server = Rogue()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def gateway_to(settings, monkeypatch, team, owner, tmp_path, rogue):
    """The colour deployment behind the console's `/v1/`, its one ready replica the rogue server."""
    clean = use_own_prefix(settings)
    fresh_gateway(monkeypatch)
    settings.MAX_ANSWER_BYTES = LIMIT
    settings.GATEWAY_TIMEOUT_S = TIMEOUT_S
    monkeypatch.setattr(gateway_app_module._upstream, "timeout_s", float(TIMEOUT_S))
    serve_replica(colour_deployment(team, owner, tmp_path), rogue.url)
    _, key = api_key_create(team=team, actor=owner, name="l-g")
    yield key
    clean()


def too_large(status: int, body: bytes) -> None:
    assert status == 502, (status, body[:200])
    error = json.loads(body)["error"]
    assert error["type"] == "bad_gateway" and f"limit of {LIMIT} bytes" in error["message"], error


def wait_closed(rogue: Rogue) -> None:
    assert rogue.closed_by_peer.wait(5), "the replica's connection was kept open"
    assert rogue.sent < ROGUE_CAP


@pytest.mark.parametrize("mode", ["endless-chunks", "huge-length"])
def test_l_g_console_cuts_an_oversized_answer_with_a_502_and_drops_the_connection(
    gateway_to, rogue, mode
) -> None:
    rogue.mode = mode

    async def scenario() -> None:
        started = time.monotonic()
        answer = await call("POST", PREDICT, key=gateway_to, body=b"{}")
        too_large(answer.status, answer.body)
        assert time.monotonic() - started < TIMEOUT_S - 1, "the gateway read on until the timeout"
        await asyncio_to_thread(wait_closed, rogue)
        rogue.mode = "ok"  # the next request opens a fresh connection and is served
        again = await call("POST", PREDICT, key=gateway_to, body=b"{}")
        assert again.status == 200 and again.json() == {"ok": True}
        assert rogue.connections == 2

    run(scenario)


def test_l_g_console_decodes_many_small_chunks_in_linear_time(gateway_to, rogue, settings) -> None:
    settings.MAX_ANSWER_BYTES = 1024**2
    rogue.mode = "many-chunks"

    async def scenario() -> None:
        started = time.monotonic()
        answer = await call("POST", PREDICT, key=gateway_to, body=b"{}")
        elapsed = time.monotonic() - started
        assert answer.status == 200 and answer.body == b"x" * 400_000, (answer.status, answer.body[:200])
        print(f"{elapsed:.2f} s for 400,000 chunks")
        assert elapsed < 4, f"{elapsed:.1f} s for 400,000 chunks: the body is re-parsed after each read"

    run(scenario)


def test_l_g_console_ends_a_stream_at_a_giant_line(gateway_to, rogue) -> None:
    rogue.mode = "giant-sse-line"
    body = json.dumps({"model": "colours", "stream": True, "messages": []}).encode()

    async def scenario() -> None:
        answer = await call("POST", CHAT, key=gateway_to, body=body)
        assert answer.status == 200 and answer.headers["content-type"].startswith("text/event-stream")
        assert answer.body.startswith(b'data: {"choices": []}\n\n')  # what came before the giant line
        assert len(answer.body) < 2 * LIMIT, f"{len(answer.body)} bytes of one line were relayed"
        await asyncio_to_thread(wait_closed, rogue)

    run(scenario)


async def asyncio_to_thread(function, *args) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    await asyncio.to_thread(function, *args)


def test_l_g_edge_cuts_oversized_answers_and_long_stream_lines(
    settings, team, owner, tmp_path: Path, rogue
) -> None:
    clean = use_own_prefix(settings)
    serve_replica(colour_deployment(team, owner, tmp_path), rogue.url)
    _, key = api_key_create(team=team, actor=owner, name="l-g")
    routes_publish_all()
    edge = start_edge("hk", tmp_path / "edge.log", "--max-answer-bytes", str(LIMIT), "--timeout-s", str(TIMEOUT_S),
                      "--breaker-failures", "10")  # fmt: skip  # each cut is a failure: the last call must reach it
    auth = {"Authorization": f"Bearer {key}"}
    try:
        edge.wait_ready(60)
        with httpx.Client(base_url=edge.url, timeout=30) as c:
            for mode in ("endless-chunks", "huge-length"):
                rogue.mode, rogue.sent = mode, 0
                rogue.closed_by_peer.clear()
                started = time.monotonic()
                answer = c.post(PREDICT, content=b"{}", headers=auth)
                too_large(answer.status_code, answer.content)
                assert time.monotonic() - started < TIMEOUT_S - 1, "the edge read on until the timeout"
                wait_closed(rogue)
            rogue.mode, rogue.sent = "giant-sse-line", 0
            rogue.closed_by_peer.clear()
            body = json.dumps({"model": "colours", "stream": True, "messages": []}).encode()
            with c.stream("POST", CHAT, content=body, headers=auth) as stream:
                assert stream.status_code == 200
                got = b"".join(stream.iter_raw())
            assert got.startswith(b'data: {"choices": []}\n\n') and len(got) < 2 * LIMIT, len(got)
            wait_closed(rogue)
            rogue.mode = "ok"
            answer = c.post(PREDICT, content=b"{}", headers=auth)
            assert answer.status_code == 200 and answer.json() == {"ok": True}
    finally:
        edge.stop(10)
        clean()
    assert "Traceback" not in (tmp_path / "edge.log").read_text()
