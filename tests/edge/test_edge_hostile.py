"""Hostile or refused requests at a regional edge process get a precise 4xx in the error envelope: the
bodies of tests/security (deep JSON, decompression bombs, made-up and oversized names), bad keys, a
forged route entry written straight into Redis, a spent rate limit or quota, a revoked key."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx
import pytest
from django.conf import settings

from accounts import keycache
from accounts.models import ApiKey
from accounts.services import api_key_create, api_key_revoke
from contract.apikeys import INVALID_KEY_MESSAGE, MISSING_KEY_MESSAGE
from contract.quotas import month_of
from contract.redis_keys import RedisKeys
from contract.routes import RouteEntry, RouteReplica, route_sign
from contract.signing import signing_key_from_secret
from inference.routes_publish import edge_key, routes_publish_all
from tests.security.test_hostile_requests import DEEP_JSON, png_bomb
from tests.support.edges import RED, World, start_edge, wait_for
from tests.support.factories import image_bytes

pytestmark = pytest.mark.django_db(transaction=True)
PREDICT = "/v1/deployments/colours/predict"


def refused(answer: httpx.Response, status: int, type_: str, words: str = "") -> None:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["type"] == type_ and words in error["message"], error
    assert "Traceback" not in answer.text


def test_the_edge_refuses_hostile_requests_precisely_and_keeps_serving(world: World, team, owner) -> None:
    world.start_runners("hk-a")
    edge = world.edges["hk"] = start_edge("hk", world.logs / "edge.log", "--max-body-bytes", "300000")
    edge.wait_ready(60)
    auth = {"Authorization": f"Bearer {world.key}"}
    jpeg = auth | {"Content-Type": "image/jpeg"}
    with httpx.Client(base_url=edge.url, timeout=30) as c:
        assert c.get("/v1/openapi.json").json()["openapi"].startswith("3.")  # public, no key
        refused(c.post(PREDICT, content=RED), 401, "unauthorized", MISSING_KEY_MESSAGE)
        refused(c.post(PREDICT, content=RED, headers={"Authorization": "Bearer lt_x"}), 401, "unauthorized",
                INVALID_KEY_MESSAGE)  # fmt: skip
        refused(c.post(PREDICT, content=b"\0" * 400_000), 413, "payload_too_large")  # before the key check
        refused(c.get(PREDICT, headers=auth), 405, "method_not_allowed")
        refused(c.post("/v1/nothing", headers=auth), 404, "not_found")
        refused(c.post("/v1/deployments/nope/predict", content=RED, headers=auth), 404, "not_found")
        cases = [
            ("/v1/embeddings", b'{"model": "colours", "input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
             "application/json", 400, "bad_request", "nests deeper"),
            ("/v1/embeddings", json.dumps({"model": "x" * 200_000, "input": "a"}).encode(), "application/json",
             400, "bad_request", "deployment name"),
            ("/v1/chat/completions", b'{"model": "../../etc", "messages": []}', "application/json", 400,
             "bad_request", "deployment name"),
            (PREDICT, DEEP_JSON[:250_000], "application/json", 400, "bad_request", ""),  # the runner's answer
            (PREDICT, png_bomb(), "image/png", 422, "invalid_input", "too large"),
            (PREDICT, image_bytes(fmt="GIF"), "image/jpeg", 422, "invalid_input", ""),
        ]  # fmt: skip
        for path, body, content_type, status, type_, words in cases:
            refused(
                c.post(path, content=body, headers=auth | {"Content-Type": content_type}),
                status,
                type_,
                words,
            )
        refused(c.post(PREDICT, content=RED, headers=auth | {"X-Lantau-Region": "h k"}), 400, "bad_request")

        # Whoever can write Redis cannot point the edge at a host of their own: an entry signed by
        # another key is refused, and the deployment stays served by the real replica.
        names = RedisKeys(settings.REDIS_PREFIX)
        forged = RouteEntry("colours", team.pk, "image-classification", "colours:1", False, 0,
                            (RouteReplica(999, "http://127.0.0.1:9", "hk", "evil", "t"),))  # fmt: skip
        keycache.client().hset(names.routes(), "colours",
                               route_sign(signing_key_from_secret("not the console"), names.prefix, forged, edge_key()))  # fmt: skip
        keycache.client().publish(names.routes_channel(), "colours")
        wait_for(lambda: c.post(PREDICT, content=RED, headers=jpeg).status_code == 404)
        assert "route entry of 'colours' refused" in edge.last_output(100_000)

        routes_publish_all()  # the console's periodic rewrite repairs it
        wait_for(lambda: c.post(PREDICT, content=RED, headers=jpeg).status_code == 200)
        ok = c.post(PREDICT, content=RED, headers=jpeg)
        assert ok.status_code == 200 and ok.json()["predictions"][0]["label"] == "red"


def test_the_edge_applies_rate_limits_quotas_and_revocation(world: World, team, owner) -> None:
    world.start_runners("hk-a")
    edge = world.edges["hk"] = start_edge("hk", world.logs / "edge.log")
    edge.wait_ready(60)
    limited_row, limited = api_key_create(team=team, actor=owner, name="slow", rate_per_s=0.1, burst=1)
    quota_row, quota = api_key_create(team=team, actor=owner, name="quota", quota_requests=1)
    keycache.client().hset(
        keycache.names().usage_month(quota_row.pk, month_of(datetime.now(UTC))), "requests", 1
    )
    with httpx.Client(base_url=edge.url, timeout=30) as c:

        def call(key: str) -> httpx.Response:
            return c.post(
                PREDICT, content=RED, headers={"Authorization": f"Bearer {key}", "Content-Type": "image/jpeg"}
            )

        assert call(limited).status_code == 200
        slow = call(limited)
        refused(slow, 429, "rate_limited")
        assert int(slow.headers["retry-after"]) >= 1
        spent = call(quota)
        refused(spent, 429, "quota_exceeded", "monthly request quota of 1 spent")
        assert int(spent.headers["retry-after"]) >= 1

        assert call(world.key).status_code == 200
        api_key_revoke(team=team, actor=owner, key_id=ApiKey.objects.get(name="edge").pk)
        wait_for(lambda: call(world.key).status_code == 401)
        refused(call(world.key), 401, "unauthorized", INVALID_KEY_MESSAGE)
        assert (
            keycache.client().hget(keycache.names().last_use(limited_row.pk), "at") is not None
        )  # last use noted
