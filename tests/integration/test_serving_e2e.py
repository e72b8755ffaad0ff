"""The first path, end to end through real processes: upload, deploy, API key, predict through a runner."""

from __future__ import annotations

import signal
import time

import pytest

from tests.support.factories import image_bytes
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def people(stack):
    """Owner of team acme (manage + inference keys) and an outsider in team globex."""
    stack.user("alice", "acme", "owner")
    stack.user("otto", "globex", "owner")
    return {
        "manage": stack.api_key("alice", "manage"),
        "infer": stack.api_key("alice", "inference"),
        "outsider_infer": stack.api_key("otto", "inference"),
        "outsider_manage": stack.api_key("otto", "manage"),
    }


@pytest.fixture(scope="module")
def colours(stack, people, tmp_path_factory):
    """The colour classifier uploaded through the API and deployed on the local node."""
    path = colour_classifier(tmp_path_factory.mktemp("m") / "colours.onnx")
    with stack.client(people["manage"]) as api:
        files = {"file": ("colours.onnx", path.read_bytes(), "application/octet-stream")}
        data = {
            "name": "colours",
            "task": "image-classification",
            "labels": "\n".join(COLOURS),
            "preprocessing": '{"mean": [0, 0, 0], "std": [1, 1, 1]}',
        }
        upload = api.post("/api/v1/models", files=files, data=data)
        assert upload.status_code == 201, upload.text
        version = upload.json()
        created = api.post(
            "/api/v1/deployments",
            json={
                "name": "colours",
                "model_version_id": version["id"],
                "max_batch_size": 4,
                "max_queue_delay_ms": 2,
            },
        )
        assert created.status_code == 201, created.text
        return stack.wait_deployment(api, "colours")


def predict(stack, key, body: bytes, content_type="image/jpeg", name="colours"):
    with stack.client(key) as c:
        return c.post(f"/v1/deployments/{name}/predict", content=body, headers={"Content-Type": content_type})


def test_uploaded_classifier_predicts_through_runner_process(stack, people, colours):
    assert colours["ready_replicas"] == 1 and colours["replica_set"][0]["region"] == "hk"
    answer = predict(stack, people["infer"], image_bytes((250, 10, 10)))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["deployment"] == "colours" and body["model_version"] == "colours:1"
    assert body["predictions"][0]["label"] == "red" and {p["label"] for p in body["predictions"]} == set(
        COLOURS
    )
    assert body["predictions"][0]["index"] == 0 and body["predictions"][0]["score"] > 0.9
    assert set(body["timing_ms"]) == {"queue", "inference", "total"}
    blue = predict(stack, people["infer"], image_bytes((0, 0, 255), fmt="PNG"), "image/png").json()
    assert blue["predictions"][0]["label"] == "blue"


def test_missing_wrong_and_revoked_keys_get_401(stack, people, colours):
    for headers in (
        {},
        {"Authorization": "Bearer nope"},
        {"Authorization": "Basic abc"},
        {"Authorization": "Bearer lt_00000000_" + "x" * 43},
    ):
        with stack.client() as c:
            r = c.post("/v1/deployments/colours/predict", content=image_bytes(), headers=headers)
        assert r.status_code == 401
        assert r.json()["error"]["type"] == "unauthorized"
    key = stack.api_key("alice", "inference")
    assert predict(stack, key, image_bytes()).status_code == 200
    with stack.client(people["manage"]) as api:
        keys = api.get("/api/v1/keys").json()
        key_id = next(k["id"] for k in keys if key.startswith(k["prefix"]))
        assert api.delete(f"/api/v1/keys/{key_id}").status_code == 200
    revoked = predict(stack, key, image_bytes())
    assert revoked.status_code == 401 and "revoked" in revoked.json()["error"]["message"]


def test_manage_only_key_cannot_call_inference(stack, people, colours):
    r = predict(stack, people["manage"], image_bytes())
    assert r.status_code == 403 and r.json()["error"]["type"] == "forbidden"


