"""Faults on this machine: PostgreSQL and Redis restarted under load, a runner killed mid-stream.

A private stack (console, worker, node agent) runs on its own embedded PostgreSQL and Redis, so the
tests can restart them without touching the servers every other test uses. While a server is down,
clients must get 200 or a clean 503 with `Retry-After`, never a 500 and never a hang (each request
has a client timeout); afterwards jobs end in a final state, deployments serve again and no upload is
left half-stored. A Celery worker killed mid-job is covered by
`tests/integration/test_jobs_e2e.py::test_a_job_whose_worker_is_killed_ends_failed_and_can_be_retried`.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest

from tests.support.deployments import deploy_colours, deploy_tiny_chat
from tests.support.factories import image_bytes
from tests.support.faults import CLIENT_TIMEOUT_S, Load, PrivateServices, private_stack
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.e2e

RECOVERY_S = 60  # how long serving may take to come back once a server is up again
FINAL = {"succeeded", "failed", "cancelled"}
CHAT_CONTEXT = 2048  # long enough that a stream is still running when its runner is killed


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    """The private stack with team `faults`: keys, a colour classifier and a tiny chat, both ready."""
    root = tmp_path_factory.mktemp("faults")
    services = PrivateServices(root / "services")
    services.start("postgres", "redis")
    stack = private_stack(root / "stack", services)
    try:
        stack.start()
        stack.start_node("local", "hk")
        stack.user("fay", "faults", "owner")
        keys = {"manage": stack.api_key("fay", "manage"), "infer": stack.api_key("fay", "inference")}
        deploy_colours(stack, keys["manage"], "fault-colours", root)
        deploy_tiny_chat(stack, keys["manage"], "fay", "fault-chat", root, context=CHAT_CONTEXT)
        with stack.client(keys["manage"]) as api:
            stack.wait_deployment(api, "fault-colours", timeout=120)
            stack.wait_deployment(api, "fault-chat", timeout=120)
        yield stack, services, keys, root
    finally:
        stack.stop()
        services.stop_all()


def _predict(client: httpx.Client) -> httpx.Response:
    return client.post(
        "/v1/deployments/fault-colours/predict",
        content=image_bytes((250, 10, 10)),
        headers={"Content-Type": "image/jpeg"},
    )


def _upload(model: bytes):
    def request(client: httpx.Client) -> httpx.Response:
        return client.post(
            "/api/v1/models",
            files={"file": ("m.onnx", model, "application/octet-stream")},
            data={"name": "fault-uploads", "task": "image-classification", "labels": "\n".join(COLOURS)},
        )

    return request


def _serves_again(stack, keys) -> None:
    """Every deployment is ready and answers 200 within RECOVERY_S."""
    deadline = time.monotonic() + RECOVERY_S
    with stack.client(keys["manage"]) as api:
        for name in ("fault-colours", "fault-chat"):
            stack.wait_deployment(api, name, timeout=RECOVERY_S)
    with stack.client(keys["infer"]) as c:
        while time.monotonic() < deadline:
            chat = c.post(
                "/v1/chat/completions",
                json={
                    "model": "fault-chat",
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 4,
                },
            )
            if _predict(c).status_code == 200 and chat.status_code == 200:
                return
            time.sleep(0.5)
    raise AssertionError(f"serving did not come back within {RECOVERY_S}s\n{stack.log_tail('console')}")


def _jobs_end(stack, keys) -> None:
    deadline = time.monotonic() + 90
    with stack.client(keys["manage"]) as api:
        while time.monotonic() < deadline:
            jobs = api.get("/api/v1/jobs").json()
            if all(job["status"] in FINAL for job in jobs):
                return
            time.sleep(1)
    raise AssertionError(f"jobs not final: {[(j['id'], j['status']) for j in jobs]}")


def _no_half_stored_upload(stack) -> None:
    """Every stored blob belongs to a version's artifact, and nothing is left in staging."""
    storage = stack.workdir / "data" / "storage"
    blobs = {p.name for p in (storage / "sha256").rglob("*") if p.is_file()}
    with psycopg.connect(stack.env["DATABASE_URL"]) as conn:
        known = {row[0] for row in conn.execute("SELECT sha256 FROM inference_artifact")}
    assert blobs <= known, f"blobs without a version: {sorted(blobs - known)}"
    assert not [p for p in (storage / "tmp").glob("*")] if (storage / "tmp").exists() else True


