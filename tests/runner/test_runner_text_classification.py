"""A text classifier exported from a Hugging Face folder, served by a real runner process."""

from __future__ import annotations

import json
import shutil

import httpx
import numpy as np
import pytest

from tests.support.runners import launch_runner
from tests.support.tiny_models import tiny_bert_folder

LABELS = ["negative", "positive"]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    from inference.conversion.export import export_onnx

    tmp = tmp_path_factory.mktemp("textcls")
    folder = tiny_bert_folder(tmp / "hf", classifier=True)
    out = tmp / "served"
    export_onnx(folder, out, "text-classification")
    if not (out / "tokenizer.json").exists():
        shutil.copy(folder / "tokenizer.json", out / "tokenizer.json")
    manifest = {
        "deployment": "sentiment",
        "task": "text-classification",
        "model_file": "model.onnx",
        "tokenizer_file": "tokenizer.json",
        "labels": LABELS,
        "max_length": 32,
    }
    (out / "lantau.json").write_text(json.dumps(manifest))
    runner = launch_runner(out, tmp / "runner.log", "--max-batch-size", "4")
    yield runner, out
    runner.stop()


def test_texts_get_ranked_labels_that_match_onnxruntime(classifier):
    import onnxruntime as ort
    from tokenizers import Tokenizer

    runner, folder = classifier
    texts = ["a fine day", "terrible weather again and again"]
    r = httpx.post(f"{runner.url}/v1/deployments/sentiment/predict", json={"inputs": texts, "top_k": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["predictions"]) == 2 and {p["label"] for p in body["predictions"][0]} == set(LABELS)
    session = ort.InferenceSession(str(folder / "model.onnx"))
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    for text, ranked in zip(texts, body["predictions"], strict=True):
        enc = tok.encode(text)
        feeds = {
            "input_ids": np.array([enc.ids]),
            "attention_mask": np.ones((1, len(enc.ids)), dtype=np.int64),
            "token_type_ids": np.array([enc.type_ids]),
        }
        logits = session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})[0][0]
        probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        assert ranked[0]["index"] == int(np.argmax(probs))
        assert ranked[0]["score"] == pytest.approx(float(probs.max()), abs=1e-4)


def test_bad_text_classification_requests_get_precise_errors(classifier):
    runner, _ = classifier
    url = f"{runner.url}/v1/deployments/sentiment/predict"
    assert httpx.post(url, json={"text": "x"}).status_code == 422
    assert httpx.post(url, json={"inputs": ""}).status_code == 422
    assert httpx.post(url, json={"inputs": "ok", "top_k": 9}).status_code == 422
    assert (
        httpx.post(url, content=b"{not json", headers={"Content-Type": "application/json"}).status_code == 400
    )
