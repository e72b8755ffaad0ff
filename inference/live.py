"""Inference's live updates: job progress and replica states, pushed to per-team Channels groups;
node figures from heartbeats, pushed to per-node groups (nodes are install-wide) and kept for back-fill.

Payloads are typed here; `core.live.publish` sends them after the transaction commits.
"""

from __future__ import annotations

import json
import logging
import math
import time
from datetime import timedelta
from functools import cache
from typing import Any, NotRequired, TypedDict, cast

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from redis.exceptions import RedisError

from contract.redis_keys import RedisKeys
from core.live import publish
from inference.models import Deployment, Job, Node, Replica
from inference.selectors import deployment_status, regions_known
from inference.summaries import summary_checked

log = logging.getLogger("lantau.live")
# Per-node history for charts that open (or reconnect) later: 900 heartbeats, kept an hour after the last.
NODE_STATS_KEEP = 900
NODE_STATS_TTL_S = 3600


class ReplicaPayload(TypedDict):
    id: int
    state: str
    node: str


class DeploymentStatusPayload(TypedDict):
    type: str  # "deployment.status"
    deployment: str
    status: str
    replicas: list[ReplicaPayload]


class JobPayload(TypedDict):
    type: str  # "job.update"
    id: int
    kind: str
    status: str
    progress: float
    message: str
    error: str
    source: int | None
    output: int | None
    log: NotRequired[str]


def team_deployments_group(team_id: int) -> str:
    return f"team-{team_id}-deployments"


def team_jobs_group(team_id: int) -> str:
    return f"team-{team_id}-jobs"


def deployment_status_payload(deployment: Deployment) -> DeploymentStatusPayload:
    replicas: list[ReplicaPayload] = [
        {"id": r.pk, "state": r.state, "node": r.node.name}
        for r in deployment.replica_set.select_related("node").order_by("pk")
    ]
    return {
        "type": "deployment.status",
        "deployment": deployment.name,
        "status": deployment_status(deployment),
        "replicas": replicas,
    }


def publish_deployment_status(deployment: Deployment) -> None:
    payload = deployment_status_payload(deployment)
    publish(team_deployments_group(deployment.team_id), "deployment_status", dict(payload))


def deployments_snapshot(team_id: int) -> list[DeploymentStatusPayload]:
    """Every deployment's status now: what a (re)connecting page is sent first, so a drop loses nothing."""
    return [deployment_status_payload(d) for d in Deployment.objects.filter(team_id=team_id)]


def jobs_snapshot(team_id: int, recent_s: int = 900) -> list[JobPayload]:
    """Unfinished jobs and those that changed in the last ``recent_s`` seconds, for a (re)connecting page."""
    cutoff = timezone.now() - timedelta(seconds=recent_s)
    jobs = Job.objects.filter(team_id=team_id).filter(
        Q(status__in=("queued", "running")) | Q(finished_at__gte=cutoff)
    )
    return [job_payload(job) for job in jobs.order_by("pk")[:200]]


def job_payload(job: Job) -> JobPayload:
    return {
        "type": "job.update",
        "id": job.pk,
        "kind": job.kind,
        "status": job.status,
        "progress": round(job.progress, 1),
        "message": job.message,
        "error": job.error,
        "source": job.source_id,
        "output": job.output_id,
    }


def publish_job(job: Job, log_line: str | None = None) -> None:
    payload = job_payload(job)
    if log_line:
        payload["log"] = log_line
    publish(team_jobs_group(job.team_id), "job_update", dict(payload))


class GpuStats(TypedDict):
    index: int
    name: str
    utilization: float | None  # percent
    memory_used: int | None  # bytes
    memory_total: int | None
    temperature: float | None  # degrees Celsius


class NodeStatsPayload(TypedDict):
    type: str  # "node.stats"
    node: str
    ts: float
    cpus: int | None
    load1: float | None
    cpu_percent: float | None  # 1-minute load per core, as a percentage (can exceed 100)
    memory_total: int | None
    memory_used: int | None
    disk_free: int | None
    gpus: list[GpuStats]


def node_stats_group(node_name: str) -> str:
    return f"node-{node_name}-stats"


def _num(value: Any) -> float | None:
    """A finite number from an agent's report, else None (agents are not trusted to send clean JSON)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _int(value: Any) -> int | None:
    number = _num(value)
    return None if number is None else int(number)


def _gpu(raw: Any, position: int) -> GpuStats:
    raw = raw if isinstance(raw, dict) else {}
    total, free = _int(raw.get("memory_total")), _int(raw.get("memory_free"))
    index = _int(raw.get("index"))
    return {
        "index": position if index is None else index,
        "name": str(raw.get("name") or "GPU")[:64],
        "utilization": _num(raw.get("utilization")),
        "memory_used": total - free if total is not None and free is not None else None,
        "memory_total": total,
        "temperature": _num(raw.get("temperature")),
    }


def node_stats_payload(node_name: str, inventory: dict, ts: float | None = None) -> NodeStatsPayload:
    """The chartable figures of one heartbeat's inventory (see docs/architecture.md, node inventory)."""
    cpus, load1 = _int(inventory.get("cpus")), _num(inventory.get("load1"))
    total, available = _int(inventory.get("memory_bytes")), _int(inventory.get("memory_available_bytes"))
    gpus = inventory.get("gpus")
    return {
        "type": "node.stats",
        "node": node_name,
        "ts": round(time.time() if ts is None else ts, 3),
        "cpus": cpus,
        "load1": load1,
        "cpu_percent": round(100 * load1 / cpus, 1) if cpus and load1 is not None else None,
        "memory_total": total,
        "memory_used": total - available if total is not None and available is not None else None,
        "disk_free": _int(inventory.get("disk_free_bytes")),
        "gpus": [_gpu(g, i) for i, g in enumerate(gpus[:16])] if isinstance(gpus, list) else [],
    }


@cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def _names() -> RedisKeys:
    return RedisKeys(settings.REDIS_PREFIX)


def publish_node_stats(node: Node, inventory: dict) -> None:
    """Push one heartbeat's figures to the node's open pages and append them to its recent history."""
    payload = node_stats_payload(node.name, inventory)
    raw = json.dumps(payload, separators=(",", ":"))
    key = _names().node_stats(node.name)

    def remember() -> None:
        try:
            pipe = _redis().pipeline(transaction=False)
            cast(Any, pipe.rpush(key, raw)).ltrim(key, -NODE_STATS_KEEP, -1).expire(key, NODE_STATS_TTL_S)
            pipe.execute()
        except (RedisError, OSError) as exc:  # charts are best effort: never fail a heartbeat for them
            log.warning("node stats of %s not kept: %s", node.name, exc)

    transaction.on_commit(remember)
    publish(node_stats_group(node.name), "node_stats", dict(payload))


def parse_history(raws: list[bytes], since: float = 0.0) -> list[dict]:
    """Stored node figures newer than ``since`` (seconds since the epoch), oldest first."""
    out = []
    for raw in raws:
        try:
            item = json.loads(raw)
        except ValueError:
            continue
        if isinstance(item, dict) and isinstance(item.get("ts"), int | float) and item["ts"] > since:
            out.append(item)
    return out


def node_stats_history(node_name: str, since: float = 0.0) -> list[dict]:
    try:
        raws = _redis().lrange(_names().node_stats(node_name), 0, -1)
    except (RedisError, OSError):
        return []
    return parse_history(list(raws), since)  # type: ignore[arg-type]


class RegionTraffic(TypedDict):
    region: str
    label: str  # the region's display name
    requests_per_s: float
    requests: int
    errors: int
    error_rate: float | None  # errors / requests over the replicas' last second
    p95_ms: float | None  # the slowest replica's p95 (a conservative figure for the region)
    replicas_reporting: int


def region_traffic(*, team_id: int) -> list[RegionTraffic]:
    """The team's traffic per region from each replica's last per-second summary (runners write it).

    A replica counts in the region of the node that runs it, not the region its deployment asked for.
    Regions come from the regions table, in failover order.
    """
    names = _names()
    replicas = list(
        Replica.objects.filter(deployment__team_id=team_id).values_list(
            "pk", "deployment__name", "node__region"
        )
    )
    keys = [names.metrics_last(deployment, str(pk)) for pk, deployment, _ in replicas]
    try:
        values = _redis().mget(keys) if keys else []
    except (RedisError, OSError):
        values = [None] * len(keys)
    totals: dict[str, RegionTraffic] = {
        r.name: {"region": r.name, "label": r.display_name, "requests_per_s": 0.0, "requests": 0, "errors": 0,
                 "error_rate": None, "p95_ms": None, "replicas_reporting": 0}
        for r in regions_known()
    }  # fmt: skip
    for (pk, deployment, region), raw in zip(replicas, cast(Any, values), strict=True):
        summary = summary_checked(raw, deployment, pk) if raw else None  # sealed by that replica
        if summary is None or region not in totals:
            continue
        _add_summary(totals[region], summary)
    for entry in totals.values():
        entry["requests_per_s"] = round(entry["requests_per_s"], 2)
        entry["error_rate"] = round(entry["errors"] / entry["requests"], 4) if entry["requests"] else None
    return list(totals.values())


def _add_summary(entry: RegionTraffic, summary: dict) -> None:
    entry["replicas_reporting"] += 1
    entry["requests_per_s"] += _num(summary.get("requests_per_s")) or 0.0
    requests = _int(summary.get("requests")) or 0
    entry["requests"] += requests
    entry["errors"] += _int(summary.get("errors")) or 0
    latency = summary.get("latency_ms")
    p95 = _num(latency.get("p95")) if isinstance(latency, dict) else None
    if requests and p95 is not None:
        entry["p95_ms"] = max(entry["p95_ms"] or 0.0, p95)


def overview_tick(*, team_id: int) -> dict:
    """What the overview refreshes every few seconds: traffic per region and every node's figures."""
    nodes = [
        {**node_stats_payload(n.name, n.inventory, ts=0), "region": n.region, "status": n.status}
        for n in Node.objects.all()
    ]
    return {"type": "overview.tick", "ts": round(time.time(), 3), "regions": region_traffic(team_id=team_id),
            "nodes": nodes}  # fmt: skip
