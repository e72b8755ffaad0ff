"""GPU memory: how much a replica is expected to take, and how to say it to people."""

from __future__ import annotations

MIB = 2**20
GIB = 2**30
# onnxruntime's CUDA context, cuDNN/cuBLAS workspaces and the arena's first chunk.
RUNTIME_BYTES = 320 * MIB
# Activations grow with the batch; 24 MiB per item covers the image and text models we serve.
PER_BATCH_ITEM_BYTES = 24 * MIB
# A measurement is taken at first load; leave room for the arena growing under load.
MEASURED_MARGIN = 1.15


def estimate_bytes(*, artifact_bytes: int, max_batch_size: int) -> int:
    """Weights twice (the session keeps a copy while it optimises the graph), the runtime, and a
    working set per batch item. Deliberately generous: a measurement replaces it after first load."""
    return RUNTIME_BYTES + 2 * artifact_bytes + PER_BATCH_ITEM_BYTES * max(1, max_batch_size)


def with_margin(measured_bytes: int) -> int:
    return int(measured_bytes * MEASURED_MARGIN)


def gib(n: int) -> str:
    """Bytes as people read GPU memory: "3.1 GiB" (one decimal)."""
    return f"{n / GIB:.1f} GiB"
