"""Latency and throughput on the worker's CPU, with a fixed number of runs.

Workers share their cores, so a single timing loop is easily disturbed. Each measurement is split
into rounds; the reported p50 is the best round's median (the least disturbed one), and comparisons
interleave the two models round by round so both see the same background load.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inference.conversion.sessions import open_session, synthetic_feeds
from inference.conversion.steps import Cancelled, Progress, Steps


def benchmark(
    path: Path,
    task: str,
    batch_sizes: Sequence[int] = (1, 8),
    *,
    runs: int = 30,
    rounds: int = 3,
    warmup: int = 3,
    sequence_length: int = 32,
    threads: int = 0,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
) -> dict[str, Any]:
    """Size, p50/p90 latency per batch size and throughput (items per second at the p50)."""
    step = Steps(progress, cancelled)
    step(0, "loading the model")
    timer = _Timer(path, batch_sizes, sequence_length, threads, warmup)
    samples: dict[int, list[list[float]]] = {b: [] for b in batch_sizes}
    for index in range(rounds):
        step(100 * index / rounds, f"timing round {index + 1} of {rounds}")
        for batch in batch_sizes:
            samples[batch].append(timer.round(batch, max(1, runs // rounds)))
    step.progress(100, "done")
    return {
        "task": task,
        **timer.describe(),
        "batches": {str(b): _summary(samples[b], b) for b in batch_sizes},
    }


def compare_latency(
    parent: Path,
    child: Path,
    task: str,
    batch_sizes: Sequence[int] = (1, 8),
    *,
    runs: int = 30,
    rounds: int = 5,
    sequence_length: int = 32,
    threads: int = 0,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
) -> dict[str, Any]:
    """Benchmark both models in alternating rounds; speed-up = parent p50 / child p50 per batch size."""
    step = Steps(progress, cancelled)
    timers = [_Timer(p, batch_sizes, sequence_length, threads, warmup=3) for p in (parent, child)]
    samples: list[dict[int, list[list[float]]]] = [{b: [] for b in batch_sizes} for _ in timers]
    for index in range(rounds):
        step(100 * index / rounds, f"timing round {index + 1} of {rounds}")
        for batch in batch_sizes:
            for timer, found in zip(timers, samples, strict=True):
                found[batch].append(timer.round(batch, max(1, runs // rounds)))
    reports = [
        {"task": task, **t.describe(), "batches": {str(b): _summary(s[b], b) for b in batch_sizes}}
        for t, s in zip(timers, samples, strict=True)
    ]
    speedup = {
        str(b): reports[0]["batches"][str(b)]["p50_ms"] / reports[1]["batches"][str(b)]["p50_ms"]
        for b in batch_sizes
    }
    step.progress(100, "done")
    return {
        "parent": reports[0],
        "child": reports[1],
        "speedup": speedup,
        "size_ratio": reports[1]["size_bytes"] / reports[0]["size_bytes"],
    }


class _Timer:
    def __init__(
        self, path: Path, batch_sizes: Sequence[int], sequence_length: int, threads: int, warmup: int
    ) -> None:
        self.path = Path(path)
        self.session = open_session(path, threads)
        self.sequence_length = sequence_length
        self.threads = threads or os.cpu_count() or 1
        self.feeds = {b: synthetic_feeds(self.session, b, sequence_length) for b in batch_sizes}
        for feeds in self.feeds.values():
            for _ in range(warmup):
                self.session.run(None, feeds)

    def round(self, batch: int, runs: int) -> list[float]:
        feeds, times = self.feeds[batch], []
        for _ in range(runs):
            start = time.perf_counter()
            self.session.run(None, feeds)
            times.append(time.perf_counter() - start)
        return times

    def describe(self) -> dict[str, Any]:
        extra = sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + ".*data"))
        text = "input_ids" in {i.name for i in self.session.get_inputs()}
        return {
            "path": str(self.path),
            "size_bytes": self.path.stat().st_size + extra,
            "threads": self.threads,
            "sequence_length": self.sequence_length if text else None,
        }


def _summary(rounds: list[list[float]], batch: int) -> dict[str, Any]:
    medians = [float(np.median(r)) for r in rounds]
    every = np.concatenate([np.asarray(r) for r in rounds])
    p50 = min(medians)
    return {
        "p50_ms": 1000 * p50,
        "p90_ms": 1000 * float(np.percentile(every, 90)),
        "round_p50_ms": [1000 * m for m in medians],
        "runs": int(every.size),
        "throughput_per_s": batch / p50,
    }
