"""In-process checks of the runner's parts: batcher, pre/post-processing, readiness before warm-up."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from PIL import Image

from inference.runner.app import create_app
from inference.runner.batcher import Batcher
from inference.runner.config import Preprocessing, RunnerConfig, load_manifest
from inference.runner.errors import InvalidInput, QueueFull
from inference.runner.metrics import Metrics
from inference.runner.postprocess import l2_normalize, mean_pool, softmax, top_k
from inference.runner.preprocess import ImagePreprocessor

PREP = Preprocessing(input_size=(224, 224), resize_shorter=256, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))


def make_batcher(calls: list[list[int]], **options) -> Batcher:
    def run_batch(items: list[int]) -> list[int]:
        calls.append(list(items))
        time.sleep(0.01)
        return [item * 10 for item in items]

    settings = {"max_batch_size": 4, "max_delay_s": 0.05, "max_queue": 16, **options}
    return Batcher(run_batch, metrics=Metrics("d", "d:1"), **settings)


def test_batcher_flushes_a_full_batch_without_waiting_for_the_delay() -> None:
    async def scenario() -> tuple[list[list[int]], list[int], float]:
        calls: list[list[int]] = []
        batcher = make_batcher(calls, max_delay_s=5.0)
        batcher.start()
        started = time.perf_counter()
        results = await asyncio.gather(*batcher.submit([1, 2, 3, 4]))
        elapsed = time.perf_counter() - started
        await batcher.stop()
        return calls, [r.value for r in results], elapsed

    calls, values, elapsed = asyncio.run(scenario())
    assert calls == [[1, 2, 3, 4]] and values == [10, 20, 30, 40] and elapsed < 1.0


def test_batcher_flushes_a_partial_batch_after_the_delay_and_skips_cancelled_items() -> None:
    async def scenario() -> tuple[list[list[int]], list[int]]:
        calls: list[list[int]] = []
        batcher = make_batcher(calls)
        batcher.start()
        gone, kept = batcher.submit([1, 2])
        gone.cancel()  # the client went away before its batch formed
        result = await kept
        await batcher.stop()
        return calls, [result.value, result.batch_size]

    calls, (value, size) = asyncio.run(scenario())
    assert calls == [[2]] and value == 20 and size == 1


def test_batcher_refuses_all_items_when_they_do_not_fit() -> None:
    async def scenario() -> int:
        batcher = make_batcher([], max_queue=4)
        with pytest.raises(QueueFull):
            batcher.submit([1, 2, 3, 4, 5])
        return len(batcher)

    assert asyncio.run(scenario()) == 0


def test_batcher_failure_fails_only_its_requests() -> None:
    def explode(items: list[int]) -> list[int]:
        raise RuntimeError("boom")

    async def scenario() -> None:
        batcher = Batcher(
            explode, max_batch_size=2, max_delay_s=0.0, max_queue=4, metrics=Metrics("d", "d:1")
        )
        batcher.start()
        with pytest.raises(RuntimeError):
            await batcher.submit([1])[0]
        assert batcher._task is not None and not batcher._task.done()
        await batcher.stop()

    asyncio.run(scenario())


def test_one_pass_resize_crop_matches_resize_then_crop() -> None:
    y, x = np.mgrid[0:300, 0:400]
    smooth = np.stack([x * 255 / 400, y * 255 / 300, (x + y) * 255 / 700], axis=-1)
    image = Image.fromarray(smooth.astype(np.uint8))
    fast = np.asarray(ImagePreprocessor(PREP).resize_crop(image), dtype=np.float32)
    resized = image.resize((341, 256), Image.Resampling.BILINEAR)
    left, top = round((341 - 224) / 2), round((256 - 224) / 2)
    slow = np.asarray(resized.crop((left, top, left + 224, top + 224)), dtype=np.float32)
    assert np.abs(fast - slow).mean() < 1.0  # same geometry; only sub-pixel resampling differs


def test_normalisation_gives_nchw_float32_with_mean_and_std() -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (500, 300), (255, 128, 0)).save(buffer, "PNG")
    array = ImagePreprocessor(PREP)(buffer.getvalue())
    assert array.shape == (3, 224, 224) and array.dtype == np.float32
    np.testing.assert_allclose(
        array[:, 100, 100], [(1 - 0.5) / 0.25, (128 / 255 - 0.5) / 0.25, -2.0], atol=1e-5
    )


def test_large_jpeg_is_decoded_at_reduced_size_with_the_right_output() -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (4000, 3000), (0, 255, 0)).save(buffer, "JPEG", quality=95)
    preprocessor = ImagePreprocessor(PREP)
    decoded = preprocessor.decode(buffer.getvalue())
    assert min(decoded.size) >= 256 and decoded.size[0] <= 1000  # draft() scaled it down by 4
    array = preprocessor(buffer.getvalue())
    assert array.shape == (3, 224, 224) and abs(float(array[1].mean()) - 2.0) < 0.05


def test_rgba_and_greyscale_images_are_converted_to_rgb() -> None:
    for mode in ("RGBA", "L", "P"):
        buffer = io.BytesIO()
        Image.new(mode, (50, 50)).save(buffer, "PNG")
        assert ImagePreprocessor(PREP)(buffer.getvalue()).shape == (3, 224, 224)


def test_zero_byte_image_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        ImagePreprocessor(PREP)(b"")


def test_softmax_and_top_k() -> None:
    probs = softmax(np.array([[1.0, 3.0, 2.0], [1000.0, 0.0, 0.0]]))
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)
    assert [i for i, _ in top_k(probs[0], 3)] == [1, 2, 0] and [i for i, _ in top_k(probs[0], 1)] == [1]
    assert np.isfinite(probs).all()


def test_mean_pool_ignores_padding_and_l2_normalises() -> None:
    hidden = np.array([[[1.0, 1.0], [3.0, 5.0], [100.0, 100.0]]], dtype=np.float32)
    pooled = mean_pool(hidden, np.array([[1, 1, 0]]))
    np.testing.assert_allclose(pooled, [[2.0, 3.0]])
    np.testing.assert_allclose(np.linalg.norm(l2_normalize(pooled), axis=1), [1.0])


def test_readyz_and_predict_answer_503_until_warm_up_is_done(colour_model_dir: Path) -> None:
    manifest = load_manifest(colour_model_dir)
    config = RunnerConfig(colour_model_dir, "127.0.0.1", 0, 8, 5.0, 256, 1, 1 << 20, None)

    async def scenario() -> list[tuple[int, dict, str | None]]:
        app = create_app(config, manifest, Metrics(manifest.deployment, manifest.model_version))
        async with TestClient(TestServer(app)) as client:
            answers = []
            for method, path in (
                ("GET", "/readyz"),
                ("POST", "/v1/deployments/colours/predict"),
                ("GET", "/healthz"),
            ):
                response = await client.request(
                    method, path, data=b"x", headers={"Content-Type": "image/png"}
                )
                answers.append((response.status, await response.json(), response.headers.get("Retry-After")))
            return answers

    (ready_status, ready, retry), (predict_status, predict, _), (health_status, _, _) = asyncio.run(
        scenario()
    )
    assert ready_status == 503 and ready["status"] == "loading" and retry == "1"
    assert predict_status == 503 and predict == {
        "error": {"type": "not_ready", "message": predict["error"]["message"]}
    }
    assert health_status == 200
