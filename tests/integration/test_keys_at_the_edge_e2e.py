"""API keys beyond the gateway: runners called directly verify keys from Redis; per-key rate limits hold."""

from __future__ import annotations

import json
import time

import httpx
import pytest
import redis

from contract.apikeys import entry_sign, key_generate, key_hash
from contract.signing import signing_key_from_secret
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


def test_bad_keys_get_one_401_body_everywhere_and_forged_entries_change_nothing(stack, edge):
    """Malformed, unknown, wrong secret and revoked keys, at the gateway, a runner called directly and
    the management API; then an entry written straight into Redis for a made-up key."""
    with stack.client(edge["manage"]) as api:
        good = api.post("/api/v1/keys", json={"name": "good", "scopes": ["inference", "manage"]}).json()
        gone = api.post("/api/v1/keys", json={"name": "gone", "scopes": ["inference", "manage"]}).json()
        assert api.delete(f"/api/v1/keys/{gone['id']}").status_code == 200
    wrong = good["key"][:-3] + ("abc" if not good["key"].endswith("abc") else "xyz")
    bad = ["lt_nope", key_generate()[0], wrong, gone["key"]]
    direct = runner_url(stack, edge["replica"]) + "/v1/deployments/edge-colours/predict"
    places = {
        "gateway": lambda k: httpx.post(f"{stack.url}/v1/deployments/edge-colours/predict", content=image_bytes(),
                                        headers={"Authorization": f"Bearer {k}", "Content-Type": "image/jpeg"}),
        "runner": lambda k: httpx.post(direct, content=image_bytes(),
                                       headers={"Authorization": f"Bearer {k}", "Content-Type": "image/jpeg"}),
        "manage": lambda k: httpx.get(f"{stack.url}/api/v1/keys", headers={"Authorization": f"Bearer {k}"}),
    }  # fmt: skip
    for place, call in places.items():
        answers = [call(k) for k in bad]
        assert {a.status_code for a in answers} == {401}, place
        assert len({a.content for a in answers}) == 1, (place, [a.content for a in answers])
    gateway_body = json.loads(places["gateway"](bad[0]).content)
    assert json.loads(places["runner"](bad[0]).content) == gateway_body  # the same words at both edges
    forged, prefix = key_generate()
    entry = entry_sign(signing_key_from_secret("attacker"), stack.env["LANTAU_REDIS_PREFIX"],
                       prefix=prefix, digest=key_hash(forged), key_id=good["id"], team_id=1,
                       scopes=["inference", "manage"])  # fmt: skip
    store = redis.Redis.from_url(stack.env["REDIS_URL"])
    try:
        store.set(f"{stack.env['LANTAU_REDIS_PREFIX']}:apikey:{prefix}", entry, ex=60)
        for place, call in places.items():
            assert call(forged).status_code == 401, place
    finally:
        store.close()


def test_deployment_scopes_and_monthly_quotas_hold_at_the_gateway_and_the_runner(stack, edge):
    with stack.client(edge["manage"]) as api:
        elsewhere = api.post("/api/v1/keys", json={"name": "elsewhere", "deployments": ["other-one"]}).json()
        quota = api.post("/api/v1/keys", json={"name": "quota", "quota_requests": 2}).json()
    direct = runner_url(stack, edge["replica"]) + "/v1/deployments/edge-colours/predict"
    gateway = f"{stack.url}/v1/deployments/edge-colours/predict"

    def predict(url: str, key: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "image/jpeg"}
        return httpx.post(url, content=image_bytes(), headers=headers, timeout=30)

    for url in (gateway, direct):
        refused = predict(url, elsewhere["key"])
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "forbidden"
    with stack.client(elsewhere["key"]) as c:
        assert c.get("/v1/models").json()["data"] == []  # its one deployment is not this team's
    assert predict(direct, quota["key"]).status_code == 200
    assert predict(gateway, quota["key"]).status_code == 200
    time.sleep(1.5)  # the runner sends its counters every 0.5 s and rereads them at most once a second
    for url in (gateway, direct):
        spent = predict(url, quota["key"])
        assert spent.status_code == 429 and spent.json()["error"]["type"] == "quota_exceeded"
        assert spent.json()["error"]["message"].startswith("monthly request quota of 2 spent; resets on ")
        assert int(spent.headers["retry-after"]) >= 1
