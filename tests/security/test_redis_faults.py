"""A stalled Redis never turns into 500s or hangs: while the test's own redis-server is stopped (SIGSTOP),
four clients calling through the in-process gateway and straight at a runner get 200 or 503 with
`Retry-After`, and all get 200 again once it resumes. Usage counts made meanwhile are kept for later.

The client timeout (60 s) is far above the server side's Redis timeouts (2 s at the gateway, 1 s at the
runner), so a hang fails the test instead of passing slowly.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from accounts import keycache
from accounts.keyhash import verify_key_text
from accounts.services import api_key_create
from inference.credentials import runner_token
from inference.gateway import app as gateway
from inference.gateway import auth
from inference.runner import launch
from tests.security.dataplane import Answer, PrivateRedis, call, colour_deployment, serve_replica
from tests.support.factories import image_bytes
from tests.support.gateway import run
from tests.support.runners import REPO, image_manifest, runner_command, write_manifest
from tests.support.tiny_models import colour_classifier

pytestmark = pytest.mark.django_db(transaction=True)  # the gateway reads the database from worker threads

PREDICT = "/v1/deployments/colours/predict"
CLIENTS, ROUNDS = 4, 3
CLIENT_TIMEOUT_S = 60.0


@pytest.fixture
def private_redis(tmp_path: Path, settings, monkeypatch):
    server = PrivateRedis(tmp_path)
    settings.REDIS_URL = server.url  # the gateway and the key cache both use the private server
    forget_clients = getattr(keycache.client, "cache_clear", lambda: None)  # the console keeps one client
    forget_clients()
    monkeypatch.setattr(auth, "_redis", None)
    monkeypatch.setattr(auth, "_limiter", None)
    monkeypatch.setattr(gateway, "routes", type(gateway.routes)())
    yield server
    server.stop()
    forget_clients()


@pytest.fixture
def served(private_redis: PrivateRedis, owner, team, tmp_path: Path, settings):
    """The colour deployment served by a runner that uses the private Redis; (clear key, runner URL)."""
    replica = colour_deployment(team, owner, tmp_path)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    colour_classifier(model_dir / "model.onnx")
    write_manifest(model_dir, image_manifest(team_id=team.pk, key_verify_key=verify_key_text()))
    env = launch.runner_env(token=runner_token(replica.pk), redis_url=private_redis.url)
    command = runner_command(
        model_dir, "--redis-prefix", settings.REDIS_PREFIX
    )  # the console's (per xdist worker)
    handle = launch.start(command, env=env, cwd=REPO, log_path=tmp_path / "runner.log")
    handle.wait_ready(60)
    serve_replica(replica, handle.url)
    _, clear = api_key_create(team=team, actor=owner, name="faults", scopes=["inference"])
    yield clear, handle.url
    private_redis.resume()
    handle.stop()
    log = (tmp_path / "runner.log").read_text()
    assert "Traceback" not in log and clear not in log


async def via_gateway(key: str) -> Answer:
    return await call("POST", PREDICT, key=key, body=image_bytes(), content_type="image/jpeg")


async def direct(client: httpx.AsyncClient, url: str, key: str) -> Answer:
    response = await client.post(url + PREDICT, content=image_bytes(), headers={
        "Content-Type": "image/jpeg", "Authorization": f"Bearer {key}"})  # fmt: skip
    return Answer(response.status_code, dict(response.headers), response.content)


async def clients(key: str, url: str) -> list[Answer]:
    """CLIENTS concurrent clients, each sending ROUNDS requests through the gateway and ROUNDS direct."""
    async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as http:

        async def one() -> list[Answer]:
            answers = []
            for _ in range(ROUNDS):
                answers.append(await via_gateway(key))
                answers.append(await direct(http, url, key))
            return answers

        groups = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(CLIENTS))), CLIENT_TIMEOUT_S)
    return [answer for group in groups for answer in group]


def assert_served_or_retry_later(answers: list[Answer]) -> None:
    for answer in answers:
        assert answer.status in (200, 503), (answer.status, answer.body[:300])
        if answer.status == 503:
            assert int(answer.headers["retry-after"]) >= 1
            assert answer.json()["error"]["type"] in ("unavailable", "not_ready")


def test_a_stalled_redis_gives_200_or_503_with_retry_after_never_500_or_a_hang(served, private_redis) -> None:
    key, url = served
    seen: dict[str, list[Answer]] = {}

    async def scenario() -> None:
        seen["before"] = await clients(key, url)
        private_redis.stall()
        await asyncio.sleep(1.5)  # past the runner's 1 s key cache, so it must ask the stalled Redis
        seen["stalled"] = await clients(key, url)
        private_redis.resume()
        seen["after"] = await clients(key, url)

    run(scenario)
    assert {a.status for a in seen["before"]} == {200}
    assert_served_or_retry_later(seen["stalled"])
    assert any(a.status == 503 for a in seen["stalled"])  # the stall was felt, and answered cleanly
    assert {a.status for a in seen["after"]} == {200}


def test_an_unreachable_redis_gives_503_with_retry_after(served, private_redis) -> None:
    key, url = served
    private_redis.process.kill()
    private_redis.process.wait(10)
    seen: list[Answer] = []

    async def scenario() -> None:
        seen.extend(await clients(key, url))

    run(scenario)
    assert_served_or_retry_later(seen)
    assert {a.status for a in seen} == {503}
