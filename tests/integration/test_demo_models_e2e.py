"""The quick start's demo deployments, seeded by `manage.py seed_demo`, answer real requests."""

from __future__ import annotations

import io

import numpy as np
import pytest

pytestmark = pytest.mark.e2e

CAT_CLASSES = {"tabby, tabby cat", "tiger cat", "Egyptian cat"}


@pytest.fixture(scope="module")
def demo(stack):
    stack.manage("ensure_admin")
    stack.manage("seed_demo")
    manage_key = stack.api_key("admin", "manage")
    with stack.client(manage_key) as api:
        stack.wait_deployment(api, "efficientnet-lite0", timeout=120)
        stack.wait_deployment(api, "minilm-l6", timeout=120)
    return stack.api_key("admin", "inference")


def test_seed_demo_is_idempotent(stack, demo):
    out = stack.manage("seed_demo")
    assert "Registered" not in out and "created" not in out


def test_efficientnet_finds_the_cat_in_chelsea(stack, demo):
    import skimage.data
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(skimage.data.chelsea()).save(buf, format="JPEG", quality=90)
    with stack.client(demo) as c:
        r = c.post(
            "/v1/deployments/efficientnet-lite0/predict",
            content=buf.getvalue(),
            headers={"Content-Type": "image/jpeg"},
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["predictions"]) == 5
    assert CAT_CLASSES & {p["label"] for p in body["predictions"]}
    assert body["predictions"][0]["label"] in CAT_CLASSES
    assert body["timing_ms"]["total"] >= body["timing_ms"]["inference"] > 0


def test_minilm_embeddings_rank_related_sentences_closer(stack, demo):
    texts = [
        "A cat sleeps on the sofa.",
        "A kitten is napping on the couch.",
        "Stock markets fell sharply today.",
    ]
    with stack.client(demo) as c:
        r = c.post("/v1/embeddings", json={"model": "minilm-l6", "input": texts})
    assert r.status_code == 200, r.text
    vectors = np.array([d["embedding"] for d in r.json()["data"]])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    similar, unrelated = vectors[0] @ vectors[1], vectors[0] @ vectors[2]
    assert similar > 0.5 > unrelated


def test_efficientnet_static_int8_job_keeps_its_answers(stack, demo):
    """The issue's accuracy bar on real photos (speed is reported by the job and `make bench`, not asserted)."""
    import time

    key = stack.api_key("admin", "manage")
    with stack.client(key) as api:
        parent = api.get("/api/v1/models/efficientnet-lite0").json()["versions"][-1]
        job = api.post("/api/v1/jobs", json={"version_id": parent["id"], "kind": "quantize_int8"}).json()
        deadline = time.monotonic() + 600
        while (body := api.get(f"/api/v1/jobs/{job['id']}").json())["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, body
            time.sleep(1)
        assert body["status"] == "succeeded", body["error"]
        child = next(
            v
            for v in api.get("/api/v1/models/efficientnet-lite0").json()["versions"]
            if v["id"] == body["output_id"]
        )
    agreement = child["report"]["agreement"]
    assert agreement["count"] >= 100
    # The bar, which is also the job's default tuning target: met, not just approached.
    assert child["report"]["tuning"]["target_met"] is True, child["report"]["tuning"]["summary"]
    assert agreement["confident_top1_agreement"] >= 0.99
    assert agreement["parent_top1_in_child_top5"] >= 0.99
    assert child["precision"] == "int8" and child["size_bytes"] < parent["size_bytes"] / 2
    assert child["report"]["conversion"]["options"]["per_channel"] is True
    print("INT8 default job:", {k: agreement[k] for k in ("count", "confident_top1_agreement",
          "parent_top1_in_child_top5", "top1_agreement") if k in agreement},
          "speed-up", child["report"].get("latency", {}).get("speedup"))  # fmt: skip


def test_tiny_chat_streams_through_the_gateway_with_the_openai_client(stack, demo):
    from openai import OpenAI

    with stack.client(stack.api_key("admin", "manage")) as api:
        stack.wait_deployment(api, "tiny-chat", timeout=120)
    client = OpenAI(base_url=stack.url + "/v1", api_key=demo, max_retries=0)
    messages = [{"role": "user", "content": "Where is Lantau?"}]
    whole = client.chat.completions.create(model="tiny-chat", messages=messages, temperature=0, max_tokens=24)
    text = whole.choices[0].message.content
    assert text and whole.usage.completion_tokens > 0
    chunks = client.chat.completions.create(
        model="tiny-chat", messages=messages, temperature=0, max_tokens=24, stream=True
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text  # greedy streaming equals the whole answer, through the gateway
    assert [m.id for m in client.models.list().data] == ["efficientnet-lite0", "minilm-l6", "tiny-chat"]
