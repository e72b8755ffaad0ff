"""The heartbeat's own ASGI route (``inference.api.heartbeat``), reached through ``console.asgi`` as
daphne calls it: the same checks and answers as the ninja view, on a pool thread's own connection."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections

from inference import liveness
from inference.api import heartbeat
from inference.models import Node
from inference.services.deployments import DeploymentSpec, deployment_create, deployment_reconcile
from inference.services.nodes import node_credential_rotate, node_remove, node_token_create

# The pool's threads read with connections of their own, so the rows must be committed.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("install_admin"),
]  # Olivia runs the fleet


class CountingPool(ThreadPoolExecutor):
    submitted = 0

    def submit(self, *args, **kwargs):
        self.submitted += 1
        return super().submit(*args, **kwargs)


@pytest.fixture(autouse=True)
def pool(monkeypatch):
    """A pool for this test, whose connection is closed afterwards (the test database is dropped later)."""
    pool = CountingPool(max_workers=1)
    monkeypatch.setattr(heartbeat, "_pool", pool)
    liveness.forget("hk-1")
    yield pool
    pool.submit(connections.close_all).result()
    pool.shutdown()
    liveness.forget("hk-1")


def call(body: bytes | dict, token: str | None = None, method: str = "POST", path: str = heartbeat.PATH):
    """One request through console.asgi's HTTP application; (status, headers, decoded JSON body)."""
    from console.asgi import http_app

    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"host", b"127.0.0.1")]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": headers, "scheme": "http", "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 5000),
             "http_version": "1.1", "asgi": {"version": "3.0"}}  # fmt: skip
    sent: list[dict] = []
    chunks = [raw[i : i + 4096] for i in range(0, len(raw), 4096)] or [b""]

    async def receive():
        if not chunks:  # Django listens for a disconnect once the body is read: none comes
            await asyncio.Event().wait()
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message):
        sent.append(message)

    asyncio.run(http_app(scope, receive, send))
    start = sent[0]
    body_out = b"".join(m.get("body", b"") for m in sent[1:])
    is_json = dict(start["headers"]).get(b"content-type", b"").startswith(b"application/json")
    return start["status"], dict(start["headers"]), json.loads(body_out) if is_json and body_out else body_out


def beat_body(region: str = "hk", replicas: list | None = None) -> dict:
    return {"region": region, "inventory": {"cpus": 2}, "replicas": replicas or []}


def test_a_heartbeat_is_answered_with_the_views_answer(pool, owner, team, colour_version):
    token = node_token_create(name="hk-1", region="hk")[1]
    status, headers, answer = call(beat_body(), token)
    assert pool.submitted == 1  # served by the route's pool, not by Django
    assert status == 200 and answer == {
        "node": "hk-1",
        "region": "hk",
        "replicas": [],
        "rotate_credential": False,
    }
    assert (
        headers[b"x-content-type-options"] == b"nosniff" and headers[b"content-type"] == b"application/json"
    )
    assert Node.objects.get(name="hk-1").status == "online" and "hk-1" in liveness.seen_all()
    deployment = deployment_create(
        team=team, actor=owner, spec=DeploymentSpec(name="colours", model_version_id=colour_version.pk)
    )
    deployment_reconcile(deployment.pk)
    desired = call(beat_body(), token)[2]["replicas"]
    assert [r["deployment"] for r in desired] == ["colours"]
    report = [{"id": desired[0]["id"], "state": "ready", "url": "http://127.0.0.1:9999"}]
    assert call(beat_body(replicas=report), token)[0] == 200
    replica = deployment.replica_set.get()
    assert (replica.state, replica.url) == ("ready", "http://127.0.0.1:9999")


def test_errors_keep_the_envelope_and_the_credential_is_checked_first(db):
    token = node_token_create(name="hk-1", region="hk")[1]
    for bad in (None, "ltn_wrong", ""):
        status, _, answer = call(b"{not json", bad)
        assert status == 401 and answer["error"]["type"] == "unauthorized"  # nothing said about the body
    status, _, answer = call(b"{not json", token)
    assert status == 400 and answer["error"]["type"] == "bad_request"
    status, _, answer = call({"region": "hk", "replicas": [{"id": "x", "state": "ready"}]}, token)
    assert status == 422 and answer["error"]["message"].startswith("replicas.0.id:")
    status, _, answer = call(beat_body(region="us"), token)
    assert status == 409 and "region" in answer["error"]["message"]
    status, _, answer = call(b"x" * (heartbeat.MAX_BODY_BYTES + 1), token)
    assert status == 413 and answer["error"]["type"] == "payload_too_large"
    assert Node.objects.get(name="hk-1").status == "offline"  # none of these counted as a heartbeat


def test_a_rotated_credential_and_a_removed_node_stop_at_once(owner):
    node, token = node_token_create(name="hk-1", region="hk")
    assert call(beat_body(), token)[0] == 200
    new = node_credential_rotate(node=node)
    assert call(beat_body(), token)[0] == 401
    assert call(beat_body(), new)[0] == 200
    node_remove(actor=owner, node=Node.objects.get(name="hk-1"))
    assert call(beat_body(), new)[0] == 401


def test_other_methods_and_paths_still_reach_django(pool, db):
    token = node_token_create(name="hk-1", region="hk")[1]
    status, headers, _ = call(b"", token, method="GET")
    assert status == 405  # ninja's answer: the route only takes POST
    status, _, _ = call(beat_body(), token, path=heartbeat.PATH + "/")
    assert status == 404
    assert pool.submitted == 0


def test_a_lost_database_is_a_503_and_a_bug_a_500_in_the_envelope(pool, monkeypatch, db):
    from django.db import OperationalError

    def lost(token, body):
        raise OperationalError("connection refused")

    monkeypatch.setattr(heartbeat, "heartbeat_answer", lost)
    status, headers, answer = call(beat_body(), "ltn_" + "a" * 43)
    assert status == 503 and headers[b"retry-after"] == b"5" and answer["error"]["type"] == "unavailable"

    def bug(token, body):
        raise KeyError("secret detail")

    monkeypatch.setattr(heartbeat, "heartbeat_answer", bug)
    status, _, answer = call(beat_body(), "ltn_" + "a" * 43)
    assert (
        status == 500 and answer["error"]["type"] == "internal_error" and "secret" not in json.dumps(answer)
    )