def _start_job(stack, keys) -> None:
    with stack.client(keys["manage"]) as api:
        version = api.get("/api/v1/deployments/fault-colours").json()["model_version_id"]
        r = api.post("/api/v1/jobs", json={"version_id": version, "kind": "benchmark", "options": {}})
        assert r.status_code == 201, r.text


@pytest.mark.parametrize("server", ["redis", "postgres"])
def test_restarting_a_server_under_load_gives_clean_503s_then_everything_recovers(faults, server):
    stack, services, keys, root = faults
    model = colour_classifier(root / f"upload-{server}.onnx").read_bytes()
    _start_job(stack, keys)
    bearer = {"Authorization": f"Bearer {keys['infer']}"}
    manage = {"Authorization": f"Bearer {keys['manage']}"}
    with (
        Load(_predict, stack.url, bearer, clients=3, max_s=60) as predictions,
        Load(_upload(model), stack.url, manage, clients=1, max_s=60, pause_s=0.5) as uploads,
    ):
        time.sleep(1)
        services.restart(server, down_s=3)
        time.sleep(2)
    assert predictions.outcomes and uploads.outcomes
    assert not predictions.unclean(), predictions.unclean()[:5]
    assert not [
        o for o in uploads.outcomes if o.status not in (201, 503) or o.status == 503 and not o.retry_after
    ]
    assert any(o.status == 200 for o in predictions.outcomes)
    seen = [o.status for o in predictions.outcomes + uploads.outcomes]
    assert 503 in seen, f"no client noticed {server} going down: {sorted(set(seen))}"
    _serves_again(stack, keys)
    _jobs_end(stack, keys)
    _no_half_stored_upload(stack)


def _runner_of(stack, deployment: str) -> psutil.Process:
    """The node agent's runner process serving ``deployment`` (its model folder's manifest names it)."""
    agent = psutil.Process(stack.procs["node-local"].pid)
    found = []
    for proc in agent.children(recursive=True):
        cmd = proc.cmdline()
        if "inference.runner" in cmd and "--model-dir" in cmd:
            manifest = Path(cmd[cmd.index("--model-dir") + 1]) / "lantau.json"
            if manifest.exists() and json.loads(manifest.read_text()).get("deployment") == deployment:
                found.append(proc)
    assert len(found) == 1, found
    return found[0]


def test_a_runner_killed_mid_stream_ends_the_stream_and_is_replaced(faults):
    stack, _services, keys, _root = faults
    runner = _runner_of(stack, "fault-chat")
    body = {
        "model": "fault-chat",
        "messages": [{"role": "user", "content": "tell me everything"}],
        "max_tokens": CHAT_CONTEXT - 64,
        "stream": True,
    }
    events: list[str] = []
    started = time.monotonic()
    with stack.client(keys["infer"]) as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        try:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    if len(events) == 3:
                        runner.send_signal(signal.SIGKILL)
        except httpx.HTTPError:
            pass  # a cut connection is a clean end too; a hang would trip the client timeout
    assert time.monotonic() - started < CLIENT_TIMEOUT_S + 5
    assert len(events) >= 3 and events[-1] != "[DONE]", events[-3:]  # cut mid-way, not finished
    if events[-1].startswith("{") and "error" in json.loads(events[-1]):
        assert json.loads(events[-1])["error"]["message"]
    _serves_again(stack, keys)
