"""The ceiling: onnxruntime in-process, the runner's own pre-processing, no HTTP, the best batch size.

``concurrency`` requests form a round: all are decoded in the pre-processing thread pool (as many
threads as the runner uses) while the main thread runs the model on each batch as soon as its images
are ready, so decoding overlaps inference. A request's latency is from the start of its round to the
end of its batch; the batch size with the best throughput is the one reported.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from inference.runner.engine import Engine
from inference.runner.postprocess import softmax, top_k
from inference.runner.preprocess import ImagePreprocessor

from .assets import preprocessing
from .load import Measurement

BATCH_CANDIDATES = (1, 4, 8, 16, 32)


class RawModel:
    def __init__(self, model_path: Path, threads: int, pool_size: int) -> None:
        self.engine = Engine(model_path, threads)  # the runner's session options, for a fair ceiling
        self.input_name = self.engine.inputs[0].name
        self.prepare = ImagePreprocessor(preprocessing())
        self.pool = ThreadPoolExecutor(pool_size, thread_name_prefix="raw-preprocess")

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    def _round(self, bodies: list[bytes], batch: int, out: Measurement) -> None:
        started = time.perf_counter()
        pending = [self.pool.submit(self.prepare, body) for body in bodies]
        for first in range(0, len(pending), batch):
            arrays = [future.result() for future in pending[first : first + batch]]
            scores = softmax(self.engine.run({self.input_name: np.stack(arrays)})[0])
            for row in scores:
                top_k(row, 5)
            done = time.perf_counter() - started
            out.latencies.extend([done] * len(arrays))
            out.batch_sizes.append(len(arrays))

    def warm(self, bodies: list[bytes], *, concurrency: int, batch: int) -> None:
        self._round(bodies[:1] * concurrency, batch, Measurement())

    def measure(self, bodies: list[bytes], *, concurrency: int, total: int, batch: int) -> Measurement:
        out = Measurement()
        started = time.perf_counter()
        sent = 0
        while sent < total:
            size = min(concurrency, total - sent)
            self._round([bodies[(sent + i) % len(bodies)] for i in range(size)], batch, out)
            sent += size
        out.elapsed = time.perf_counter() - started
        return out

    def best_batch(self, bodies: list[bytes], *, concurrency: int, quick: bool) -> int:
        """The batch size (up to ``concurrency``) with the best throughput in a short trial of each."""
        candidates = [b for b in BATCH_CANDIDATES if b <= concurrency] or [1]
        if quick:
            candidates = sorted({candidates[0], candidates[-1]})
        if len(candidates) == 1:
            return candidates[0]
        probe = max(2 * concurrency, 48)
        elapsed = dict.fromkeys(candidates, 0.0)
        for _ in range(2):  # two alternating passes, so background load hits every candidate alike
            for batch in candidates:
                self.warm(bodies, concurrency=concurrency, batch=batch)
                elapsed[batch] += self.measure(
                    bodies, concurrency=concurrency, total=probe, batch=batch
                ).elapsed
        return min(elapsed, key=elapsed.__getitem__)
