"""The runners' per-second summaries as the console reads them: checked, never trusted.

Runners publish a summary every second, kept under ``<prefix>:metrics:last:<deployment>:<replica>``
(``inference.runner.live``): requests, 5xx answers (``errors``), latency percentiles, queue depth.
``latest_summaries`` reads them for some replicas (rollout watch, autoscaling, canary figures);
``summary_checked`` checks one read elsewhere (the overview's traffic per region). Anyone with Redis
write could plant one, so only a summary sealed with that replica's runner token
(``contract.summaries``: deployment, replica and install bound, at most a minute old) whose every field
has the runner's type and a bound no runner reaches in a second is kept; anything else is ignored with
a log line. A leaf of the app: it imports no model and no service.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import redis
from django.conf import settings
from redis.exceptions import RedisError

from contract.redis_keys import RedisKeys
from contract.summaries import SummaryRefused, summary_open
from inference.credentials import runner_token

log = logging.getLogger("lantau.summaries")
# Bounds of one runner's per-second summary (``inference.runner.metrics.Window.summary``), far above what
# a runner serves in a second: a value past them was planted, not measured.
MAX_SUMMARY_REQUESTS = 1_000_000  # requests, errors, throttled in one summary
MAX_REQUESTS_PER_S = 1_000_000.0
MAX_LATENCY_MS = 3_600_000.0  # an hour
MAX_WINDOW_S = 3_600.0
MAX_QUEUE_DEPTH = 10_000_000
MAX_BATCH_SIZE = 1_000_000.0
MAX_TS = 1e10  # seconds since the epoch (the year 2286)
_COUNTS = ("requests", "errors", "throttled")
_NUMBERS = {"requests_per_s": MAX_REQUESTS_PER_S, "window_s": MAX_WINDOW_S, "mean_batch_size": MAX_BATCH_SIZE,
            "ts": MAX_TS}  # fmt: skip
_PERCENTILES = ("p50", "p95", "p99")


class _Refused(ValueError):
    pass


def _count(summary: dict, key: str, high: int) -> int | None:
    value = summary.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise _Refused(f"{key} {str(value)[:40]!r} is not a count between 0 and {high}")
    return value


def _number(value: object, key: str, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _Refused(f"{key} {str(value)[:40]!r} is not a finite number")
    if not 0 <= value <= high:
        raise _Refused(f"{key} {value!r} is outside 0..{high:g}")
    return float(value)


def _checked(raw: object, deployment: str, replica: int) -> dict[str, Any]:
    try:
        summary = summary_open(raw, token=runner_token(replica), prefix=settings.REDIS_PREFIX,
                               deployment=deployment, replica=str(replica))  # fmt: skip
    except SummaryRefused as exc:
        raise _Refused(str(exc)) from None
    if summary.get("deployment", deployment) != deployment:
        raise _Refused(f"it names deployment {str(summary.get('deployment'))[:60]!r}")
    if str(summary.get("replica", replica)) != str(replica):
        raise _Refused(f"it names replica {str(summary.get('replica'))[:40]!r}")
    clean: dict[str, Any] = {"deployment": deployment, "replica": str(replica)}
    for key in _COUNTS:
        if (count := _count(summary, key, MAX_SUMMARY_REQUESTS)) is not None:
            clean[key] = count
    for key in ("errors", "throttled"):  # each one of the summary's requests
        if clean.get(key, 0) > clean.get("requests", 0):
            raise _Refused(f"{key} {clean[key]} exceeds requests {clean.get('requests', 0)}")
    if (depth := _count(summary, "queue_depth", MAX_QUEUE_DEPTH)) is not None:
        clean["queue_depth"] = depth
    for key, high in _NUMBERS.items():
        if summary.get(key) is not None:
            clean[key] = _number(summary[key], key, high)
    latency = summary.get("latency_ms")
    if latency is not None:
        if not isinstance(latency, dict):
            raise _Refused("latency_ms is not an object")
        clean["latency_ms"] = {
            name: _number(latency[name], f"latency_ms.{name}", MAX_LATENCY_MS)
            for name in _PERCENTILES
            if latency.get(name) is not None
        }
    if isinstance(summary.get("model_version"), str):
        clean["model_version"] = summary["model_version"][:200]
    return clean


def summary_checked(raw: object, deployment: str, replica: int) -> dict[str, Any] | None:
    """A runner's summary read from Redis, as the runner writes it, or None (logged): every field of the
    runner's type within its bound (no NaN, no negative, no string for a number, errors no more than
    requests) and, when it names them, the deployment and replica of the key it was read from. Only the
    fields checked here are kept; readers use nothing else."""
    try:
        return _checked(raw, deployment, replica)
    except _Refused as exc:
        log.warning("ignoring the live summary of replica %s of %s: %s", replica, deployment, exc)
        return None


def latest_summaries(deployment: str, replica_ids: list[int]) -> dict[int, dict]:
    """The latest checked summary of each replica that has one (``summary_checked``); {} when Redis
    cannot be read (logged)."""
    if not replica_ids:
        return {}
    names = RedisKeys(settings.REDIS_PREFIX)
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1)
        values = client.mget([names.metrics_last(deployment, str(pk)) for pk in replica_ids])
    except RedisError as exc:
        log.warning("live summaries of %s unavailable: %s", deployment, exc)
        return {}
    found: dict[int, dict] = {}
    for pk, raw in zip(replica_ids, values, strict=True):
        summary = summary_checked(raw, deployment, pk) if raw is not None else None
        if summary is not None:
            found[pk] = summary
    return found
