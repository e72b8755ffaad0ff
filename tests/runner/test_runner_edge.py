"""A runner started with --redis-url: API keys from the console's cache, revocation, rate limits, usage
counters and the live metrics it publishes. Cache entries are written here with redis-py, with the
contract's entry format and key names (what the console's accounts/keycache.py writes)."""

from __future__ import annotations

import io
import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import redis
from PIL import Image

from contract.apikeys import INVALID_KEY_MESSAGE, TOMBSTONE, entry_sign, key_generate, key_hash, key_prefix
from contract.quotas import Quota, month_of, next_month_start
from contract.redis_keys import RedisKeys
from contract.signing import public_key_text, signing_key_from_secret
from contract.summaries import SummaryRefused, summary_open
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
CONSOLE = signing_key_from_secret("runner-edge-tests")  # stands in for the console's signing key


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
    manifest = image_manifest(deployment="keyed", model_version="keyed:1", team_id=TEAM,
                              key_verify_key=public_key_text(CONSOLE))  # fmt: skip
    write_manifest(model_dir, manifest)
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

    def issue(key_id: int, team_id: int = TEAM, scopes=("inference",), signer=CONSOLE, **limits) -> str:
        key, prefix = key_generate()
        name = NAMES.api_key(prefix)
        entry = entry_sign(signer, NAMES.prefix, prefix=prefix, digest=key_hash(key), key_id=key_id,
                           team_id=team_id, scopes=scopes, **limits)  # fmt: skip
        counters = [NAMES.usage(key_id), NAMES.rate_limit(key_id), NAMES.last_use(key_id)]
        # A clean slate: counters of the same key id left by an earlier run (the same Redis) must not add up.
        stale = counters + store.keys(f"{NAMES.prefix}:usage-month:{key_id}:*")
        store.delete(*stale)
        store.set(name, entry, ex=300)
        written.extend([name, *counters])
        key_ids.append(key_id)
        return key

    key_ids: list[int] = []
    yield issue
    for key_id in key_ids:  # month counters appear only once the runner counts, so look for them now
        written.extend(store.keys(f"{NAMES.prefix}:usage-month:{key_id}:*"))
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
    store.set(NAMES.api_key(key_prefix(key)), TOMBSTONE)  # what revocation does
    time.sleep(1.1)  # the runner trusts a positive answer for at most one second
    assert_error(predict(keyed_runner, key), 401, "unauthorized")


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer " + new_key(), "Bearer not-a-key", "Basic abc"],
    ids=["none", "unknown-key", "malformed", "basic"],  # the same ids in every xdist worker
)
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


def test_every_bad_key_gets_the_same_401_body(keyed_runner, issue_key, store) -> None:
    """Malformed, unknown, wrong secret, revoked, expired, and entries that are forged (another signing
    key), unsigned (the old format) or another key's: one body, byte for byte."""
    good = issue_key(9010)
    revoked = issue_key(9011)
    store.set(NAMES.api_key(key_prefix(revoked)), TOMBSTONE)
    expired = issue_key(9012, expires_at=time.time() - 1)
    forged = issue_key(9013, signer=signing_key_from_secret("attacker"))
    unsigned = new_key()
    store.set(
        NAMES.api_key(key_prefix(unsigned)),
        json.dumps({"key_id": 9014, "team_id": TEAM, "scopes": ["inference"]}),
        ex=60,
    )
    moved = new_key()  # a valid entry copied under another key's prefix
    store.set(NAMES.api_key(key_prefix(moved)), store.get(NAMES.api_key(key_prefix(good))), ex=60)
    wrong = good[:-3] + ("abc" if not good.endswith("abc") else "xyz")
    keys = {"malformed": "lt_nope", "unknown": new_key(), "wrong": wrong, "revoked": revoked, "expired": expired,
            "forged": forged, "unsigned": unsigned, "moved": moved}  # fmt: skip
    try:
        answers = {name: predict(keyed_runner, key) for name, key in keys.items()}
    finally:
        store.delete(NAMES.api_key(key_prefix(unsigned)), NAMES.api_key(key_prefix(moved)))
    assert {r.status_code for r in answers.values()} == {401}
    assert len({r.content for r in answers.values()}) == 1, {n: r.content for n, r in answers.items()}
    assert answers["forged"].json()["error"]["message"] == INVALID_KEY_MESSAGE
    assert predict(keyed_runner, good).status_code == 200


def test_a_key_limited_to_other_deployments_is_403_here(keyed_runner, issue_key) -> None:
    assert predict(keyed_runner, issue_key(9015, deployments=["keyed", "other"])).status_code == 200
    assert_error(predict(keyed_runner, issue_key(9016, deployments=["other"])), 403, "forbidden")


def test_a_spent_monthly_quota_is_429_with_retry_after(keyed_runner, issue_key, store) -> None:
    key = issue_key(9017, quota=Quota(requests=2))
    month = NAMES.usage_month(9017, month_of(datetime.now(UTC)))
    store.hset(month, "requests", 2)
    try:
        refused = predict(keyed_runner, key)
    finally:
        store.delete(month)
    assert_error(refused, 429, "quota_exceeded")
    reset = next_month_start(datetime.now(UTC))
    assert (
        refused.json()["error"]["message"] == f"monthly request quota of 2 spent; resets on {reset:%Y-%m-%d}"
    )
    assert int(refused.headers["Retry-After"]) >= 1


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
    month = store.hgetall(NAMES.usage_month(9006, month_of(datetime.now(UTC))))
    assert month == {b"requests": b"4", b"images": b"4"}  # what quotas read
    assert store.hget(NAMES.last_use(9006), "addr") == b"127.0.0.1"  # direct calls note the caller


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
            if (
                message and message["type"] == "message"
            ):  # sealed with the runner's token (contract.summaries)
                messages.append(summary_open(message["data"], token=RUNNER_TOKEN, prefix=NAMES.prefix,
                                             deployment="keyed", replica="r-test"))  # fmt: skip
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
    opened = summary_open(last, token=RUNNER_TOKEN, prefix=NAMES.prefix, deployment="keyed", replica="r-test")
    assert opened["deployment"] == "keyed"
    with pytest.raises(SummaryRefused, match="seal"):  # another replica's token does not open it
        summary_open(last, token="another-token", prefix=NAMES.prefix, deployment="keyed", replica="r-test")
    with pytest.raises(SummaryRefused, match="seal"):  # nor does another install's prefix
        summary_open(last, token=RUNNER_TOKEN, prefix="other", deployment="keyed", replica="r-test")