def test_unknown_deployment_is_404(stack, people, colours):
    r = predict(stack, people["infer"], image_bytes(), name="no-such-thing")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"


def test_other_teams_key_cannot_see_or_call_deployment(stack, people, colours):
    r = predict(stack, people["outsider_infer"], image_bytes())
    assert r.status_code == 404
    with stack.client(people["outsider_infer"]) as c:
        assert c.get("/v1/models").json()["data"] == []
    with stack.client(people["outsider_manage"]) as api:
        assert api.get("/api/v1/deployments/colours").status_code == 404
        assert api.patch("/api/v1/deployments/colours", json={"replicas": 0}).status_code == 404


def test_body_that_is_not_an_image_is_refused_with_a_message(stack, people, colours):
    text = predict(stack, people["infer"], b"hello", content_type="text/plain")
    assert text.status_code == 415 and text.json()["error"]["message"]
    garbage = predict(stack, people["infer"], b"\xff\xd8not really a jpeg")
    assert garbage.status_code == 422 and "image" in garbage.json()["error"]["message"]
    empty = predict(stack, people["infer"], b"")
    assert empty.status_code in (400, 422) and "error" in empty.json()


def test_oversized_body_is_413(stack, people, colours):
    r = predict(stack, people["infer"], b"\0" * (11 * 1024 * 1024))
    assert r.status_code == 413 and r.json()["error"]["type"] == "payload_too_large"


def test_models_list_shows_the_teams_deployments(stack, people, colours):
    with stack.client(people["infer"]) as c:
        body = c.get("/v1/models").json()
    assert body["object"] == "list" and [m["id"] for m in body["data"]] == ["colours"]


def test_invalid_onnx_upload_is_refused_and_nothing_is_stored(stack, people):
    storage = stack.workdir / "data" / "storage" / "sha256"
    before = sorted(p.name for p in storage.rglob("*") if p.is_file()) if storage.exists() else []
    with stack.client(people["manage"]) as api:
        r = api.post(
            "/api/v1/models",
            files={"file": ("x.onnx", b"not a model at all" * 100)},
            data={"name": "broken", "task": "image-classification"},
        )
        assert r.status_code == 422 and "ONNX" in r.json()["error"]["message"]
        assert api.get("/api/v1/models/broken").status_code == 404
    after = sorted(p.name for p in storage.rglob("*") if p.is_file()) if storage.exists() else []
    assert after == before
    assert not any((stack.workdir / "data" / "storage" / "tmp").glob("*"))


def test_paused_deployment_answers_503_and_resumes(stack, people, colours):
    with stack.client(people["manage"]) as api:
        assert api.patch("/api/v1/deployments/colours", json={"state": "paused"}).status_code == 200
        time.sleep(1.2)  # the gateway's route cache lives one second
        r = predict(stack, people["infer"], image_bytes())
        assert r.status_code == 503 and r.headers.get("retry-after")
        assert api.patch("/api/v1/deployments/colours", json={"state": "running"}).status_code == 200
        stack.wait_deployment(api, "colours")
    time.sleep(1.2)
    assert predict(stack, people["infer"], image_bytes()).status_code == 200


def test_killed_runner_gives_503_never_a_hang_then_is_replaced(stack, people, colours):
    import os

    import psutil

    agent = psutil.Process(stack.procs["node-local"].pid)
    runners = [p for p in agent.children(recursive=True) if "inference.runner" in " ".join(p.cmdline())]
    assert runners, "the node agent should run the colours replica as a child process"
    for p in runners:
        os.kill(p.pid, signal.SIGKILL)
    r = predict(stack, people["infer"], image_bytes())
    assert r.status_code in (200, 503)
    if r.status_code == 503:
        assert r.json()["error"]["type"] == "unavailable"
    with stack.client(people["manage"]) as api:
        stack.wait_deployment(api, "colours", timeout=60)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if predict(stack, people["infer"], image_bytes()).status_code == 200:
            return
        time.sleep(0.3)
    raise AssertionError("the replaced replica never answered")
