"""The things measured, behind one interface so that scenarios can be interleaved.

This machine is shared: measured one after the other, two targets can see very different background
load. So every scenario is cut into slices and the targets take turns (raw, runner, plain, raw, ...);
each target's figures are the union of its slices. CPU time per request (server process, or this
process for ``raw``) is recorded too: it moves far less with background load than wall-clock time.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

from . import processes
from .load import Measurement, Target, drive
from .raw import RawModel

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc (0.0 where there is no /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def merge(into: Measurement, part: Measurement) -> Measurement:
    into.latencies.extend(part.latencies)
    into.errors += part.errors
    into.elapsed += part.elapsed
    into.cpu_s += part.cpu_s
    into.batch_sizes.extend(part.batch_sizes)
    into.error_samples.extend(part.error_samples[: 3 - len(into.error_samples)])
    return into


@dataclass
class _Marks:
    """The server's counters when the warm-up ended: (items, batches) from a runner, and CPU seconds."""

    batches: tuple[float, float] | None = None
    cpu_s: float = 0.0


class HttpContender:
    """A server answering ``target``; ``metrics_url`` when it is a runner (for batch sizes)."""

    def __init__(self, name: str, target: Target, *, metrics_url: str | None, pid: int | None) -> None:
        self.name = name
        self.target = target
        self.metrics_url = metrics_url
        self.pid = pid

    def measure(self, bodies: list[bytes], *, concurrency: int, total: int, warmup: int) -> Measurement:
        marks = _Marks()

        def on_start() -> None:  # after the warm-up
            marks.batches = processes.batch_counters(self.metrics_url) if self.metrics_url else None
            marks.cpu_s = process_cpu_s(self.pid) if self.pid else 0.0

        out = asyncio.run(
            drive(self.target, bodies, concurrency=concurrency, total=total, warmup=warmup, on_start=on_start)
        )
        if self.pid:
            out.cpu_s = process_cpu_s(self.pid) - marks.cpu_s
        before = marks.batches
        if before is not None and self.metrics_url:
            after = processes.batch_counters(self.metrics_url)
            items, batches = after[0] - before[0], after[1] - before[1]
            out.batch_sizes.extend([items / batches] * int(batches) if batches else [])
        else:
            out.batch_sizes.extend([1.0] * out.completed)
        return out


class RawContender:
    """onnxruntime in this process; the batch size is chosen once per concurrency (best throughput)."""

    name = "raw"

    def __init__(self, model_path: Path, threads: int, pool_size: int, *, quick: bool) -> None:
        self.model = RawModel(model_path, threads, pool_size)
        self.quick = quick
        self.batch: dict[int, int] = {}

    def measure(self, bodies: list[bytes], *, concurrency: int, total: int, warmup: int) -> Measurement:
        if concurrency not in self.batch:
            self.batch[concurrency] = self.model.best_batch(bodies, concurrency=concurrency, quick=self.quick)
        self.model.warm(bodies, concurrency=concurrency, batch=self.batch[concurrency])
        cpu = time.process_time()
        out = self.model.measure(bodies, concurrency=concurrency, total=total, batch=self.batch[concurrency])
        out.cpu_s = time.process_time() - cpu
        return out

    def close(self) -> None:
        self.model.close()
