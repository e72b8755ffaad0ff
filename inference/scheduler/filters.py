"""Filters: each answers None when the node can host one more replica of the ask, or why not.

The reason is what people read on the deployment page after the node's name, so it says what is
missing and what the node has ("needs 3.1 GiB, 1.2 GiB free").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from inference.models import NodeMode, NodeStatus
from inference.scheduler.memory import gib
from inference.scheduler.types import Ask, Candidate

Filter = Callable[[Ask, Candidate], str | None]

PROVIDER_OF_DEVICE = {"cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}


def node_ready(ask: Ask, c: Candidate) -> str | None:
    return None if c.node.status == NodeStatus.ONLINE else "not ready (no recent heartbeat)"


def node_schedulable(ask: Ask, c: Candidate) -> str | None:
    return None if c.node.mode == NodeMode.ACTIVE else f"{c.node.mode}: takes no new replicas"


def node_granted(ask: Ask, c: Candidate) -> str | None:
    """The team's own nodes always; shared nodes in one of its granted pools (all, when none)."""
    grant = ask.grant
    if grant is None or c.node.team_id == ask.deployment.team_id:
        return None
    if c.node.team_id is not None:  # another team's own node (candidates leaves those out anyway)
        return f"not granted to team {grant.team}"
    if grant.pools and not any(pool.holds(c.node) for pool in grant.pools):
        return f"not granted to team {grant.team} (its pools: {', '.join(p.name for p in grant.pools)})"
    return None


def team_within_caps(ask: Ask, c: Candidate) -> str | None:
    """The team's caps across all its deployments: replicas, GPUs (a GPU replica holds one), GPU memory."""
    grant = ask.grant
    if grant is None:
        return None
    if grant.max_replicas is not None and grant.replicas >= grant.max_replicas:
        return f"team {grant.team} is at its cap of {grant.max_replicas} replicas"
    if ask.needs_gpu and grant.max_gpus is not None and grant.gpus >= grant.max_gpus:
        return f"team {grant.team} is at its cap of {grant.max_gpus} GPUs"
    cap = grant.max_gpu_memory_bytes
    if ask.needs_gpu and cap is not None and grant.gpu_memory_bytes + ask.need_on(c) > cap:
        return (f"team {grant.team} would pass its GPU memory cap ({gib(grant.gpu_memory_bytes)} used "
                f"+ {gib(ask.need_on(c))} > {gib(cap)})")  # fmt: skip
    return None


def labels_match(ask: Ask, c: Candidate) -> str | None:
    wanted = ask.deployment.node_selector or {}
    labels = c.node.labels or {}
    missing = [f"{k}={v}" for k, v in sorted(wanted.items()) if labels.get(k) != v]
    if not missing:
        return None
    has = ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "none"
    return f"labels {', '.join(missing)} not matched (node has {has})"


def device_available(ask: Ask, c: Candidate) -> str | None:
    device = ask.deployment.device
    if device == "cpu":
        return None
    if not c.node.has_gpu:
        return f"device {device} not available (no GPU)"
    providers = c.providers
    if providers is not None and PROVIDER_OF_DEVICE.get(device) not in providers:
        shown = ", ".join(p.removesuffix("ExecutionProvider") for p in providers) or "none"
        return f"device {device} not available (providers: {shown})"
    return None


def has_room(ask: Ask, c: Candidate) -> str | None:
    if c.replicas < c.node.max_replicas:
        return None
    return f"full ({c.replicas} of {c.node.max_replicas} replicas)"


def gpu_memory_fits(ask: Ask, c: Candidate) -> str | None:
    if not ask.needs_gpu or pick_gpu(ask, c) is not None:
        return None
    most = max(c.gpu_free.values(), default=0)
    return f"needs {gib(ask.need_on(c))}, {gib(max(0, most))} free"


def pick_gpu(ask: Ask, c: Candidate) -> int | None:
    """The GPU with the most free memory that fits the replica; None on CPU or when none fits."""
    if not ask.needs_gpu:
        return None
    need = ask.need_on(c)
    fitting = [(free, -index) for index, free in c.gpu_free.items() if free >= need]
    return -max(fitting)[1] if fitting else None


FILTERS: Sequence[Filter] = (
    node_granted,
    team_within_caps,
    node_ready,
    node_schedulable,
    labels_match,
    device_available,
    has_room,
    gpu_memory_fits,
)
