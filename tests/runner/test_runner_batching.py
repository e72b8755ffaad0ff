"""When the batcher dispatches: at once when idle, everything queued once the engine frees, never past
a request's deadline. Checked with in-process batchers and with real runner processes."""

from __future__ import annotations

import asyncio
import io
import re
import threading

import httpx
import pytest
from PIL import Image

from inference.runner.batcher import Batcher
from inference.runner.errors import QueueTimeout
from inference.runner.metrics import Metrics
from tests.support.runners import launch_runner


class GatedModel:
    """A fake model whose first call blocks until released, recording every batch it receives."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, items: list[int]) -> list[int]:
        self.calls.append(list(items))
        self.entered.set()
        self.release.wait(10)
        return [item * 10 for item in items]


def gated_batcher(model: GatedModel, **options) -> Batcher:
    settings = {"max_batch_size": 8, "max_delay_s": 5.0, "max_queue": 64, "max_wait_s": 5.0, **options}
    return Batcher(model, metrics=Metrics("d", "d:1"), **settings)


def test_lone_request_is_dispatched_at_once_despite_a_long_max_delay() -> None:
    async def scenario() -> float:
        model = GatedModel()
        model.release.set()
        batcher = gated_batcher(model, max_delay_s=5.0)
        batcher.start()
        result = await asyncio.wait_for(batcher.submit([1])[0], 4.0)
        await batcher.stop()
        return result.queue_s

    assert asyncio.run(scenario()) < 0.5  # the configured delay is 5 s


def test_queue_fills_while_a_batch_runs_and_forms_the_next_batch() -> None:
    async def scenario(model: GatedModel) -> list[int]:
        batcher = gated_batcher(model)
        batcher.start()
        first = batcher.submit([1])[0]
        await asyncio.to_thread(model.entered.wait, 5)  # the engine is now busy with [1]
        rest = batcher.submit([2, 3]) + batcher.submit([4])
        model.release.set()
        results = await asyncio.gather(first, *rest)
        await batcher.stop()
        return [r.batch_size for r in results]

    model = GatedModel()
    sizes = asyncio.run(scenario(model))
    assert model.calls == [[1], [2, 3, 4]] and sizes == [1, 3, 3, 3]


def test_batch_waits_for_requests_still_being_preprocessed() -> None:
    async def scenario(model: GatedModel) -> None:
        batcher = gated_batcher(model)
        batcher.start()
        with batcher.incoming(1):  # a second request is being decoded
            first = batcher.submit([1])[0]
            await asyncio.sleep(0.05)
            assert not model.calls, "dispatched without waiting for the request on its way"
        second = batcher.submit([2])[0]
        await asyncio.gather(first, second)
        await batcher.stop()

    model = GatedModel()
    model.release.set()
    asyncio.run(scenario(model))
    assert model.calls == [[1, 2]]


def test_request_past_its_deadline_is_answered_without_reaching_the_model() -> None:
    async def scenario(model: GatedModel) -> None:
        batcher = gated_batcher(model, max_wait_s=0.05)
        batcher.start()
        batcher.submit([1])
        await asyncio.to_thread(model.entered.wait, 5)
        late = batcher.submit([2])[0]
        with pytest.raises(QueueTimeout):
            await asyncio.wait_for(late, 5.0)  # answered while [1] still runs
        model.release.set()
        await batcher.stop()

    model = GatedModel()
    asyncio.run(scenario(model))
    assert model.calls == [[1]]


def png(size: int = 128) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), (200, 30, 30)).save(buffer, "PNG")
    return buffer.getvalue()


def post_many(url: str, path: str, body: bytes, count: int) -> list[httpx.Response]:
    async def send_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            headers = {"Content-Type": "image/png"}
            return await asyncio.gather(
                *(client.post(path, content=body, headers=headers) for _ in range(count))
            )

    return asyncio.run(send_all())


def test_runner_answers_a_lone_request_without_waiting_its_max_queue_delay(
    colour_model_dir, tmp_path
) -> None:
    runner = launch_runner(colour_model_dir, tmp_path / "idle.log", "--max-queue-delay-ms", "2000")
    try:
        queues = []
        for _ in range(3):
            response = httpx.post(
                f"{runner.url}/v1/deployments/colours/predict", content=png(20),
                headers={"Content-Type": "image/png"}, timeout=30,
            )  # fmt: skip
            assert response.status_code == 200, response.text
            queues.append(response.json()["timing_ms"]["queue"])
    finally:
        runner.stop()
    assert max(queues) < 200  # far under the 2000 ms delay it would once have waited


def test_requests_queued_past_max_queue_wait_get_503_with_retry_after(slow_model_dir, tmp_path) -> None:
    runner = launch_runner(
        slow_model_dir, tmp_path / "deadline.log", "--max-batch-size", "1", "--max-queue-delay-ms", "0",
        "--max-queue-wait-ms", "20", "--max-queue", "64",
    )  # fmt: skip
    try:
        responses = post_many(runner.url, "/v1/deployments/slow/predict", png(), 24)
        metrics = httpx.get(f"{runner.url}/metrics").text
    finally:
        runner.stop()
    statuses = [r.status_code for r in responses]
    assert 200 in statuses and 503 in statuses and set(statuses) <= {200, 503}
    dropped = next(r for r in responses if r.status_code == 503)
    assert dropped.json()["error"]["type"] == "queue_timeout" and dropped.headers["Retry-After"] == "1"
    batches = int(re.search(r"lantau_runner_batch_size_count\{[^}]*\} (\d+)", metrics).group(1))
    assert batches == statuses.count(200)  # the dropped requests never reached the model
    assert re.search(r'lantau_runner_dropped_total\{[^}]*reason="deadline"\} (\d+)', metrics)
