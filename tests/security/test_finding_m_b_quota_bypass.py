"""M-B of the security review of 2026-12-04: monthly quotas bypassed by cutting streams, and overrun by
parallel requests.

Real runner processes with a real Redis (no mock): a runner serving an untrained Llama big enough that
one decode step takes milliseconds on one CPU thread (so a client can leave while it still generates),
keys written as the console writes them (signed entries), and the console's `/v1/` gateway in-process in
front of a real colour-classifier runner. What must hold:

* a stream the client closes after 3 content chunks is billed one request, its prompt and the 3 tokens
  generated so far (before the fix: nothing at all);
* 20 parallel requests on a key with a quota of 10 requests get exactly 10 answers and ten 429
  `quota_exceeded` (before the fix: 20 answers), straight at a runner and through `/v1/`;
* no reservation is left behind once requests are answered, refused, failed or cut, and one left by a
  runner that died ages out.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import socket
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import redis

from accounts import keycache
from accounts.keyhash import verify_key_text
from accounts.services import api_key_create
from contract.apikeys import entry_sign, key_generate, key_hash
from contract.quotas import QUOTA_HEADER, Quota, month_of
from contract.redis_keys import RedisKeys
from contract.signing import public_key_text, signing_key_from_secret
from inference.credentials import runner_token
from inference.gateway import app as gateway
from inference.gateway import auth
from inference.runner import launch
from inference.runner.usage import RESERVE_BUCKET_S, RESERVE_BUCKETS
from tests.security.dataplane import Answer, call, colour_deployment, serve_replica
from tests.support.factories import image_bytes
from tests.support.gateway import run
from tests.support.runners import (
    REPO,
    RUNNER_TOKEN,
    Runner,
    image_manifest,
    launch_runner,
    redis_url_for_tests,
    runner_command,
    write_manifest,
)
from tests.support.tiny_models import colour_classifier

TEAM = 41
CHAT = "/v1/chat/completions"
CONSOLE = signing_key_from_secret("m-b-tests")  # stands in for the console's signing key
MESSAGES = [{"role": "user", "content": "count to one hundred, slowly"}]
CLIENT_TIMEOUT_S = 60.0


# --- a slow chat runner, keys as the console writes them ------------------------------------------


@pytest.fixture(scope="module")
def names() -> RedisKeys:
    return RedisKeys(f"m-b-{secrets.token_hex(4)}")  # this module's own keys, removed afterwards


@pytest.fixture(scope="module")
def store(names: RedisKeys):
    client = redis.Redis.from_url(redis_url_for_tests())
    client.ping()
    yield client
    stale = list(client.scan_iter(match=f"{names.prefix}:*"))
    if stale:
        client.delete(*stale)
    client.close()


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained 6-layer Llama, hidden size 768 (about 170 MB): one decode step costs about 10 ms on one
    thread, so a client that reads 3 chunks and leaves does so while the 4th token is still computed. Its
    end-of-sequence rows are zeroed, so it always generates ``max_tokens``."""
    import torch

    from inference.demo.tiny_chat import build_model, corpus, save_hf_folder, train_tokenizer
    from inference.export.causal_lm import export_model_folder

    out = tmp_path_factory.mktemp("m-b-chat")
    tokenizer = train_tokenizer(corpus(), 400, all_bytes=False)
    model = build_model(tokenizer, "llama", hidden=768, layers=6, context=128, init_std=0.2)
    with torch.no_grad():
        model.get_output_embeddings().weight[model.config.eos_token_id] = 0.0
    export_model_folder(save_hf_folder(model.eval(), tokenizer, out / "hf"), out, deployment="slow-chat")
    shutil.rmtree(out / "hf")
    manifest = json.loads((out / "lantau.json").read_text())
    manifest.update(team_id=TEAM, key_verify_key=public_key_text(CONSOLE))
    return write_manifest(out, manifest)


