"""Dynamic batcher: a bounded queue of futures flushed by one coroutine into one inference thread.

When to flush (the Triton/BentoML idea, adapted):

* The engine is idle and nothing else is on its way: dispatch at once. A lone request never waits
  for ``max_delay_s``.
* The engine is idle but more requests are being read or pre-processed (``arriving``): wait for them
  until the batch is full or the oldest queued item has waited ``max_delay_s``.
* The engine is busy: the queue fills meanwhile; the next batch is whatever is queued (up to the max
  batch size) the moment the engine frees.

Every item carries a deadline (``max_wait_s`` after it was queued). Items past it are answered with
``QueueTimeout`` before they cost any compute, also while a long batch is running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .errors import QueueFull, QueueTimeout
from .metrics import Metrics

log = logging.getLogger("lantau.runner.batcher")

RunBatch = Callable[[list[Any]], Sequence[Any]]


@dataclass(frozen=True, slots=True)
class BatchResult:
    value: Any
    queue_s: float  # time from enqueue to the start of its batch
    inference_s: float  # duration of the batch that carried it
    batch_size: int


@dataclass(slots=True)
class _Pending:
    item: Any
    future: asyncio.Future[BatchResult]
    enqueued: float


class Batcher:
    """Collects items into batches for ``run_batch``, which runs in one dedicated worker thread.

    ``run_batch`` receives a list of items and returns one result per item; the event loop never
    blocks on it. Items whose future was cancelled (the client went away) or whose deadline passed
    are dropped before they reach the model.
    """

    def __init__(
        self,
        run_batch: RunBatch,
        *,
        max_batch_size: int,
        max_delay_s: float,
        max_queue: int,
        metrics: Metrics,
        max_wait_s: float = 2.0,
    ) -> None:
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_delay_s = max_delay_s
        self.max_queue = max_queue
        self.max_wait_s = max_wait_s
        self.arriving = 0  # requests being pre-processed that will submit soon
        self._metrics = metrics
        self._queue: deque[_Pending] = deque()
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="lantau-inference")
        self._task: asyncio.Task[None] | None = None
        self._expiry: asyncio.TimerHandle | None = None  # fires at the queue head's deadline
        self._busy = False

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def idle(self) -> bool:
        return not self._queue and not self._busy

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="lantau-batcher")

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
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

    @contextlib.contextmanager
    def incoming(self, count: int = 1) -> Iterator[None]:
        """Mark ``count`` requests as on their way (pre-processing) so a forming batch waits for them."""
        self.arriving += count
        try:
            yield
        finally:
            self.arriving -= count
            if self.arriving <= 0 and self._queue:
                self._wakeup.set()  # nothing more on its way (e.g. a decode failed): flush now

    def submit(self, items: Sequence[Any]) -> list[asyncio.Future[BatchResult]]:
        """Enqueue all items or none; raise QueueFull when they do not fit."""
        if len(self._queue) + len(items) > self.max_queue:
            self._metrics.observe_drop("queue_full", len(items))
            raise QueueFull()
        loop = asyncio.get_running_loop()
        now = time.perf_counter()
        futures = []
        for item in items:
            future: asyncio.Future[BatchResult] = loop.create_future()
            self._queue.append(_Pending(item, future, now))
            futures.append(future)
        self._wakeup.set()
        if self._expiry is None:
            self._arm_expiry()
        return futures

    # -- the flushing coroutine --------------------------------------------------------------------

    def _expire(self, now: float) -> None:
        """Drop cancelled items and answer items past their deadline, from the head of the queue."""
        queue, limit = self._queue, self.max_wait_s
        while queue and (queue[0].future.done() or now - queue[0].enqueued > limit):
            pending = queue.popleft()
            if not pending.future.done():
                pending.future.set_exception(QueueTimeout((now - pending.enqueued) * 1000))
                self._metrics.observe_drop("deadline", 1)

    def _arm_expiry(self) -> None:
        # One timer at a time, set for the head's deadline: overdue items are answered even while
        # a long batch keeps the flushing coroutine busy.
        if self._queue:
            delay = self._queue[0].enqueued + self.max_wait_s - time.perf_counter()
            self._expiry = asyncio.get_running_loop().call_later(max(0.0, delay) + 1e-4, self._on_expiry)

    def _on_expiry(self) -> None:
        self._expiry = None
        self._expire(time.perf_counter())
        self._arm_expiry()

    async def _wait(self, timeout: float | None) -> None:
        self._wakeup.clear()
        if timeout is None:
            await self._wakeup.wait()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def _wait_for_batch(self) -> None:
        """Return once the queue holds a batch worth dispatching (see the module docstring)."""
        while True:
            now = time.perf_counter()
            self._expire(now)
            if not self._queue:
                await self._wait(None)
                continue
            if len(self._queue) >= self.max_batch_size or self.arriving <= 0:
                return
            remaining = self._queue[0].enqueued + self.max_delay_s - now
            if remaining <= 0:
                return
            await self._wait(remaining)

    def _take_batch(self) -> list[_Pending]:
        self._expire(time.perf_counter())
        batch: list[_Pending] = []
        while self._queue and len(batch) < self.max_batch_size:
            pending = self._queue.popleft()
            if not pending.future.done():
                batch.append(pending)
        return batch

    async def _run(self, batch: list[_Pending]) -> tuple[Sequence[Any], float, float]:
        """Run one batch in the inference thread."""
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        try:
            results = await loop.run_in_executor(self._executor, self._run_batch, [p.item for p in batch])
        except asyncio.CancelledError:
            for pending in batch:
                pending.future.cancel()
            raise
        return results, started, time.perf_counter() - started

    async def _loop(self) -> None:
        while True:
            await self._wait_for_batch()
            batch = self._take_batch()
            if not batch:
                continue
            self._busy = True
            try:
                results, started, elapsed = await self._run(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed batch fails its requests, never the batcher
                log.exception("inference failed for a batch of %d", len(batch))
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_exception(exc)
                continue
            finally:
                self._busy = False
            self._metrics.observe_batch(len(batch), elapsed)
            self._deliver(batch, results, started, elapsed)

    @staticmethod
    def _deliver(batch: list[_Pending], results: Sequence[Any], started: float, elapsed: float) -> None:
        size = len(batch)
        for pending, value in zip(batch, results, strict=True):
            if not pending.future.done():
                pending.future.set_result(BatchResult(value, started - pending.enqueued, elapsed, size))
