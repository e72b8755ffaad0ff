"""Nodes named after their region and hardware, as the scheduler sees them (rows, no agent behind them).

GPU entries follow the agent's inventory (``inference.agent.inventory``): index, uuid, name, total and
free memory in bytes, utilisation and temperature.
"""

from __future__ import annotations

GIB = 2**30
CPU_PROVIDERS = ["CPUExecutionProvider"]
GPU_PROVIDERS = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]


def gpu(index: int, name: str, total_gib: float, free_gib: float | None = None) -> dict:
    total = int(total_gib * GIB)
    free = total if free_gib is None else int(free_gib * GIB)
    return {"index": index, "uuid": f"GPU-{name}-{index}", "name": name, "memory_total": total,
            "memory_free": free, "utilization": 0.0, "temperature": 40.0}  # fmt: skip


H200 = gpu(0, "NVIDIA H200", 141)
A10 = gpu(0, "NVIDIA A10", 24)


def node(
    name, region, *, status="online", mode="active", gpus=(), providers=None, labels=None, max_replicas=8
):
    from inference.models import Node

    return Node.objects.create(
        name=name,
        region=region,
        token_prefix=name[:16],
        token_hash=name.ljust(64, "0"),
        status=status,
        mode=mode,
        labels=dict(labels or {}),
        inventory={
            "cpus": 2,
            "gpus": [dict(g) for g in gpus],
            "providers": list(providers or (GPU_PROVIDERS if gpus else CPU_PROVIDERS)),
        },
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


def node_hk_a10_24g():
    """One NVIDIA A10 (24 GiB), labelled gpu=a10, CUDA and TensorRT providers."""
    return node("hk-a10-1", "hk", gpus=[A10], labels={"gpu": "a10"})


def node_hk_a10_busy():
    """An A10 with 1.2 GiB free (other work holds the rest), labelled gpu=a10."""
    return node("hk-gpu-2", "hk", gpus=[gpu(0, "NVIDIA A10", 24, free_gib=1.2)], labels={"gpu": "a10"})


def node_hk_two_t4():
    """Two 16 GiB T4s, CUDA only (no TensorRT provider), labelled gpu=t4 and tier=edge."""
    return node("hk-t4-1", "hk", gpus=[gpu(0, "Tesla T4", 16), gpu(1, "Tesla T4", 16)],
                providers=["CUDAExecutionProvider", "CPUExecutionProvider"],
                labels={"gpu": "t4", "tier": "edge"})  # fmt: skip
