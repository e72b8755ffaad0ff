"""Image classification through a real runner process: every input form, top_k, batching, errors."""

from __future__ import annotations

import asyncio
import base64
import io
import re

import httpx
import pytest
from PIL import Image

PREDICT = "/v1/deployments/colours/predict"
RGB = {"red": (230, 20, 20), "green": (20, 230, 20), "blue": (20, 20, 230)}


def encode(colour: str, fmt: str = "JPEG", size: tuple[int, int] = (40, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, RGB[colour]).save(buffer, fmt)
    return buffer.getvalue()


def assert_error(response: httpx.Response, status: int, error_type: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["type"] == error_type
    assert body["error"]["message"] and "Traceback" not in response.text
    return body


def test_raw_jpeg_body_is_classified_with_softmax_scores(colour_client: httpx.Client) -> None:
    response = colour_client.post(PREDICT, content=encode("red"), headers={"Content-Type": "image/jpeg"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["deployment"] == "colours" and body["model_version"] == "colours:1"
    assert len(body["predictions"]) == 3  # default top_k is 5, capped at the label count
    top = body["predictions"][0]
    assert (top["label"], top["index"]) == ("red", 0) and top["score"] > 0.99
    scores = [p["score"] for p in body["predictions"]]
    assert scores == sorted(scores, reverse=True) and sum(scores) == pytest.approx(1.0, abs=1e-5)
    assert set(body["timing_ms"]) == {"queue", "inference", "total"}
    assert body["timing_ms"]["total"] >= body["timing_ms"]["inference"] > 0


def test_png_multipart_upload_is_classified(colour_client: httpx.Client) -> None:
    files = {"file": ("leaf.png", encode("green", "PNG"), "image/png")}
    response = colour_client.post(PREDICT, files=files)
    assert response.status_code == 200, response.text
    assert response.json()["predictions"][0]["label"] == "green"


def test_base64_json_with_top_k_returns_k_predictions(colour_client: httpx.Client) -> None:
    image = base64.b64encode(encode("blue", "WEBP")).decode()
    response = colour_client.post(PREDICT, json={"image": image, "top_k": 2})
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    assert len(predictions) == 2 and predictions[0]["label"] == "blue"


def test_top_k_query_parameter_limits_predictions(colour_client: httpx.Client) -> None:
    response = colour_client.post(
        PREDICT, params={"top_k": "1"}, content=encode("red", "PNG"), headers={"Content-Type": "image/png"}
    )
    assert response.status_code == 200 and len(response.json()["predictions"]) == 1


@pytest.mark.parametrize("top_k", [0, 4, "two", True])
def test_top_k_outside_one_to_label_count_is_422(colour_client: httpx.Client, top_k: object) -> None:
    image = base64.b64encode(encode("red")).decode()
    assert_error(colour_client.post(PREDICT, json={"image": image, "top_k": top_k}), 422, "invalid_input")


def test_sixteen_concurrent_requests_are_answered_correctly_in_batches(colour_runner, runner_token) -> None:
    colours = ["red", "green", "blue", "red"] * 4
    headers = {"X-Lantau-Runner-Token": runner_token, "Content-Type": "image/jpeg"}

    async def send_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=colour_runner.url, headers=headers) as client:
            return await asyncio.gather(*(client.post(PREDICT, content=encode(c)) for c in colours))

    responses = asyncio.run(send_all())
    assert [r.status_code for r in responses] == [200] * 16
    assert [r.json()["predictions"][0]["label"] for r in responses] == colours
    metrics = httpx.get(f"{colour_runner.url}/metrics").text
    buckets = dict(re.findall(r'lantau_runner_batch_size_bucket\{[^}]*le="([^"]+)"\} (\d+)', metrics))
    assert int(buckets["+Inf"]) > int(buckets["1"]), "no batch larger than 1 was formed"
    assert 'lantau_runner_queue_depth{deployment="colours",model_version="colours:1"} 0' in metrics
    assert 'phase="inference"' in metrics and 'status="200"' in metrics


def test_missing_or_wrong_runner_token_is_401(colour_runner) -> None:
    image = {"Content-Type": "image/jpeg"}
    assert_error(
        httpx.post(colour_runner.url + PREDICT, content=encode("red"), headers=image), 401, "unauthorized"
    )
    wrong = {**image, "X-Lantau-Runner-Token": "nope"}
    assert_error(
        httpx.post(colour_runner.url + PREDICT, content=encode("red"), headers=wrong), 401, "unauthorized"
    )


def test_probes_and_metrics_need_no_token(colour_runner) -> None:
    assert httpx.get(f"{colour_runner.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{colour_runner.url}/readyz").json() == {"status": "ready"}
    assert httpx.get(f"{colour_runner.url}/metrics").status_code == 200


def test_token_never_appears_in_the_log(colour_runner, runner_token) -> None:
    assert runner_token not in colour_runner.log()


def test_unknown_deployment_is_404(colour_client: httpx.Client) -> None:
    response = colour_client.post(
        "/v1/deployments/other/predict", content=encode("red"), headers={"Content-Type": "image/jpeg"}
    )
    assert_error(response, 404, "not_found")


def test_unknown_route_is_404_json(colour_client: httpx.Client) -> None:
    assert_error(colour_client.get("/v1/nothing-here"), 404, "not_found")


def test_wrong_method_is_405_json(colour_client: httpx.Client) -> None:
    assert_error(colour_client.get(PREDICT), 405, "method_not_allowed")


@pytest.mark.parametrize(
    ("content", "content_type", "status", "error_type"),
    [
        (b"{not json", "application/json", 400, "bad_request"),
        (b'{"image": "%%%not-base64%%%"}', "application/json", 400, "bad_request"),
        (b'{"image": "\xff\xfe"}', "application/json", 400, "bad_request"),
        (b'["a list"]', "application/json", 422, "invalid_input"),
        (b'{"picture": ""}', "application/json", 422, "invalid_input"),
        (b"hello", "text/plain", 415, "unsupported_media_type"),
        (b"not an image at all", "image/jpeg", 422, "invalid_input"),
        (b"", "image/png", 422, "invalid_input"),
        (b"GIF89a" + b"\x00" * 20, "image/png", 422, "invalid_input"),
    ],
)
def test_bad_bodies_get_their_exact_status_and_type(
    colour_client: httpx.Client, content: bytes, content_type: str, status: int, error_type: str
) -> None:
    response = colour_client.post(PREDICT, content=content, headers={"Content-Type": content_type})
    assert_error(response, status, error_type)


def test_truncated_jpeg_is_422(colour_client: httpx.Client) -> None:
    data = encode("red", size=(300, 300))
    response = colour_client.post(
        PREDICT, content=data[: len(data) // 2], headers={"Content-Type": "image/jpeg"}
    )
    assert_error(response, 422, "invalid_input")


def test_multipart_without_file_field_is_422(colour_client: httpx.Client) -> None:
    response = colour_client.post(PREDICT, files={"photo": ("x.png", encode("red", "PNG"), "image/png")})
    assert_error(response, 422, "invalid_input")


def test_a_field_the_route_does_not_take_is_named(colour_client: httpx.Client) -> None:
    image = base64.b64encode(encode("red")).decode()
    body = assert_error(colour_client.post(PREDICT, json={"image": image, "topk": 2}), 422, "invalid_input")
    assert body["error"]["message"].startswith("unknown field 'topk'")
    form = colour_client.post(
        PREDICT, files={"file": ("x.png", encode("red", "PNG"), "image/png")}, data={"topk": "2"}
    )
    assert "unknown form field 'topk'" in assert_error(form, 422, "invalid_input")["error"]["message"]
    ok = colour_client.post(PREDICT, json={"image": image, "top_k": 2})  # the field spelt right
    assert ok.status_code == 200 and len(ok.json()["predictions"]) == 2


def test_body_over_the_limit_is_413_by_content_length(colour_client: httpx.Client) -> None:
    response = colour_client.post(PREDICT, content=b"\0" * 200_001, headers={"Content-Type": "image/jpeg"})
    assert_error(response, 413, "payload_too_large")


def test_chunked_body_over_the_limit_is_413_while_reading(colour_client: httpx.Client) -> None:
    def chunks():
        for _ in range(30):
            yield b"\0" * 10_000

    response = colour_client.post(PREDICT, content=chunks(), headers={"Content-Type": "image/jpeg"})
    assert "content-length" not in response.request.headers
    assert_error(response, 413, "payload_too_large")


@pytest.mark.parametrize("size", [(10_001, 1), (7000, 7000)])
def test_images_over_the_pixel_limits_are_refused_before_decoding(colour_client: httpx.Client, size) -> None:
    buffer = io.BytesIO()
    Image.new("1", size).save(buffer, "PNG")  # tiny on the wire, huge when decoded
    assert len(buffer.getvalue()) < 200_000
    response = colour_client.post(PREDICT, content=buffer.getvalue(), headers={"Content-Type": "image/png"})
    body = assert_error(response, 422, "invalid_input")
    assert "too large" in body["error"]["message"]


def test_embeddings_route_on_an_image_model_is_404(colour_client: httpx.Client) -> None:
    assert_error(
        colour_client.post("/v1/embeddings", json={"model": "colours", "input": "hi"}), 404, "not_found"
    )


def test_errors_are_counted_by_status_in_metrics(colour_runner, colour_client: httpx.Client) -> None:
    colour_client.post(PREDICT, content=b"x", headers={"Content-Type": "text/plain"})
    metrics = httpx.get(f"{colour_runner.url}/metrics").text
    assert 'route="/v1/deployments/{name}/predict",status="415"' in metrics
