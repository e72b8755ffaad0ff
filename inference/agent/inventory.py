"""What this machine offers, sent with every heartbeat: CPUs, memory, disk, onnxruntime's execution
providers and, when NVML is installed (``nvidia-ml-py``, the ``gpu`` extra), each NVIDIA GPU.

NVML is the only thing tests fake (a stand-in ``pynvml`` module on ``sys.path``); everything else is read
from this machine.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict


class GPU(TypedDict):
    index: int
    uuid: str
    name: str
    memory_total: int
    memory_free: int
    utilization: int  # percent of the last sample period the GPU was busy
    temperature: int  # degrees Celsius


class Inventory(TypedDict):
    cpus: int
    memory_bytes: int
    memory_available_bytes: int
    disk_free_bytes: int
    load1: float
    gpus: list[GPU]
    providers: list[str]
    hostname: str


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _memory_available_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux): what new processes can get without swapping."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _disk_free_bytes(path: Path | None) -> int:
    try:
        return shutil.disk_usage(path or Path.cwd()).free
    except OSError:
        return 0


@functools.cache
def providers() -> list[str]:
    """onnxruntime's execution providers on this host (CUDA and TensorRT only with onnxruntime-gpu)."""
    try:
        import onnxruntime
    except ImportError:
        return []
    return list(onnxruntime.get_available_providers())


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@contextmanager
def _nvml() -> Iterator[Any]:
    """The initialised ``pynvml`` module, or None without the package or a driver."""
    try:
        import pynvml  # from nvidia-ml-py, the optional `gpu` extra
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver on this host (pynvml.NVMLError and friends)
        yield None
        return
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _gpu(nvml: Any, index: int) -> GPU:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    try:
        utilization = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except Exception:  # not supported on some boards (NVMLError_NotSupported)
        utilization = 0
    try:
        temperature = int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
    except Exception:
        temperature = 0
    return {
        "index": index,
        "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "memory_total": int(mem.total),
        "memory_free": int(mem.free),
        "utilization": utilization,
        "temperature": temperature,
    }


def gpus() -> list[GPU]:
    with _nvml() as nvml:
        if nvml is None:
            return []
        try:
            return [_gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount())]
        except Exception:  # a GPU fell off the bus mid-read: report none rather than stop heartbeating
            return []


def process_gpu_memory(pids: set[int], gpu_index: int | None) -> int | None:
    """GPU memory used by these processes (a runner and its children), on one GPU or all; None without
    NVML or when the driver does not say (containers without the host's PID namespace)."""
    with _nvml() as nvml:
        if nvml is None:
            return None
        try:
            indexes = [gpu_index] if gpu_index is not None else range(nvml.nvmlDeviceGetCount())
            used: int | None = None
            for index in indexes:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    memory = getattr(proc, "usedGpuMemory", None)
                    if proc.pid in pids and isinstance(memory, int):
                        used = (used or 0) + memory
            return used
        except Exception:
            return None


def collect(data_dir: Path | None = None) -> Inventory:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpus": os.cpu_count() or 1,
        "memory_bytes": _memory_bytes(),
        "memory_available_bytes": _memory_available_bytes(),
        "disk_free_bytes": _disk_free_bytes(data_dir),
        "load1": round(load[0], 2),
        "gpus": gpus(),
        "providers": providers(),
        "hostname": platform.node(),
    }
