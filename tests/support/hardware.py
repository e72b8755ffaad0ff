"""Nodes named after their region and hardware, as the scheduler sees them (rows, no agent behind them)."""

from __future__ import annotations

H200 = {"index": 0, "name": "H200", "memory_total": 141 * 2**30}


def node(name, region, *, status="online", gpus=(), max_replicas=8):
    from inference.models import Node

    return Node.objects.create(
        name=name,
        region=region,
        token_prefix=name,
        token_hash=name.ljust(64, "0"),
        status=status,
        inventory={"cpus": 2, "gpus": list(gpus)},
        max_replicas=max_replicas,
    )


def node_hk_cpu():
    return node("hk-cpu-1", "hk")


def node_us_cpu():
    return node("us-cpu-1", "us")


def node_us_gpu():
    return node("us-gpu-1", "us", gpus=[H200])


def node_hk_offline():
    return node("hk-cpu-down", "hk", status="offline")
