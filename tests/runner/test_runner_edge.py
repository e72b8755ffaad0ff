"""A runner started with --redis-url: API keys from the console's cache, revocation, rate limits, usage
counters and the live metrics it publishes. Cache entries are written here with redis-py, with the
contract's entry format and key names (what the console's accounts/keycache.py writes)."""

from __future__ import annotations

import io
import json
import shutil
import time
from pathlib import Path

import httpx
import pytest
import redis
from PIL import Image

from contract.apikeys import entry_json, key_generate, key_hash
from contract.redis_keys import RedisKeys
from tests.support.runners import (
    RUNNER_TOKEN,
    Runner,
    image_manifest,
    launch_runner,
    redis_url_for_tests,
    write_manifest,
)

TEAM = 7
PREDICT = "/v1/deployments/keyed/predict"
NAMES = RedisKeys()  # the default prefix, as the runner has without --redis-prefix


def new_key() -> str:
    return key_generate()[0]


def jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (24, 24), (20, 230, 20)).save(buffer, "JPEG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def store() -> redis.Redis:
    client = redis.Redis.from_url(redis_url_for_tests())
    client.ping()
    yield client
    client.close()


@pytest.fixture(scope="module")
def keyed_runner(colour_model_dir: Path, tmp_path_factory: pytest.TempPathFactory, store) -> Runner:
    """The colour classifier owned by team 7, checking keys in Redis, behind a gateway token too."""
    model_dir = tmp_path_factory.mktemp("keyed")
    shutil.copy(colour_model_dir / "model.onnx", model_dir / "model.onnx")
    write_manifest(model_dir, image_manifest(deployment="keyed", model_version="keyed:1", team_id=TEAM))
    runner = launch_runner(
        model_dir, tmp_path_factory.mktemp("logs") / "keyed.log", "--redis-url", redis_url_for_tests(),
        "--replica", "r-test", token=RUNNER_TOKEN,
    )  # fmt: skip
    yield runner
    runner.stop()


@pytest.fixture
def issue_key(store):
    """Write cache entries like the console does; remove them (and their counters) afterwards."""
    written: list[str] = []

    def issue(key_id: int, team_id: int = TEAM, scopes=("inference",), **limits) -> str:
        key = new_key()
        name = NAMES.api_key(key_hash(key))
        store.set(name, entry_json(key_id=key_id, team_id=team_id, scopes=scopes, **limits), ex=300)
        written.extend([name, NAMES.usage(key_id), NAMES.rate_limit(key_id)])
        return key

    yield issue
    if written:
        store.delete(*written)


def predict(runner: Runner, key: str | None = None, **headers: str) -> httpx.Response:
    sent = {"Content-Type": "image/jpeg", **headers}
    if key is not None:
        sent["Authorization"] = f"Bearer {key}"
    return httpx.post(runner.url + PREDICT, content=jpeg(), headers=sent, timeout=30)


def assert_error(response: httpx.Response, status: int, error_type: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["type"] == error_type


def test_api_key_from_the_redis_cache_is_accepted_directly(keyed_runner, issue_key) -> None:
    response = predict(keyed_runner, issue_key(9001))
    assert response.status_code == 200, response.text
    assert response.json()["predictions"][0]["label"] == "green"


def test_revoked_key_is_refused_within_a_second(keyed_runner, issue_key, store) -> None:
    key = issue_key(9002)
    assert predict(keyed_runner, key).status_code == 200
    store.delete(NAMES.api_key(key_hash(key)))  # what revocation does
    time.sleep(1.1)  # the runner trusts a positive answer for at most one second
    assert_error(predict(keyed_runner, key), 401, "unauthorized")


@pytest.mark.parametrize("authorization", [None, "Bearer " + new_key(), "Bearer not-a-key", "Basic abc"])
def test_missing_unknown_or_malformed_keys_are_401(keyed_runner, authorization) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    assert_error(predict(keyed_runner, **headers), 401, "unauthorized")


def test_another_teams_key_or_a_key_without_inference_scope_is_403(keyed_runner, issue_key) -> None:
    assert_error(predict(keyed_runner, issue_key(9003, team_id=TEAM + 1)), 403, "forbidden")
    assert_error(predict(keyed_runner, issue_key(9004, scopes=("manage",))), 403, "forbidden")


def test_gateway_runner_token_still_works_and_wrong_token_is_401(keyed_runner) -> None:
    assert predict(keyed_runner, **{"X-Lantau-Runner-Token": RUNNER_TOKEN}).status_code == 200
    assert_error(predict(keyed_runner, **{"X-Lantau-Runner-Token": "nope"}), 401, "unauthorized")


def test_key_over_its_rate_limit_gets_429_with_retry_after(keyed_runner, issue_key) -> None:
    key = issue_key(9005, rate_per_s=0.5, burst=2)
    statuses = [predict(keyed_runner, key) for _ in range(4)]
    assert [r.status_code for r in statuses[:2]] == [200, 200]
    limited = statuses[-1]
    assert_error(limited, 429, "rate_limited")
    assert int(limited.headers["Retry-After"]) >= 1


def wait_for(condition, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    return condition()


def test_usage_counters_count_requests_and_images_per_key(keyed_runner, issue_key, store) -> None:
    key = issue_key(9006)
    for _ in range(3):
        assert predict(keyed_runner, key).status_code == 200
    assert predict(keyed_runner, key, **{"Content-Type": "text/plain"}).status_code == 415  # not counted
    gateway = {"X-Lantau-Runner-Token": RUNNER_TOKEN, "X-Lantau-Key-Id": "9006"}
    assert predict(keyed_runner, **gateway).status_code == 200  # the gateway names the key it checked

    def counters() -> dict[bytes, bytes]:
        found = store.hgetall(NAMES.usage(9006))
        return found if found.get(b"requests") == b"4" else {}

    assert wait_for(counters) == {b"requests": b"4", b"images": b"4"}


def test_live_metrics_are_published_every_second(keyed_runner, issue_key, store) -> None:
    key = issue_key(9007)
    pubsub = store.pubsub()
    pubsub.subscribe(NAMES.metrics_channel("keyed"))
    try:
        assert predict(keyed_runner, key).status_code == 200
        messages = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(messages) < 2:
            message = pubsub.get_message(timeout=1.0)
            if message and message["type"] == "message":
                messages.append(json.loads(message["data"]))
    finally:
        pubsub.close()
    assert messages, "no live metrics published within five seconds"
    summary = messages[0]
    assert {"deployment", "model_version", "replica", "ts", "requests", "requests_per_s", "errors",
            "latency_ms", "mean_batch_size", "queue_depth"} <= set(summary)  # fmt: skip
    assert summary["deployment"] == "keyed" and summary["replica"] == "r-test"
    assert set(summary["latency_ms"]) == {"p50", "p95", "p99"}
    last = store.get(NAMES.metrics_last("keyed", "r-test"))
    assert last is not None and 0 < store.ttl(NAMES.metrics_last("keyed", "r-test")) <= 10
    assert json.loads(last)["deployment"] == "keyed"
