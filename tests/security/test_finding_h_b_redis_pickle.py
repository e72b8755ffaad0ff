"""Review H-B: whoever can write Redis must not run code in the console.

A pickled object whose unpickling makes a marker directory is planted at every key pattern the console
reads (Django's cache: the login throttle; contract.redis_keys: API-key entries, usage, last use, rate
limits, runner summaries, node liveness, inventories and stats, routes, wake flags), in the Redis type
each reader expects. Then the pages, APIs, websockets, the console's `/v1/` and the periodic passes that
read those keys are driven. The marker never appears, and no answer is a 500.

The payload is checked to be live first (unpickling it elsewhere does make its marker), so the test
would fail on code that unpickled any of these values (the console's cache did, before core.cache).
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from accounts import keycache, login_throttle, usage
from accounts.models import ApiKey
from accounts.services import api_key_create
from console.asgi import application
from contract.redis_keys import RedisKeys
from inference import liveness
from inference.models import Node
from inference.services import autoscale, nodes, rollout_watch
from tests.security.dataplane import call, colour_deployment
from tests.support.gateway import run

pytestmark = pytest.mark.django_db(transaction=True)  # the gateway and websockets use worker threads


class Bomb:
    """Unpickling this makes the directory ``path``: proof that something unpickled a planted value."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (str(self.path),))


def bomb(path: Path) -> bytes:
    return pickle.dumps(Bomb(path))


def test_h_b_the_payload_is_live(tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    pickle.loads(bomb(marker))
    assert marker.is_dir()


def plant_everywhere(payload: bytes, *, username: str, address: str, key: ApiKey, deployment: str,
                     replica: int, node: str) -> list[str]:  # fmt: skip
    """The payload at every key the console reads, each in the type its reader expects; the key names."""
    r = keycache.client()
    names = RedisKeys(settings.REDIS_PREFIX)
    user = login_throttle._name(username)
    planted = []
    for raw in (f"login-fail:user:{user}", f"login-fail:addr:{address}"):
        for k in (cache.make_key(raw), cache.make_key(raw + ":until")):
            r.set(k, payload, ex=600)
            planted.append(k)
    strings = [
        names.api_key(key.prefix),
        names.metrics_last(deployment, str(replica)),
        names.node_inventory(node),
        names.wake(deployment),
    ]
    for k in strings:
        r.set(k, payload, ex=600)
    hashes = [
        names.usage(key.pk),
        names.usage_rolling(key.pk),
        names.last_use(key.pk),
        names.rate_limit(key.pk),
    ]
    month = usage.month_start(timezone.now()).strftime("%Y-%m")
    hashes.append(names.usage_month(key.pk, month))
    for k in hashes:
        r.delete(k)
        r.hset(k, mapping={"requests": payload, "tokens": payload, "at": payload, "address": payload,
                           "tokens_left": payload, "ts": payload})  # fmt: skip
    r.zadd(names.nodes_seen(), {payload: 1e12})
    r.rpush(names.node_stats(node), payload)
    r.hset(names.routes(), deployment, payload)
    return planted + strings + hashes + [names.nodes_seen(), names.node_stats(node), names.routes()]


def test_h_b_a_pickle_at_every_key_the_console_reads_runs_nothing(owner, team, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = bomb(marker)
    replica = colour_deployment(team, owner, tmp_path)
    node = Node.objects.get(pk=replica.node_id)
    key_obj, clear = api_key_create(team=team, actor=owner, name="hb", scopes=["inference", "manage"])
    keys = plant_everywhere(payload, username="probe-rce", address="203.0.113.9", key=key_obj,
                            deployment="colours", replica=replica.pk, node=node.name)  # fmt: skip
    assert len(keys) >= 15

    statuses = {}
    # The anonymous sign-in that ran the planted object before (H-B's black-box test).
    anonymous = Client()
    r = anonymous.post(
        "/accounts/login/", {"username": "probe-rce", "password": "x"}, REMOTE_ADDR="203.0.113.9"
    )
    statuses["login"] = r.status_code
    assert r.status_code == 200 and b"Wrong username or password." in r.content

    browser = Client()
    browser.force_login(owner)
    for path in ("/", "/deployments/", "/deployments/colours/", "/nodes/", f"/nodes/{node.name}/",
                 "/accounts/keys/", "/models/"):  # fmt: skip
        statuses[path] = browser.get(path).status_code
    for path in ("/api/v1/deployments", "/api/v1/deployments/colours", "/api/v1/nodes",
                 f"/api/v1/keys/{key_obj.pk}/usage", "/api/v1/keys"):  # fmt: skip
        statuses[path] = browser.get(path).status_code

    # The periodic passes that read summaries, usage, liveness and inventories.
    usage.usage_rollup()
    autoscale.deployments_autoscale()
    rollout_watch.rollouts_watch()
    nodes.nodes_sweep()
    liveness.seen_all()
    liveness.inventories([node.name])

    # The console's /v1/ (its key entry in Redis is the payload) and the live pages' websockets.
    async def traffic() -> None:
        for method, path in (("GET", "/v1/models"), ("POST", "/v1/deployments/colours/predict")):
            answer = await call(method, path, key=clear, body=b"{}")
            statuses[path] = answer.status

        cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"
        headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", cookie.encode())]
        for path in ("/ws/deployments/colours/metrics/", f"/ws/nodes/{node.name}/stats/"):
            socket = WebsocketCommunicator(application, path, headers=headers)
            connected, _ = await socket.connect(timeout=5)
            assert connected, path
            sent = []  # whatever it sends first (history, the last summaries), until it is quiet
            while not await socket.receive_nothing(timeout=0.5):
                sent.append(await socket.receive_output())
            assert all(m["type"] == "websocket.send" for m in sent), (path, sent)
            await socket.disconnect()

    run(traffic)
    assert not marker.exists(), "a planted pickle was unpickled"
    assert 500 not in statuses.values(), statuses
    # An unreadable entry is no entry: the console checked the real key in the database instead.
    assert statuses["/v1/models"] == 200, statuses


def test_h_b_cache_values_are_json_and_integers_stay_atomic_counters() -> None:
    cache.set("hb-probe", {"a": [1, 2]}, timeout=30)
    raw = keycache.client().get(cache.make_key("hb-probe"))
    assert raw == b'{"a":[1,2]}'
    cache.set("hb-count", 1, timeout=30)
    assert cache.incr("hb-count") == 2 and cache.get("hb-count") == 2
    keycache.client().set(cache.make_key("hb-probe"), b"\x80\x04not json")
    assert cache.get("hb-probe") is None
    cache.delete_many(["hb-probe", "hb-count"])
