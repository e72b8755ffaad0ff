"""In-process counters and histograms rendered in the Prometheus text format.

Everything is updated from the event loop thread only, so no locks are needed.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Sequence

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


class Metrics:
    """Request counts by route and status, latency split by phase, batch sizes, queue depth."""

    PHASES = ("queue", "inference", "total")

    def __init__(self, deployment: str, model_version: str) -> None:
        self.identity = f'deployment="{_escape(deployment)}",model_version="{_escape(model_version)}"'
        self.requests: Counter[tuple[str, int]] = Counter()
        self.latency = {phase: Histogram(LATENCY_BUCKETS) for phase in self.PHASES}
        self.batch_size = Histogram(BATCH_BUCKETS)
        self.batch_seconds = Histogram(LATENCY_BUCKETS)
        self.queue_depth: Callable[[], int] = lambda: 0
        self.ready: Callable[[], bool] = lambda: False

    def observe_request(self, route: str, status: int) -> None:
        self.requests[(route, status)] += 1

    def observe_latency(self, queue_s: float, inference_s: float, total_s: float) -> None:
        self.latency["queue"].observe(queue_s)
        self.latency["inference"].observe(inference_s)
        self.latency["total"].observe(total_s)

    def observe_batch(self, size: int, seconds: float) -> None:
        self.batch_size.observe(size)
        self.batch_seconds.observe(seconds)

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
        lines += [
            "# HELP lantau_runner_latency_seconds Prediction latency by phase (queue, inference, total).",
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
