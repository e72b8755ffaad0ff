"""Hostile inference requests get a precise 4xx in the error envelope, write nothing and log no secret,
both at a runner called directly and through the console's `/v1/` gateway (in-process ASGI).

Each case names what it sends: a JSON body nested 100,000 levels deep, a decompression-bomb PNG, a GIF
sent as JPEG, a truncated JPEG, invalid and oversized base64, a 5 MB prompt, a prompt plus max_tokens
over the context, and too many stop strings, messages or inputs.
"""

from __future__ import annotations

import base64
import io
import json
import random
import struct
import zlib
from pathlib import Path

import httpx
import pytest
from PIL import Image

from accounts import keycache
from accounts.services import api_key_create
from inference.credentials import runner_token
from inference.demo.tiny_chat import save_untrained
from inference.export.causal_lm import export_model_folder
from inference.gateway import app as gateway
from inference.gateway import auth
from tests.security.dataplane import call, colour_deployment, serve_replica
from tests.support.factories import image_bytes
from tests.support.gateway import run
from tests.support.runners import RUNNER_TOKEN, Runner, image_manifest, launch_runner, write_manifest
from tests.support.tiny_models import colour_classifier, minilm_tokenizer, tiny_bert_onnx

DEEP_JSON = b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
HEADERS = {"X-Lantau-Runner-Token": RUNNER_TOKEN}