@pytest.fixture(scope="module")
def chat_runner(chat_dir: Path, names: RedisKeys, store, tmp_path_factory: pytest.TempPathFactory):
    runner = launch_runner(
        chat_dir, tmp_path_factory.mktemp("logs") / "slow-chat.log", "--redis-url", redis_url_for_tests(),
        "--redis-prefix", names.prefix, "--max-batch-size", "8", token=RUNNER_TOKEN,
    )  # fmt: skip
    yield runner
    runner.stop()
    assert "Traceback" not in runner.log()


@pytest.fixture
def issue_key(names: RedisKeys, store):
    """Write a signed key entry as the console does; returns (clear key, key id)."""
    ids = iter(range(secrets.randbelow(10**6) * 100, 10**9))

    def issue(**limits: object) -> tuple[str, int]:
        key, prefix = key_generate()
        key_id = next(ids)
        entry = entry_sign(CONSOLE, names.prefix, prefix=prefix, digest=key_hash(key), key_id=key_id,
                           team_id=TEAM, scopes=("inference",), **limits)  # fmt: skip
        store.set(names.api_key(prefix), entry, ex=600)
        return key, key_id

    return issue


def chat(runner: Runner, key: str, **extra: object) -> httpx.Response:
    body = {"model": "slow-chat", "messages": MESSAGES, "temperature": 0, "max_tokens": 3} | extra
    return httpx.post(runner.url + CHAT, json=body, headers={"Authorization": f"Bearer {key}"},
                      timeout=CLIENT_TIMEOUT_S)  # fmt: skip


def month(store, names: RedisKeys, key_id: int) -> dict[str, int]:
    row = store.hgetall(names.usage_month(key_id, month_of(datetime.now(UTC))))
    return {k.decode(): int(v) for k, v in row.items() if k != b"seeded"}


