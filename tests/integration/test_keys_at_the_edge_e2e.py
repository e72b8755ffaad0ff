"""API keys beyond the gateway: runners called directly verify keys from Redis; per-key rate limits hold."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.support.factories import image_bytes
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def edge(stack, tmp_path_factory):
    stack.user("erin", "edge-team", "owner")
    manage = stack.api_key("erin", "manage")
    path = colour_classifier(tmp_path_factory.mktemp("e") / "m.onnx")
    with stack.client(manage) as api:
        v = api.post(
            "/api/v1/models",
            files={"file": ("m.onnx", path.read_bytes())},
            data={"name": "edge-colours", "task": "image-classification", "labels": "\n".join(COLOURS)},
        ).json()
        assert (
            api.post(
                "/api/v1/deployments", json={"name": "edge-colours", "model_version_id": v["id"]}
            ).status_code
            == 201
        )
        body = stack.wait_deployment(api, "edge-colours")
    return {"manage": manage, "replica": body["replica_set"][0]["id"]}


def runner_url(stack, replica_id: int) -> str:
    """The replica's own address, as its node agent reported it (the stack's database holds it)."""
    import psycopg

    with psycopg.connect(stack.env["DATABASE_URL"]) as conn:
        return conn.execute("SELECT url FROM inference_replica WHERE id = %s", (replica_id,)).fetchone()[0]


def test_a_runner_called_directly_accepts_a_fresh_key_and_refuses_it_within_a_second_of_revocation(
    stack, edge
):
    with stack.client(edge["manage"]) as api:
        created = api.post("/api/v1/keys", json={"name": "direct", "scopes": ["inference"]}).json()
    url = runner_url(stack, edge["replica"]) + "/v1/deployments/edge-colours/predict"
    headers = {"Authorization": f"Bearer {created['key']}", "Content-Type": "image/jpeg"}
    first = httpx.post(url, content=image_bytes((0, 0, 250)), headers=headers)  # never used via the gateway
    assert first.status_code == 200 and first.json()["predictions"][0]["label"] == "blue"
    with stack.client(edge["manage"]) as api:
        assert api.delete(f"/api/v1/keys/{created['id']}").status_code == 200
    time.sleep(1.1)
    refused = httpx.post(url, content=image_bytes(), headers=headers)
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "unauthorized"
    assert httpx.post(url, content=image_bytes(), headers={"Content-Type": "image/jpeg"}).status_code == 401


def test_a_rate_limited_key_gets_429_with_retry_after_through_the_gateway(stack, edge):
    with stack.client(edge["manage"]) as api:
        r = api.post("/api/v1/keys", json={"name": "slow", "rate_per_s": 1, "burst": 2})
        assert r.status_code == 201 and r.json()["rate_per_s"] == 1
        key = r.json()["key"]
        bad = api.post("/api/v1/keys", json={"name": "bad", "rate_per_s": -1})
        assert bad.status_code == 422 and "rate_per_s" in bad.json()["error"]["message"]
    codes = []
    with stack.client(key) as c:
        for _ in range(4):
            resp = c.post(
                "/v1/deployments/edge-colours/predict",
                content=image_bytes(),
                headers={"Content-Type": "image/jpeg"},
            )
            codes.append(resp.status_code)
            if resp.status_code == 429:
                assert int(resp.headers["retry-after"]) >= 1
                assert resp.json()["error"]["type"] == "rate_limited"
    assert codes[:2] == [200, 200] and 429 in codes[2:]