def png_bomb(width: int = 30_000, height: int = 30_000) -> bytes:
    """A valid PNG header announcing 900 megapixels, followed by a little compressed data: a few
    hundred bytes that would need gigabytes to decode."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    rows = zlib.compress(b"\x00" * (width + 1) * 4)  # the first four rows; the rest would follow
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def truncated_jpeg() -> bytes:
    """A noisy 300x300 JPEG cut in half: its headers parse, its pixel data ends early."""
    buffer = io.BytesIO()
    Image.frombytes("RGB", (300, 300), random.Random(7).randbytes(300 * 300 * 3)).save(buffer, "JPEG")
    return buffer.getvalue()[: len(buffer.getvalue()) // 2]


def assert_refused(response: httpx.Response, status: int, type_: str, words: str = "") -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == type_ and words in error["message"]
    assert "Traceback" not in response.text


@pytest.fixture(scope="module")
def colour_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model_dir = tmp_path_factory.mktemp("colours")
    colour_classifier(model_dir / "model.onnx")
    return write_manifest(model_dir, image_manifest())


@pytest.fixture(scope="module")
def colour_runner(colour_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    log_path = tmp_path_factory.mktemp("logs") / "colours.log"
    runner = launch_runner(colour_model_dir, log_path, "--max-body-bytes", "300000", token=RUNNER_TOKEN)
    yield runner
    runner.stop()


@pytest.fixture(scope="module")
def bert_runner(tmp_path_factory: pytest.TempPathFactory):
    model_dir = tmp_path_factory.mktemp("minibert")
    tiny_bert_onnx(model_dir)
    (model_dir / "tokenizer.json").write_bytes(minilm_tokenizer().read_bytes())
    manifest = {"deployment": "minibert", "model_version": "minibert:1", "task": "feature-extraction",
                "model_file": "model.onnx", "tokenizer_file": "tokenizer.json", "max_length": 32}  # fmt: skip
    write_manifest(model_dir, manifest)
    log_path = tmp_path_factory.mktemp("logs") / "minibert.log"
    runner = launch_runner(model_dir, log_path, "--max-inputs", "4", token=RUNNER_TOKEN)
    yield runner
    runner.stop()


@pytest.fixture(scope="module")
def chat_runner(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("tiny-llama")
    export_model_folder(save_untrained(out / "hf", "llama", context=128), out, deployment="tiny")
    log_path = tmp_path_factory.mktemp("logs") / "tiny.log"
    runner = launch_runner(out, log_path, "--max-messages", "8", token=RUNNER_TOKEN)
    yield runner
    runner.stop()


def post(runner: Runner, path: str, **kwargs: object) -> httpx.Response:
    return httpx.post(runner.url + path, headers=HEADERS | kwargs.pop("headers", {}), timeout=60, **kwargs)  # type: ignore[operator,arg-type]


PREDICT = "/v1/deployments/colours/predict"


@pytest.mark.parametrize(
    ("body", "content_type", "status", "type_", "words"),
    [
        (DEEP_JSON, "application/json", 400, "bad_request", "nests deeper than 32 levels"),
        (png_bomb(), "image/png", 422, "invalid_input", "too large"),
        (image_bytes(fmt="GIF"), "image/jpeg", 422, "invalid_input", "not a decodable JPEG, PNG or WebP"),
        (truncated_jpeg(), "image/jpeg", 422, "invalid_input", "truncated or corrupt"),
        (b'{"image": "not*base64!"}', "application/json", 400, "bad_request", "not valid base64"),
        (json.dumps({"image": base64.b64encode(b"\0" * 300_000).decode()}).encode(), "application/json",
         413, "payload_too_large", "limit"),
    ],
    ids=["json-100k-deep", "png-bomb", "gif-as-jpeg", "truncated-jpeg", "invalid-base64", "oversized-base64"],
)  # fmt: skip
def test_the_runner_refuses_hostile_images_and_bodies_precisely(
    colour_runner: Runner, body: bytes, content_type: str, status: int, type_: str, words: str
) -> None:
    response = post(colour_runner, PREDICT, content=body, headers={"Content-Type": content_type})
    assert_refused(response, status, type_, words)
    assert httpx.get(colour_runner.url + "/healthz").status_code == 200  # still serving
    fine = post(colour_runner, PREDICT, content=image_bytes(), headers={"Content-Type": "image/jpeg"})
    assert fine.status_code == 200 and fine.json()["predictions"][0]["label"] == "red"
    log = colour_runner.log()
    assert "Traceback" not in log and "RecursionError" not in log and RUNNER_TOKEN not in log


def test_the_runner_refuses_too_many_inputs_and_deep_json_for_embeddings(bert_runner: Runner) -> None:
    too_many = post(bert_runner, "/v1/embeddings", json={"model": "minibert", "input": ["a"] * 5})
    assert_refused(too_many, 422, "invalid_input", "the limit is 4")
    deep = post(
        bert_runner, "/v1/embeddings", content=DEEP_JSON, headers={"Content-Type": "application/json"}
    )
    assert_refused(deep, 400, "bad_request", "nests deeper")
    assert (
        post(bert_runner, "/v1/embeddings", json={"model": "minibert", "input": ["a"] * 4}).status_code == 200
    )
    assert "Traceback" not in bert_runner.log()


def chat(**extra: object) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4} | extra


@pytest.mark.parametrize(
    ("path", "body", "status", "type_", "words"),
    [
        ("/v1/completions", {"model": "tiny", "prompt": "a" * 5_000_000, "max_tokens": 1}, 413,
         "payload_too_large", "'prompt' is 5000000 bytes"),
        ("/v1/completions", {"model": "tiny", "prompt": "hello there", "max_tokens": 10_000}, 422,
         "invalid_input", "this model's context is 128 tokens"),
        ("/v1/chat/completions", chat(stop=["a", "b", "c", "d", "e"]), 422, "invalid_input",
         "'stop' holds 5 strings; the limit is 4"),
        ("/v1/chat/completions", chat(messages=[{"role": "user", "content": "x"}] * 9), 422, "invalid_input",
         "'messages' holds 9 messages; the limit is 8"),
    ],
    ids=["5mb-prompt", "over-context", "too-many-stops", "too-many-messages"],
)  # fmt: skip
def test_the_runner_refuses_oversized_generation_requests(
    chat_runner: Runner, path: str, body: dict, status: int, type_: str, words: str
) -> None:
    assert_refused(post(chat_runner, path, json=body), status, type_, words)
    assert post(chat_runner, "/v1/chat/completions", json=chat()).status_code == 200
    assert "Traceback" not in chat_runner.log()


# Through the gateway: the same refusals, plus what only the gateway checks (names, in-flight bounds).


@pytest.fixture
def served_colours(owner, team, tmp_path, colour_model_dir: Path, monkeypatch):
    """A deployment named colours whose ready replica is a runner holding that replica's token, and an
    inference key: (clear key, key row, runner token)."""
    monkeypatch.setattr(auth, "_redis", None)
    monkeypatch.setattr(auth, "_limiter", None)
    monkeypatch.setattr(gateway, "routes", type(gateway.routes)())
    replica = colour_deployment(team, owner, tmp_path)
    token = runner_token(replica.pk)
    runner = launch_runner(
        colour_model_dir, tmp_path / "runner.log", "--max-body-bytes", "300000", token=token
    )
    serve_replica(replica, runner.url)
    api_key, clear = api_key_create(team=team, actor=owner, name="hostile", scopes=["inference"])
    yield clear, api_key, token
    runner.stop()
    assert "Traceback" not in runner.log() and token not in runner.log()
    keycache.client().delete(keycache.names().api_key(api_key.prefix))


pytestmark_gateway = pytest.mark.django_db(transaction=True)


@pytestmark_gateway
def test_the_gateway_refuses_hostile_bodies_without_a_500_or_a_trace(served_colours, caplog) -> None:
    key, api_key, token = served_colours
    results: dict[str, tuple[int, str, str]] = {}

    async def scenario() -> None:
        cases = {
            "deep-openai": ("/v1/embeddings", b'{"model": "colours", "input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "application/json"),
            "deep-predict": (PREDICT, DEEP_JSON, "application/json"),
            "png-bomb": (PREDICT, png_bomb(), "image/png"),
            "gif-as-jpeg": (PREDICT, image_bytes(fmt="GIF"), "image/jpeg"),
            "bad-base64": (PREDICT, b'{"image": "not*base64!"}', "application/json"),
            "huge-name": ("/v1/embeddings", json.dumps({"model": "x" * 9_000_000, "input": "a"}).encode(), "application/json"),
            "bad-name": ("/v1/chat/completions", b'{"model": "../../etc", "messages": []}', "application/json"),
        }  # fmt: skip
        for name, (path, body, content_type) in cases.items():
            answer = await call("POST", path, key=key, body=body, content_type=content_type)
            results[name] = (answer.status, answer.json()["error"]["type"], answer.json()["error"]["message"])

    run(scenario)
    assert results["deep-openai"][:2] == (400, "bad_request") and "nests deeper" in results["deep-openai"][2]
    assert results["deep-predict"][:2] == (400, "bad_request")  # answered by the runner, relayed as is
    assert results["png-bomb"][:2] == (422, "invalid_input")
    assert results["gif-as-jpeg"][:2] == (422, "invalid_input")
    assert results["bad-base64"][:2] == (400, "bad_request")
    assert results["huge-name"][:2] == (400, "bad_request") and "deployment name" in results["huge-name"][2]
    assert results["bad-name"][:2] == (400, "bad_request")
    assert len(gateway.routes) == 1  # colours, which the predict cases reached; no made-up name
    assert keycache.client().exists(keycache.names().usage(str(api_key.pk))) == 0  # no usage counted
    assert key not in caplog.text and token not in caplog.text and "Traceback" not in caplog.text


@pytestmark_gateway
def test_the_gateway_caches_only_deployments_that_exist(served_colours, settings) -> None:
    key, _, _ = served_colours

    async def scenario() -> None:
        for n in range(20):
            missing = await call(
                "POST",
                "/v1/embeddings",
                key=key,
                body=json.dumps({"model": f"nope-{n}", "input": "a"}).encode(),
            )
            assert missing.status == 404 and missing.json()["error"]["type"] == "not_found"
        assert len(gateway.routes) == 0
        ok = await call("POST", PREDICT, key=key, body=image_bytes(), content_type="image/jpeg")
        assert ok.status == 200 and ok.json()["predictions"][0]["label"] == "red"
        assert len(gateway.routes) == 1

    run(scenario)


@pytestmark_gateway
def test_the_gateway_refuses_an_oversized_declared_body_before_the_key_check(
    served_colours, settings
) -> None:
    settings.MAX_PREDICT_BYTES = 4096

    async def scenario() -> None:
        answer = await call("POST", PREDICT, key=None, body=b"\0" * 5000, content_type="image/jpeg")
        assert answer.status == 413 and answer.json()["error"]["type"] == "payload_too_large"

    run(scenario)


@pytestmark_gateway
def test_too_many_requests_in_flight_get_429_with_retry_after(served_colours, settings, team) -> None:
    key, _, _ = served_colours
    settings.GATEWAY_MAX_INFLIGHT_PER_DEPLOYMENT = 1
    settings.GATEWAY_MAX_INFLIGHT_PER_TEAM = 1

    async def scenario() -> None:
        with gateway.inflight.hold(deployment="colours", team_id=team.pk):  # one request still being served
            busy = await call("POST", PREDICT, key=key, body=image_bytes(), content_type="image/jpeg")
            assert busy.status == 429 and busy.headers["retry-after"] == "1"
            assert busy.json()["error"]["type"] == "too_many_in_flight"
            assert "colours" in busy.json()["error"]["message"]
        settings.GATEWAY_MAX_INFLIGHT_PER_DEPLOYMENT = 10
        with gateway.inflight.hold(deployment="another", team_id=team.pk):  # the team's bound holds too
            busy = await call("POST", PREDICT, key=key, body=image_bytes(), content_type="image/jpeg")
            assert (
                busy.status == 429
                and "this team already has 1 requests in flight" in busy.json()["error"]["message"]
            )
        done = await call("POST", PREDICT, key=key, body=image_bytes(), content_type="image/jpeg")
        assert done.status == 200
        assert not gateway.inflight.by_deployment and not gateway.inflight.by_team  # released

    run(scenario)
