"""The console's `/v1/` ASGI app: the edge's dispatcher (``inference.edge.dispatch``) hosted by daphne,
with routes from the database (``routing``) and keys checked in Redis, then the database (``auth``).

One implementation, two hosts: small installs call the console; regions with an edge call that.
"""

from __future__ import annotations

from django.conf import settings

from contract.redis_keys import RedisKeys
from core.errors import ApplicationError
from inference.edge.dispatch import _OPENAI, _PREDICT, Dispatcher
from inference.edge.http import AsgiReply, asgi_request
from inference.edge.wake import RedisWaker
from inference.gateway import auth
from inference.gateway.limits import InFlight
from inference.gateway.routing import RouteTable
from inference.gateway.upstream import ConsoleUpstream
from inference.runner.errors import RunnerError

__all__ = ["_OPENAI", "_PREDICT", "gateway_app", "inflight", "routes"]

routes = RouteTable()
inflight = InFlight()


class _Keys:
    """The gateway's key checks (``inference.gateway.auth``: Redis first, the database on a miss)."""

    authenticate = staticmethod(auth.authenticate)
    enforce_rate_limit = staticmethod(auth.enforce_rate_limit)
    authorize = staticmethod(auth.authorize)


class _Waker:
    """Wake a deployment scaled to zero as edges do (``inference.edge.wake``), on this process's Redis."""

    async def wake(self, deployment: str) -> None:
        await RedisWaker(auth.redis(), RedisKeys(settings.REDIS_PREFIX), "console").wake(deployment)


class ConsoleDispatcher(Dispatcher):
    answerable = (RunnerError, ApplicationError)  # auth and the database raise the console's errors


_keys = _Keys()
_upstream = ConsoleUpstream()
_waker = _Waker()


async def gateway_app(scope, receive, send) -> None:
    # Built per request from this module's ``routes``/``inflight`` and the settings, which tests swap.
    dispatcher = ConsoleDispatcher(
        routes=routes, keys=_keys, balancer=routes.balancer, upstream=_upstream, inflight=inflight,
        max_body=settings.MAX_PREDICT_BYTES, max_json_depth=settings.MAX_JSON_DEPTH, waker=_waker,
        cold_start_timeout_s=settings.COLD_START_TIMEOUT_S,
    )  # fmt: skip
    await dispatcher.serve(asgi_request(scope, receive), AsgiReply(send))
