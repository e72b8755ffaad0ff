"""Chat and completions through a real runner process serving an exported tiny Llama.

The model is untrained (its output is noise) but deterministic, and its end-of-sequence logits
are silenced so greedy answers run exactly ``max_tokens`` steps: the timing comparisons count
the same work on both sides.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import openai
import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM

from inference.demo.tiny_chat import save_untrained
from inference.export.causal_lm import export_model_folder
from inference.runner.generation.chat_template import render_chatml
from tests.support.runners import RUNNER_TOKEN, Runner, launch_runner

MODEL = "tiny"
HEADERS = {"X-Lantau-Runner-Token": RUNNER_TOKEN}
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
HELLO = [{"role": "user", "content": "hello, who are you?"}]


@pytest.fixture(scope="module")
def chat_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-llama")
    export_model_folder(save_untrained(out / "hf", "llama", silence_eos=True), out, deployment=MODEL)
    return out


@pytest.fixture(scope="module")
def chat_runner(chat_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    log_path = tmp_path_factory.mktemp("logs") / "tiny.log"
    runner = launch_runner(chat_model_dir, log_path, "--max-batch-size", "8", token=RUNNER_TOKEN)
    yield runner
    runner.stop()


@pytest.fixture
def client(chat_runner: Runner):
    with httpx.Client(base_url=chat_runner.url, headers=HEADERS, timeout=60) as client:
        yield client


def chat_body(messages: list[dict] = HELLO, max_tokens: int = 16, **extra: object) -> dict:
    return {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0} | extra


def sse_events(response: httpx.Response) -> list[dict | str]:
    """Each ``data:`` payload of an event stream, parsed; ``[DONE]`` stays a string."""
    events: list[dict | str] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def torch_greedy_text(model_dir: Path, prompt_text: str, steps: int) -> tuple[str, int]:
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    prompt = tokenizer.encode(prompt_text, add_special_tokens=False).ids
    model = AutoModelForCausalLM.from_pretrained(str(model_dir / "hf")).eval()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(steps):
            ids = torch.cat([ids, model(input_ids=ids).logits[:, -1:].argmax(-1)], dim=1)
    return tokenizer.decode(ids[0, len(prompt) :].tolist(), skip_special_tokens=True), len(prompt)


def test_greedy_chat_answers_what_the_pytorch_model_generates(client, chat_model_dir) -> None:
    response = client.post(CHAT, json=chat_body(max_tokens=20))
    assert response.status_code == 200, response.text
    body = response.json()
    expected, prompt_tokens = torch_greedy_text(chat_model_dir, render_chatml(HELLO), 20)
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    assert body["choices"][0]["message"] == {"role": "assistant", "content": expected}
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 20,
        "total_tokens": prompt_tokens + 20,
    }


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_greedy_stream_equals_the_non_streamed_answer(client, path) -> None:
    body = (
        chat_body(max_tokens=24)
        if path == CHAT
        else {"model": MODEL, "prompt": "Lantau is", "max_tokens": 24, "temperature": 0}
    )
    whole = client.post(path, json=body).json()
    with client.stream(
        "POST", path, json=body | {"stream": True, "stream_options": {"include_usage": True}}
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if isinstance(e, dict) and e["choices"]]
    if path == CHAT:
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        assert text == whole["choices"][0]["message"]["content"]
    else:
        assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
    assert len(chunks) > 10  # token by token, not one block
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert events[-2]["usage"] == whole["usage"]


def test_the_first_chunk_arrives_long_before_the_last_token(client, record_property) -> None:
    arrivals: list[float] = []
    started = time.perf_counter()
    with client.stream("POST", CHAT, json=chat_body(max_tokens=96, stream=True)) as response:
        for line in response.iter_lines():
            if line.startswith("data: {") and '"content"' in line and '"content":""' not in line:
                arrivals.append(time.perf_counter() - started)
    total = time.perf_counter() - started
    record_property("ttft_ms", round(arrivals[0] * 1000, 1))
    record_property("stream_total_ms", round(total * 1000, 1))
    assert len(arrivals) > 48
    # Streaming, not buffering: the first token comes well before the end, and when half the
    # stream's time has passed, some but not all of the tokens have arrived.
    assert arrivals[0] < 0.5 * total
    assert 1 <= sum(t <= total / 2 for t in arrivals) < len(arrivals)


def test_eight_concurrent_chats_finish_faster_than_eight_sequential_ones(
    chat_runner, client, record_property
) -> None:
    bodies = [
        chat_body([{"role": "user", "content": f"question number {i}: " + "why? " * i}], max_tokens=48)
        for i in range(8)
    ]
    client.post(CHAT, json=bodies[0])  # warm the connection and the graph
    started = time.perf_counter()
    sequential = [client.post(CHAT, json=body).json() for body in bodies]
    sequential_s = time.perf_counter() - started

    async def send_all() -> tuple[list[dict], float]:
        async with httpx.AsyncClient(base_url=chat_runner.url, headers=HEADERS, timeout=60) as session:
            began = time.perf_counter()
            answers = await asyncio.gather(*(session.post(CHAT, json=body) for body in bodies))
            return [a.json() for a in answers], time.perf_counter() - began

    concurrent, concurrent_s = asyncio.run(send_all())
    record_property("tokens_per_s_sequential", round(8 * 48 / sequential_s))
    record_property("tokens_per_s_concurrent", round(8 * 48 / concurrent_s))
    assert [a["choices"][0]["message"] for a in concurrent] == [
        a["choices"][0]["message"] for a in sequential
    ]
    assert concurrent_s < 0.8 * sequential_s, (concurrent_s, sequential_s)


def test_a_client_that_disconnects_cancels_its_sequence(chat_runner, client) -> None:
    with client.stream("POST", CHAT, json=chat_body(max_tokens=110, stream=True)) as response:
        lines = response.iter_lines()
        for _ in range(3):
            next(lines)
    deadline = time.monotonic() + 10
    while "cancelled after" not in chat_runner.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    cancelled = [line for line in chat_runner.log().splitlines() if "cancelled after" in line]
    assert cancelled, chat_runner.log()[-2000:]
    assert int(cancelled[-1].split("cancelled after ")[1].split()[0]) < 110
    assert client.post(CHAT, json=chat_body(max_tokens=4)).status_code == 200  # still serving


@pytest.mark.parametrize(
    ("path", "body", "status", "error_type", "words"),
    [
        (CHAT, {"model": MODEL, "messages": []}, 422, "invalid_input", "messages"),
        (COMPLETIONS, {"model": MODEL, "prompt": ""}, 422, "invalid_input", "empty"),
        (
            CHAT,
            {"model": MODEL, "messages": [{"role": "pirate", "content": "arr"}]},
            422,
            "invalid_input",
            "role",
        ),
        (CHAT, chat_body(max_tokens=0), 422, "invalid_input", "max_tokens"),
        (COMPLETIONS, {"model": MODEL, "prompt": "hi", "max_tokens": -5}, 422, "invalid_input", "max_tokens"),
        (COMPLETIONS, {"model": MODEL, "prompt": "hello " * 300}, 422, "invalid_input", "context is 128"),
        (
            COMPLETIONS,
            {"model": MODEL, "prompt": "hi", "max_tokens": 500},
            422,
            "invalid_input",
            "max_tokens (500)",
        ),
        (CHAT, chat_body(model="other"), 404, "not_found", "other"),
        (CHAT, {"messages": HELLO}, 422, "invalid_input", "model"),
        # a misspelt field is named, not ignored (the answer would have had the default length)
        (CHAT, chat_body(max_token=5), 422, "invalid_input", "unknown field 'max_token'"),
        (
            COMPLETIONS,
            {"model": MODEL, "prompt": "hi", "messages": HELLO},
            422,
            "invalid_input",
            "'messages'",
        ),
        (
            CHAT,
            {"model": MODEL, "messages": [{"role": "user", "content": "hi", "contnet": "x"}]},
            422,
            "invalid_input",
            "unknown field 'messages[0].contnet'",
        ),
        (
            CHAT,
            chat_body(stream=True, stream_options={"include_usgae": True}),
            422,
            "invalid_input",
            "unknown field 'stream_options.include_usgae'",
        ),
    ],
)
def test_malformed_requests_get_their_precise_error(client, path, body, status, error_type, words) -> None:
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == error_type and words in error["message"]


@pytest.mark.parametrize(
    ("content", "headers", "status", "error_type"),
    [
        (b'{"model": "tiny", "prompt": ', {"Content-Type": "application/json"}, 400, "bad_request"),
        (b'{"model": "tiny", "prompt": "caf\xe9"}', {"Content-Type": "application/json"}, 400, "bad_request"),
        (b'{"model": "tiny", "prompt": "hi"}', {"Content-Type": "text/plain"}, 415, "unsupported_media_type"),
    ],
)
def test_undecodable_bodies(client, content, headers, status, error_type) -> None:
    response = client.post(COMPLETIONS, content=content, headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["error"]["type"] == error_type


def test_the_runner_token_is_required(chat_runner) -> None:
    response = httpx.post(chat_runner.url + CHAT, json=chat_body())
    assert response.status_code == 401 and response.json()["error"]["type"] == "unauthorized"


@pytest.fixture
def openai_client(chat_runner: Runner):
    client = openai.OpenAI(
        base_url=chat_runner.url + "/v1", api_key="unused", default_headers=HEADERS, max_retries=0
    )
    yield client
    client.close()


def test_the_openai_client_chats_with_and_without_streaming(openai_client) -> None:
    answer = openai_client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=12, temperature=0)
    assert answer.choices[0].finish_reason == "length" and answer.usage.completion_tokens == 12
    stream = openai_client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == answer.choices[0].message.content
    assert chunks[-1].usage.total_tokens == answer.usage.total_tokens


def test_the_openai_client_completes_prompts_and_sees_errors(openai_client) -> None:
    answer = openai_client.completions.create(
        model=MODEL, prompt="Lantau is", max_tokens=8, temperature=0, seed=3
    )
    streamed = openai_client.completions.create(
        model=MODEL, prompt="Lantau is", max_tokens=8, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == answer.choices[0].text
    sampled = [
        openai_client.completions.create(
            model=MODEL, prompt="Lantau is", max_tokens=8, temperature=1.0, top_p=0.9, seed=11
        )
        for _ in range(2)
    ]
    assert sampled[0].choices[0].text == sampled[1].choices[0].text  # a seed reproduces a sample
    with pytest.raises(openai.UnprocessableEntityError, match="role"):
        openai_client.chat.completions.create(model=MODEL, messages=[{"role": "narrator", "content": "x"}])
    with pytest.raises(openai.NotFoundError):
        openai_client.chat.completions.create(model="gpt-4o", messages=HELLO)


def test_the_other_task_routes_refuse_a_generation_model(client) -> None:
    embeddings = client.post("/v1/embeddings", json={"model": MODEL, "input": "hi"})
    assert (
        embeddings.status_code == 404 and "does not serve embeddings" in embeddings.json()["error"]["message"]
    )
    predict = client.post(f"/v1/deployments/{MODEL}/predict", json={"image": "aGVsbG8="})
    assert predict.status_code == 404 and "/v1/chat/completions" in predict.json()["error"]["message"]
