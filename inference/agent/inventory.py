"""What this machine offers: CPUs, memory, and NVIDIA GPUs when NVML is installed."""

from __future__ import annotations

import os
import platform
from typing import TypedDict


class GPU(TypedDict):
    index: int
    name: str
    memory_total: int
    memory_free: int
    utilization: int


class Inventory(TypedDict):
    cpus: int
    memory_bytes: int
    load1: float
    gpus: list[GPU]
    hostname: str


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _gpus() -> list[GPU]:
    try:
        import pynvml  # from nvidia-ml-py, the optional `gpu` extra
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver on this host
        return []
    gpus: list[GPU] = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            util = pynvml.nvmlDeviceGetUtilizationRates(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            gpus.append(
                {
                    "index": i,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_total": int(mem.total),
                    "memory_free": int(mem.free),
                    "utilization": int(util.gpu),
                }
            )
    finally:
        pynvml.nvmlShutdown()
    return gpus


def collect() -> Inventory:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpus": os.cpu_count() or 1,
        "memory_bytes": _memory_bytes(),
        "load1": round(load[0], 2),
        "gpus": _gpus(),
        "hostname": platform.node(),
    }
