"""Dynamic batcher: a bounded queue of futures flushed by one coroutine into one inference thread."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .errors import QueueFull
from .metrics import Metrics

log = logging.getLogger("lantau.runner.batcher")

RunBatch = Callable[[list[Any]], Sequence[Any]]


@dataclass(frozen=True)
class BatchResult:
    value: Any
    queue_s: float  # time from enqueue to the start of its batch
    inference_s: float  # duration of the batch that carried it
    batch_size: int


@dataclass
class _Pending:
    item: Any
    future: asyncio.Future[BatchResult]
    enqueued: float


class Batcher:
    """Collects items until ``max_batch_size`` or until the oldest waited ``max_delay_s``.

    ``run_batch`` receives a list of items and returns one result per item; it runs in a single
    dedicated worker thread so the event loop never blocks on ``session.run``. Items whose
    future was cancelled (the client went away) are dropped before they reach the model.
    """

    def __init__(
        self,
        run_batch: RunBatch,
        *,
        max_batch_size: int,
        max_delay_s: float,
        max_queue: int,
        metrics: Metrics,
    ) -> None:
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_delay_s = max_delay_s
        self.max_queue = max_queue
        self._metrics = metrics
        self._queue: deque[_Pending] = deque()
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="lantau-inference")
        self._task: asyncio.Task[None] | None = None
        self._busy = False

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def idle(self) -> bool:
        return not self._queue and not self._busy

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="lantau-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for pending in self._queue:
            pending.future.cancel()
        self._queue.clear()
        self._executor.shutdown(wait=True)

    def run_direct(self, items: list[Any]) -> Sequence[Any]:
        """Run a batch synchronously in the caller's thread (warm-up, before serving)."""
        return self._run_batch(items)

    def submit(self, items: Sequence[Any]) -> list[asyncio.Future[BatchResult]]:
        """Enqueue all items or none; raise QueueFull when they do not fit."""
        if len(self._queue) + len(items) > self.max_queue:
            raise QueueFull()
        loop = asyncio.get_running_loop()
        now = time.perf_counter()
        futures = []
        for item in items:
            future: asyncio.Future[BatchResult] = loop.create_future()
            self._queue.append(_Pending(item, future, now))
            futures.append(future)
        self._wakeup.set()
        return futures

    def _drop_cancelled_head(self) -> None:
        while self._queue and self._queue[0].future.done():
            self._queue.popleft()

    async def _wait_for_batch(self) -> None:
        """Return once the queue holds a full batch or its oldest item has waited long enough."""
        while True:
            self._drop_cancelled_head()
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if len(self._queue) >= self.max_batch_size:
                return
            remaining = self._queue[0].enqueued + self.max_delay_s - time.perf_counter()
            if remaining <= 0:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except TimeoutError:
                return

    def _take_batch(self) -> list[_Pending]:
        batch: list[_Pending] = []
        while self._queue and len(batch) < self.max_batch_size:
            pending = self._queue.popleft()
            if not pending.future.done():
                batch.append(pending)
        return batch

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wait_for_batch()
            batch = self._take_batch()
            if not batch:
                continue
            self._busy = True
            started = time.perf_counter()
            try:
                results = await loop.run_in_executor(self._executor, self._run_batch, [p.item for p in batch])
            except asyncio.CancelledError:
                for pending in batch:
                    pending.future.cancel()
                raise
            except Exception as exc:  # a failed batch fails its requests, never the batcher
                log.exception("inference failed for a batch of %d", len(batch))
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_exception(exc)
                continue
            finally:
                self._busy = False
            elapsed = time.perf_counter() - started
            self._metrics.observe_batch(len(batch), elapsed)
            for pending, value in zip(batch, results, strict=True):
                if not pending.future.done():
                    pending.future.set_result(
                        BatchResult(value, started - pending.enqueued, elapsed, len(batch))
                    )
