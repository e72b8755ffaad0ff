"""What every route shares: the runner's state (config, pipeline, batcher) and the per-request keys.

Its own module so the route families (``predict/``, ``generation/``) and the app factory can all
read it without importing each other.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .access import Caller
from .batcher import Batcher, BatchResult
from .config import Manifest, RunnerConfig, preprocess_pool_size
from .edge import Edge
from .errors import NotReady
from .metrics import Metrics

# Typed request storage keys (aiohttp >= 3.14); plain strings on older releases.
if hasattr(web, "RequestKey"):
    START: Any = web.RequestKey("lantau_start", float)
    TIMING: Any = web.RequestKey("lantau_timing", list)
    CALLER: Any = web.RequestKey("lantau_caller", Caller)
else:  # pragma: no cover
    START, TIMING, CALLER = "lantau_start", "lantau_timing", "lantau_caller"


@dataclass
class State:
    """Everything the routes need; ``pipeline`` and ``batcher`` are set once warm-up is done."""

    config: RunnerConfig
    manifest: Manifest
    metrics: Metrics
    edge: Edge
    preprocess_pool: ThreadPoolExecutor = field(init=False)
    pipeline: Any = None
    batcher: Batcher | None = None
    draining: bool = False

    def __post_init__(self) -> None:
        self.preprocess_pool = ThreadPoolExecutor(
            preprocess_pool_size(self.config.preprocess_threads), thread_name_prefix="lantau-preprocess"
        )

    @property
    def ready(self) -> bool:
        return self.batcher is not None and not self.draining

    def serving(self) -> tuple[Any, Batcher]:
        if not self.ready:
            raise NotReady("the runner is shutting down" if self.draining else "the model is still loading")
        assert self.batcher is not None
        return self.pipeline, self.batcher

    async def preprocess(self, func: Callable[[Any], Any], value: Any, count: int = 1) -> Any:
        """Run ``func(value)`` in the pre-processing pool; the batcher knows ``count`` items are coming."""
        _, batcher = self.serving()
        started = time.perf_counter()
        with batcher.incoming(count):
            result = await asyncio.get_running_loop().run_in_executor(self.preprocess_pool, func, value)
        self.metrics.observe_preprocess(time.perf_counter() - started)
        return result

    async def infer(self, request: web.Request, items: Sequence[Any]) -> list[BatchResult]:
        """Queue ``items`` on the batcher and wait for all of them; the timings are kept on the request."""
        _, batcher = self.serving()
        futures = batcher.submit(items)
        # Cancelling the handler (client gone) cancels the queued futures, so the batcher skips them.
        results = [await futures[0]] if len(futures) == 1 else list(await asyncio.gather(*futures))
        total = time.perf_counter() - request[START]
        self.metrics.observe_latency(
            max(r.queue_s for r in results), max(r.inference_s for r in results), total
        )
        request[TIMING] = results
        return results


STATE = web.AppKey("lantau_state", State)