def settled(store, names: RedisKeys, key_id: int, requests: int, timeout: float = 10.0) -> dict[str, int]:
    """The key's month counter once it counts ``requests`` (runners flush every half second)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counted = month(store, names, key_id)
        if counted.get("requests", 0) >= requests:
            return counted
        time.sleep(0.1)
    return month(store, names, key_id)


def reserved(store, names: RedisKeys, key_id: int) -> dict[bytes, bytes]:
    return store.hgetall(names.quota_reserved(key_id))


def cut_stream(runner: Runner, key: str, chunks: int, max_tokens: int = 100) -> list[str]:
    """Stream a chat completion over a raw socket, read ``chunks`` content chunks, then close the socket
    at once (no [DONE] read): the attack of M-B. Returns the texts read."""
    body = json.dumps({"model": "slow-chat", "messages": MESSAGES, "temperature": 0, "stream": True,
                       "max_tokens": max_tokens}).encode()  # fmt: skip
    head = (f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
    texts: list[str] = []
    with socket.create_connection(("127.0.0.1", runner.port), timeout=CLIENT_TIMEOUT_S) as sock:
        sock.sendall(head + body)
        buffer = b""
        while len(texts) < chunks:
            data = sock.recv(65536)
            assert data, f"the stream ended after {len(texts)} content chunks: {buffer[-300:]!r}"
            buffer += data
            while len(texts) < chunks and b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                start = event.find(b"data: {")
                if start < 0:
                    continue
                delta = json.loads(event[start + 6 :])["choices"][0]["delta"]
                if delta.get("content"):
                    texts.append(delta["content"])
        sock.shutdown(socket.SHUT_RDWR)  # leave before [DONE]
    return texts


def test_m_b_a_stream_cut_after_three_chunks_is_billed_its_prompt_three_tokens_and_the_request(
    chat_runner: Runner, issue_key, store, names: RedisKeys
) -> None:
    calibration, _ = issue_key()
    whole = chat(chat_runner, calibration)  # the same greedy start, read whole: its prompt size
    assert whole.status_code == 200, whole.text
    prompt_tokens = whole.json()["usage"]["prompt_tokens"]
    assert whole.json()["usage"]["completion_tokens"] == 3

    key, key_id = issue_key(quota=Quota(tokens=100_000))  # a quota: the request also holds a reservation
    assert len(cut_stream(chat_runner, key, chunks=3)) == 3

    counted = settled(store, names, key_id, requests=1)
    assert counted == {"requests": 1, "tokens": prompt_tokens + 3}, counted  # before the fix: {}
    usage = {k.decode(): int(v) for k, v in store.hgetall(names.usage(key_id)).items()}
    assert usage == counted  # what the console's roll-up moves into PostgreSQL
    assert reserved(store, names, key_id) == {}  # its reservation settled, nothing stuck
    assert chat(chat_runner, key).status_code == 200  # the runner serves on


def test_m_b_twenty_parallel_requests_on_a_ten_request_quota_get_ten_answers_and_ten_429(
    chat_runner: Runner, issue_key, store, names: RedisKeys
) -> None:
    key, key_id = issue_key(quota=Quota(requests=10))
    start = threading.Barrier(20)
    answers: list[httpx.Response] = []

    def one() -> None:
        start.wait()
        answers.append(chat(chat_runner, key, max_tokens=8))

    threads = [threading.Thread(target=one) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(CLIENT_TIMEOUT_S)
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [200] * 10 + [429] * 10, statuses  # before the fix: twenty 200s
    for answer in answers:
        if answer.status_code == 429:
            error = answer.json()["error"]
            assert error["type"] == "quota_exceeded", error
            assert error["message"].startswith("monthly request quota of 10 spent; resets on ")
            assert int(answer.headers["Retry-After"]) >= 1
            assert "Traceback" not in answer.text
    counted = settled(store, names, key_id, requests=10)
    assert counted["requests"] == 10 and counted["tokens"] > 0
    assert reserved(store, names, key_id) == {}
    assert chat(chat_runner, key).status_code == 429  # spent for the month


def test_m_b_no_reservation_is_left_behind_after_answers_refusals_failures_and_cuts(
    chat_runner: Runner, issue_key, store, names: RedisKeys
) -> None:
    key, key_id = issue_key(quota=Quota(requests=50, tokens=100_000))
    assert chat(chat_runner, key).status_code == 200  # answered
    assert chat(chat_runner, key, stream=True).status_code == 200  # streamed to the end
    too_long = chat(chat_runner, key, max_tokens=10_000)  # refused before admission: not counted
    assert too_long.status_code == 422 and "context is 128 tokens" in too_long.json()["error"]["message"]
    with pytest.raises(
        httpx.TimeoutException
    ):  # the client gives up on a long answer: the runner is cancelled
        httpx.post(chat_runner.url + CHAT, headers={"Authorization": f"Bearer {key}"}, timeout=0.3,
                   json={"model": "slow-chat", "messages": MESSAGES, "max_tokens": 100})  # fmt: skip
    cut_stream(chat_runner, key, chunks=1)  # cut mid-stream
    counted = settled(store, names, key_id, requests=4)
    assert counted["requests"] == 4, counted  # the 422 is not counted, the cut ones are
    deadline = time.monotonic() + 10
    while reserved(store, names, key_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert reserved(store, names, key_id) == {}
    assert not store.exists(names.quota_reserved(key_id))

    # A reservation left by a runner that died mid-request ages out: older than RESERVE_BUCKETS minutes,
    # it neither counts against the quota nor stays in Redis once the key is next admitted.
    spent, spent_id = issue_key(quota=Quota(requests=5))
    dead = int(store.time()[0]) // RESERVE_BUCKET_S - RESERVE_BUCKETS - 1
    store.hset(names.quota_reserved(spent_id), mapping={f"{dead}:requests": 5, f"{dead}:tokens": 900})
    assert chat(chat_runner, spent).status_code == 200
    assert f"{dead}:requests".encode() not in reserved(store, names, spent_id)

    # The gateway's quota header is checked: a malformed one is a clear 400, no traceback.
    bad = httpx.post(chat_runner.url + CHAT, json={"model": "slow-chat", "messages": MESSAGES},
                     headers={"X-Lantau-Runner-Token": RUNNER_TOKEN, "X-Lantau-Key-Id": str(key_id),
                              QUOTA_HEADER: "{not json"}, timeout=CLIENT_TIMEOUT_S)  # fmt: skip
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "bad_request", bad.text
    assert QUOTA_HEADER in bad.json()["error"]["message"] and "Traceback" not in bad.text


# --- through the console's /v1/ -------------------------------------------------------------------

PREDICT = "/v1/deployments/colours/predict"


@pytest.fixture
def colours_via_gateway(owner, team, tmp_path: Path, settings, monkeypatch):
    """The colour deployment behind `/v1/`, served by a real runner on the console's Redis and prefix."""
    monkeypatch.setattr(auth, "_redis", None)
    monkeypatch.setattr(auth, "_limiter", None)
    monkeypatch.setattr(gateway, "routes", type(gateway.routes)())
    replica = colour_deployment(team, owner, tmp_path)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    colour_classifier(model_dir / "model.onnx")
    write_manifest(model_dir, image_manifest(team_id=team.pk, key_verify_key=verify_key_text()))
    env = launch.runner_env(token=runner_token(replica.pk), redis_url=settings.REDIS_URL)
    command = runner_command(model_dir, "--redis-prefix", settings.REDIS_PREFIX)
    handle = launch.start(command, env=env, cwd=REPO, log_path=tmp_path / "runner.log")
    handle.wait_ready(60)
    serve_replica(replica, handle.url)
    yield
    handle.stop()
    assert "Traceback" not in (tmp_path / "runner.log").read_text()


