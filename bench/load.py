"""Closed-loop load: ``concurrency`` clients, each sending its next request when the last one is answered.

One aiohttp session with a keep-alive connection per client; the bodies are JPEG photos taken in
turn. Latency is measured per request from send to fully read answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from inference.runner.metrics import percentile

# The figures every result line carries (``tests/bench`` checks them).
FIELDS = ("target", "model", "concurrency", "requests", "p50_ms", "p95_ms", "p99_ms", "throughput_rps",
          "errors", "mean_batch_size")  # fmt: skip


@dataclass
class Measurement:
    """What one scenario observed; ``latencies`` only counts successful answers."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    elapsed: float = 0.0
    cpu_s: float = 0.0  # CPU seconds the serving side spent (0.0 when unknown)
    batch_sizes: list[float] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)

    @property
    def completed(self) -> int:
        return len(self.latencies)

    def summary(self) -> dict[str, float | int | None]:
        ordered = sorted(self.latencies)
        return {
            "requests": self.completed + self.errors,
            "p50_ms": round(percentile(ordered, 0.50) * 1000, 3),
            "p95_ms": round(percentile(ordered, 0.95) * 1000, 3),
            "p99_ms": round(percentile(ordered, 0.99) * 1000, 3),
            "throughput_rps": round(self.completed / self.elapsed, 2) if self.elapsed else 0.0,
            "errors": self.errors,
            "cpu_ms_per_request": round(self.cpu_s / self.completed * 1000, 3)
            if self.cpu_s and self.completed
            else None,
        }


def result_line(target: str, model: str, concurrency: int, measured: Measurement | None, **extra) -> dict:
    """One JSON line of the report; a scenario that did not run (``measured`` None) has empty figures."""
    line: dict = {"target": target, "model": model, "concurrency": concurrency}
    if measured is None:
        line.update(dict.fromkeys(FIELDS[3:]))
    else:
        line.update(measured.summary())
        sizes = measured.batch_sizes
        line["mean_batch_size"] = round(sum(sizes) / len(sizes), 3) if sizes else None
        if measured.error_samples:
            line["error_samples"] = measured.error_samples
    line.update(extra)
    return line


@dataclass(frozen=True)
class Target:
    url: str  # the full predict URL
    headers: dict[str, str]


async def _client(
    session: aiohttp.ClientSession, target: Target, bodies: list[bytes], counter: list[int], out: Measurement
) -> None:
    headers = {"Content-Type": "image/jpeg", **target.headers}
    while counter[0] > 0:
        counter[0] -= 1
        body = bodies[counter[0] % len(bodies)]
        started = time.perf_counter()
        try:
            async with session.post(target.url, data=body, headers=headers) as response:
                payload = await response.read()
                status = response.status
        except aiohttp.ClientError as exc:
            status, payload = 0, str(exc).encode()
        if status == 200:
            out.latencies.append(time.perf_counter() - started)
        else:
            out.errors += 1
            if len(out.error_samples) < 3:
                out.error_samples.append(f"{status}: {payload[:200]!r}")


async def drive(
    target: Target,
    bodies: list[bytes],
    *,
    concurrency: int,
    total: int,
    warmup: int,
    on_start: Callable[[], None] | None = None,
) -> Measurement:
    """Send ``warmup`` unrecorded requests, then ``total`` recorded ones with ``concurrency`` clients.

    ``on_start`` is called between the two (to read counters that must exclude the warm-up)."""
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if warmup:
            scratch = Measurement()
            counter = [warmup]
            await asyncio.gather(
                *(_client(session, target, bodies, counter, scratch) for _ in range(concurrency))
            )
        if on_start is not None:
            on_start()
        out = Measurement()
        counter = [total]
        started = time.perf_counter()
        await asyncio.gather(*(_client(session, target, bodies, counter, out) for _ in range(concurrency)))
        out.elapsed = time.perf_counter() - started
    return out
