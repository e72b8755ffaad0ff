"""The edge process: aiohttp's low-level server on uvloop, the dispatcher behind it.

``/healthz`` answers once listening, ``/readyz`` once the route table was read from Redis; everything
else goes to ``inference.edge.dispatch``. SIGTERM/SIGINT stop accepting, let requests finish, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys

from aiohttp import web
from redis import asyncio as aioredis

from contract.listening import format_listening

from .balancer import Balancer
from .config import EdgeConfig
from .dispatch import Dispatcher
from .http import AiohttpReply, aiohttp_request
from .keys import RedisKeyAuth
from .limits import InFlight
from .routes import RedisRoutes
from .upstream import Upstream
from .wake import RedisWaker

log = logging.getLogger("lantau.edge")
OK = b'{"status":"ok"}'
LOADING = b'{"status":"loading"}'


def build(config: EdgeConfig, redis: aioredis.Redis) -> tuple[Dispatcher, RedisRoutes]:
    routes = RedisRoutes(redis, config.names, config.verify_key, config.edge_key, refresh_s=config.refresh_s)
    dispatcher = Dispatcher(
        routes=routes,
        keys=RedisKeyAuth(redis, config.names, config.verify_key),
        balancer=Balancer(config.region, failures=config.breaker_failures, open_s=config.breaker_open_s),
        upstream=Upstream(config.timeout_s, max_answer_bytes=config.max_answer_bytes),
        inflight=InFlight(config.max_inflight_per_deployment, config.max_inflight_per_team),
        max_body=config.max_body_bytes,
        max_json_depth=config.max_json_depth,
        waker=RedisWaker(redis, config.names, f"edge-{config.region}"),
        cold_start_timeout_s=config.cold_start_timeout_s,
    )
    return dispatcher, routes


def handler(dispatcher: Dispatcher, routes: RedisRoutes):  # type: ignore[no-untyped-def]
    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        if path == "/healthz":
            return web.Response(body=OK, content_type="application/json")
        if path == "/readyz":
            ready = routes.loaded.is_set()
            return web.Response(status=200 if ready else 503, body=OK if ready else LOADING,
                                content_type="application/json")  # fmt: skip
        reply = AiohttpReply(request)
        await dispatcher.serve(aiohttp_request(request), reply)
        assert reply.response is not None
        return reply.response

    return handle


def _bind(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(1024)
    sock.setblocking(False)
    return sock


async def serve(config: EdgeConfig) -> None:
    redis = aioredis.Redis.from_url(config.redis_url, socket_timeout=2, socket_connect_timeout=2,
                                    health_check_interval=30)  # fmt: skip
    dispatcher, routes = build(config, redis)
    server = web.Server(handler(dispatcher, routes), access_log=None)
    runner = web.ServerRunner(server, handle_signals=False)
    await runner.setup()
    sock = _bind(config.host, config.port)
    await web.SockSite(runner, sock).start()
    print(format_listening(sock.getsockname()[1]), flush=True)
    log.info("edge for region %s listening on %s:%s", config.region, config.host, sock.getsockname()[1])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    follower = asyncio.create_task(routes.follow())
    try:
        await stop.wait()
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        await runner.cleanup()  # stops listening, waits for requests in progress
        await dispatcher.upstream.close()
        await redis.aclose()


def main(config: EdgeConfig) -> int:
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        import uvloop
    except ImportError:  # a slim install without it still serves, a little slower
        asyncio.run(serve(config))
    else:
        uvloop.run(serve(config))
    return 0
