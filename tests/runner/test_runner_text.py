"""Embeddings through a real runner process, checked against onnxruntime + numpy directly."""

from __future__ import annotations

import asyncio
import base64

import httpx
import numpy as np
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

PREDICT = "/v1/deployments/minibert/predict"
TEXTS = ["a cat sat on the mat", "lantau serves models at low latency in hong kong", "hi"]


def reference_embeddings(model_dir, texts: list[str]) -> np.ndarray:
    """Each text alone (no padding at all), mean-pooled and L2-normalised by hand."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(32)
    session = ort.InferenceSession(str(model_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    vectors = []
    for text in texts:
        encoding = tokenizer.encode(text)
        ids = np.array([encoding.ids], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(None, feeds)[0][0]
        mean = hidden.mean(axis=0)
        vectors.append(mean / np.linalg.norm(mean))
    return np.array(vectors)


def test_predict_mean_pools_and_normalises_like_the_reference(minibert_client, minibert_model_dir) -> None:
    response = minibert_client.post(PREDICT, json={"inputs": TEXTS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["deployment"] == "minibert" and body["model_version"] == "minibert:1"
    embeddings = np.array(body["embeddings"])
    assert embeddings.shape == (3, 32)
    # The runner batches the three texts padded to the longest: padding must not change the answer.
    np.testing.assert_allclose(embeddings, reference_embeddings(minibert_model_dir, TEXTS), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)
    assert set(body["timing_ms"]) == {"queue", "inference", "total"}


def test_predict_accepts_a_single_string(minibert_client, minibert_model_dir) -> None:
    response = minibert_client.post(PREDICT, json={"inputs": "hi"})
    assert response.status_code == 200
    np.testing.assert_allclose(
        response.json()["embeddings"], reference_embeddings(minibert_model_dir, ["hi"]), atol=1e-5
    )


def test_long_text_is_truncated_to_max_length(minibert_client) -> None:
    response = minibert_client.post("/v1/embeddings", json={"model": "minibert", "input": "word " * 500})
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["prompt_tokens"] == 32


def test_openai_embeddings_shape_and_usage(minibert_client, minibert_model_dir) -> None:
    response = minibert_client.post("/v1/embeddings", json={"model": "minibert", "input": TEXTS[:2]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "list" and body["model"] == "minibert"
    assert [(d["object"], d["index"]) for d in body["data"]] == [("embedding", 0), ("embedding", 1)]
    expected = reference_embeddings(minibert_model_dir, TEXTS[:2])
    np.testing.assert_allclose([d["embedding"] for d in body["data"]], expected, atol=1e-5)
    tokenizer = Tokenizer.from_file(str(minibert_model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokens = sum(len(tokenizer.encode(t).ids) for t in TEXTS[:2])
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


def test_openai_embeddings_base64_encoding(minibert_client) -> None:
    as_float = minibert_client.post("/v1/embeddings", json={"model": "minibert", "input": "hello"}).json()
    as_b64 = minibert_client.post(
        "/v1/embeddings", json={"model": "minibert", "input": "hello", "encoding_format": "base64"}
    ).json()
    decoded = np.frombuffer(base64.b64decode(as_b64["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(decoded, as_float["data"][0]["embedding"], atol=1e-6)


def test_concurrent_embedding_requests_match_sequential_ones(minibert_runner, minibert_model_dir) -> None:
    texts = [f"sentence number {i} " + "word " * (i % 7) for i in range(16)]

    async def send_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=minibert_runner.url) as client:
            return await asyncio.gather(*(client.post(PREDICT, json={"inputs": t}) for t in texts))

    responses = asyncio.run(send_all())
    assert [r.status_code for r in responses] == [200] * 16
    got = np.array([r.json()["embeddings"][0] for r in responses])
    np.testing.assert_allclose(got, reference_embeddings(minibert_model_dir, texts), atol=1e-5)


@pytest.mark.parametrize(
    ("path", "payload", "status", "error_type"),
    [
        (PREDICT, {"inputs": ""}, 422, "invalid_input"),
        (PREDICT, {"inputs": ["ok", "   "]}, 422, "invalid_input"),
        (PREDICT, {"inputs": []}, 422, "invalid_input"),
        (PREDICT, {"inputs": [1, 2]}, 422, "invalid_input"),
        (PREDICT, {"text": "hi"}, 422, "invalid_input"),
        ("/v1/embeddings", {"model": "other", "input": "hi"}, 404, "not_found"),
        ("/v1/embeddings", {"input": "hi"}, 422, "invalid_input"),
        ("/v1/embeddings", {"model": "minibert"}, 422, "invalid_input"),
        (
            "/v1/embeddings",
            {"model": "minibert", "input": "hi", "encoding_format": "int8"},
            422,
            "invalid_input",
        ),
        ("/v1/embeddings", {"model": "minibert", "input": "hi", "dimensions": 7}, 422, "invalid_input"),
    ],
)
def test_bad_text_requests_get_their_exact_status_and_type(
    minibert_client, path, payload, status, error_type
) -> None:
    response = minibert_client.post(path, json=payload)
    assert response.status_code == status, response.text
    assert response.json()["error"]["type"] == error_type


@pytest.mark.parametrize(
    ("path", "payload", "named"),
    [
        (PREDICT, {"inputs": "hi", "top_k": 1}, "top_k"),  # classifiers only; this model embeds
        (PREDICT, {"input": "hi"}, "input"),
        ("/v1/embeddings", {"model": "minibert", "input": "hi", "encoding": "float"}, "encoding"),
    ],
)
def test_a_field_the_route_does_not_take_is_named(minibert_client, path, payload, named) -> None:
    response = minibert_client.post(path, json=payload)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"].startswith(f"unknown field '{named}'")


@pytest.mark.parametrize(
    ("content", "content_type", "status", "error_type"),
    [
        (b'{"inputs": "caf\xe9"}', "application/json", 400, "bad_request"),
        (b'{"inputs": ', "application/json", 400, "bad_request"),
        (b"just text", "text/plain", 415, "unsupported_media_type"),
    ],
)
def test_undecodable_text_bodies(minibert_client, content, content_type, status, error_type) -> None:
    response = minibert_client.post(PREDICT, content=content, headers={"Content-Type": content_type})
    assert response.status_code == status, response.text
    assert response.json()["error"]["type"] == error_type