@pytest.mark.django_db(transaction=True)  # the gateway reads the database from worker threads
def test_m_b_twenty_parallel_requests_through_the_consoles_v1_hold_a_ten_request_quota(
    colours_via_gateway, owner, team
) -> None:
    row, clear = api_key_create(team=team, actor=owner, name="m-b", scopes=["inference"], quota_requests=10)
    names, client = keycache.names(), keycache.client()
    # Row ids restart with each test database: counters an earlier run left for this id must not add up.
    client.delete(names.usage(row.pk), names.usage_rolling(row.pk), names.quota_reserved(row.pk),
                  names.usage_month(row.pk, month_of(datetime.now(UTC))), names.last_use(row.pk))  # fmt: skip
    answers: list[Answer] = []

    async def scenario() -> None:
        async def one() -> Answer:
            return await call("POST", PREDICT, key=clear, body=image_bytes(), content_type="image/jpeg")

        answers.extend(await asyncio.wait_for(asyncio.gather(*(one() for _ in range(20))), CLIENT_TIMEOUT_S))

    run(scenario)
    statuses = sorted(answer.status for answer in answers)
    assert statuses == [200] * 10 + [429] * 10, statuses  # before the fix: twenty 200s
    for answer in answers:
        if answer.status == 429:
            assert answer.json()["error"]["type"] == "quota_exceeded", answer.body
            assert int(answer.headers["retry-after"]) >= 1
    deadline = time.monotonic() + 10
    while client.exists(names.quota_reserved(row.pk)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not client.exists(names.quota_reserved(row.pk))  # settled into the month counter
    used = client.hgetall(names.usage_month(row.pk, month_of(datetime.now(UTC))))
    assert int(used[b"requests"]) == 10 and int(used[b"images"]) == 10

    later: list[Answer] = []

    async def again() -> None:
        later.append(await call("POST", PREDICT, key=clear, body=image_bytes(), content_type="image/jpeg"))

    run(again)
    assert (
        later[0].status == 429 and "monthly request quota of 10 spent" in later[0].json()["error"]["message"]
    )
