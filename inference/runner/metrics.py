"""In-process counters and histograms rendered in the Prometheus text format, plus a one-second window.

Everything is updated from the event loop thread only, so no locks are needed. The window (latencies,
requests, errors and batches since the last ``take_window``) feeds the live summary published to Redis.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)  # the last slot is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def render(self, name: str, labels: str = "") -> list[str]:
        sep = "," if labels else ""
        lines, cumulative = [], 0
        for bound, count in zip((*self.buckets, "+Inf"), self.counts, strict=True):
            cumulative += count
            lines.append(f'{name}_bucket{{{labels}{sep}le="{bound}"}} {cumulative}')
        suffix = f"{{{labels}}}" if labels else ""
        lines.append(f"{name}_sum{suffix} {self.sum:.6f}")
        lines.append(f"{name}_count{suffix} {self.count}")
        return lines


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (0.0 when empty)."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class Window:
    """What happened since the last summary: the raw material of the per-second live metrics."""

    __slots__ = ("latencies", "requests", "errors", "throttled", "batches", "batched_items", "started")

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.requests = self.errors = self.throttled = self.batches = self.batched_items = 0
        self.started = time.monotonic()

    def summary(self, queue_depth: int) -> dict[str, Any]:
        seconds = max(time.monotonic() - self.started, 1e-6)
        ordered = sorted(self.latencies)
        return {
            "window_s": round(seconds, 3),
            "requests": self.requests,
            "requests_per_s": round(self.requests / seconds, 2),
            "errors": self.errors,
            "throttled": self.throttled,
            "latency_ms": {
                name: round(percentile(ordered, q) * 1000, 3)
                for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
            },
            "mean_batch_size": round(self.batched_items / self.batches, 3) if self.batches else 0.0,
            "queue_depth": queue_depth,
        }


class Metrics:
    """Request counts by route and status, latency split by phase, batch sizes, queue depth, drops."""

    PHASES = ("preprocess", "queue", "inference", "total")

    def __init__(self, deployment: str, model_version: str) -> None:
        self.identity = f'deployment="{_escape(deployment)}",model_version="{_escape(model_version)}"'
        self.requests: Counter[tuple[str, int]] = Counter()
        self.latency = {phase: Histogram(LATENCY_BUCKETS) for phase in self.PHASES}
        self.batch_size = Histogram(BATCH_BUCKETS)
        self.batch_seconds = Histogram(LATENCY_BUCKETS)
        self.errors: Counter[str] = Counter()
        self.drops: Counter[str] = Counter()
        self.queue_depth: Callable[[], int] = lambda: 0
        self.ready: Callable[[], bool] = lambda: False
        self.window = Window()

    def observe_request(self, route: str, status: int, error_type: str | None = None) -> None:
        self.requests[(route, status)] += 1
        if error_type is not None:
            self.errors[error_type] += 1
        if route.startswith("/v1/"):
            window = self.window
            window.requests += 1
            if status >= 500:
                window.errors += 1
            elif status == 429:
                window.throttled += 1

    def observe_preprocess(self, seconds: float) -> None:
        self.latency["preprocess"].observe(seconds)

    def observe_latency(self, queue_s: float, inference_s: float, total_s: float) -> None:
        self.latency["queue"].observe(queue_s)
        self.latency["inference"].observe(inference_s)
        self.latency["total"].observe(total_s)
        self.window.latencies.append(total_s)

    def observe_batch(self, size: int, seconds: float) -> None:
        self.batch_size.observe(size)
        self.batch_seconds.observe(seconds)
        self.window.batches += 1
        self.window.batched_items += size

    def observe_drop(self, reason: str, count: int) -> None:
        self.drops[reason] += count

    def take_window(self) -> dict[str, Any]:
        """Summarise the window since the last call and start a new one."""
        window, self.window = self.window, Window()
        return window.summary(self.queue_depth())

    def render(self) -> str:
        ident = self.identity
        lines = [
            "# HELP lantau_runner_ready 1 once the model is loaded and warmed up.",
            "# TYPE lantau_runner_ready gauge",
            f"lantau_runner_ready{{{ident}}} {int(self.ready())}",
            "# HELP lantau_runner_requests_total HTTP requests answered, by route and status.",
            "# TYPE lantau_runner_requests_total counter",
        ]
        for (route, status), count in sorted(self.requests.items()):
            lines.append(
                f'lantau_runner_requests_total{{{ident},route="{_escape(route)}",status="{status}"}} {count}'
            )
        lines += self._render_counters(ident)
        lines += [
            "# HELP lantau_runner_latency_seconds Prediction latency by phase "
            "(preprocess, queue, inference, total).",
            "# TYPE lantau_runner_latency_seconds histogram",
        ]
        for phase, histogram in self.latency.items():
            lines += histogram.render("lantau_runner_latency_seconds", f'{ident},phase="{phase}"')
        lines += [
            "# HELP lantau_runner_batch_size Items per model call.",
            "# TYPE lantau_runner_batch_size histogram",
        ]
        lines += self.batch_size.render("lantau_runner_batch_size", ident)
        lines += [
            "# HELP lantau_runner_batch_seconds Duration of one model call.",
            "# TYPE lantau_runner_batch_seconds histogram",
        ]
        lines += self.batch_seconds.render("lantau_runner_batch_seconds", ident)
        lines += [
            "# HELP lantau_runner_queue_depth Items waiting for a batch.",
            "# TYPE lantau_runner_queue_depth gauge",
            f"lantau_runner_queue_depth{{{ident}}} {self.queue_depth()}",
        ]
        return "\n".join(lines) + "\n"

    def _render_counters(self, ident: str) -> list[str]:
        lines = [
            "# HELP lantau_runner_errors_total Error answers by contract error type.",
            "# TYPE lantau_runner_errors_total counter",
        ]
        for error_type, count in sorted(self.errors.items()):
            lines.append(f'lantau_runner_errors_total{{{ident},type="{_escape(error_type)}"}} {count}')
        lines += [
            "# HELP lantau_runner_dropped_total Items refused or dropped before inference, by reason.",
            "# TYPE lantau_runner_dropped_total counter",
        ]
        for reason, count in sorted(self.drops.items()):
            lines.append(f'lantau_runner_dropped_total{{{ident},reason="{reason}"}} {count}')
        return lines
