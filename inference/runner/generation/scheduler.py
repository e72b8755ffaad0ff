"""Continuous-batching scheduler: a bounded queue of sequences and one coroutine stepping the batch.

Each loop turn admits waiting sequences up to ``max_batch_size`` (they join at the step
boundary instead of waiting for others to finish), runs one step on the inference thread and
hands every event to its sequence's queue. It offers the lifecycle the runner expects of a
batcher (``start``, ``stop``, ``idle``, ``len``, ``incoming``), so draining on SIGTERM works unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from ..errors import QueueFull
from ..metrics import Metrics
from .continuous_batch import ContinuousBatch, StepEvents
from .sequence import Sequence

log = logging.getLogger("lantau.runner.generation")


class GenerationScheduler:
    def __init__(
        self, batch: ContinuousBatch, *, max_batch_size: int, max_queue: int, metrics: Metrics
    ) -> None:
        self._batch = batch
        self.max_batch_size = max_batch_size
        self.max_queue = max_queue
        self._metrics = metrics
        self._pending: deque[Sequence] = deque()
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="lantau-generation")
        self._task: asyncio.Task[None] | None = None
        self._busy = False

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def active(self) -> int:
        return len(self._batch.rows)

    @property
    def idle(self) -> bool:
        return not self._pending and not self._batch.rows and not self._busy

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="lantau-generation")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._executor.shutdown(wait=True)
        self._deliver(self._batch.fail_all(list(self._pending)))
        self._pending.clear()

    @contextlib.contextmanager
    def incoming(self, count: int = 1) -> Iterator[None]:
        """The batcher's pre-processing hook; sequences join at step boundaries, so nothing waits."""
        yield

    def submit(self, sequence: Sequence) -> None:
        """Queue a sequence for the next step boundary; raise QueueFull when the queue is full."""
        if len(self._pending) >= self.max_queue:
            raise QueueFull()
        self._pending.append(sequence)
        self._wakeup.set()

    def _admit(self) -> list[Sequence]:
        room = self.max_batch_size - len(self._batch.rows)
        admitted: list[Sequence] = []
        now = time.perf_counter()
        while self._pending and len(admitted) < room:
            sequence = self._pending.popleft()
            if not sequence.cancelled:
                sequence.admitted = now
                admitted.append(sequence)
        return admitted

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending and not self._batch.rows:
                self._wakeup.clear()
                await self._wakeup.wait()
            newcomers = self._admit()
            size = len(self._batch.rows) + len(newcomers)
            if size == 0:
                continue
            self._busy = True
            started = time.perf_counter()
            try:
                events = await loop.run_in_executor(self._executor, self._batch.step, newcomers)
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed step fails its sequences, never the scheduler
                log.exception("generation step failed for %d sequences", size)
                events = self._batch.fail_all(newcomers)
            finally:
                self._busy = False
            self._metrics.observe_batch(size, time.perf_counter() - started)
            self._deliver(events)

    @staticmethod
    def _deliver(events: StepEvents) -> None:
        for sequence, event in events:
            sequence.events.put_nowait(event)
