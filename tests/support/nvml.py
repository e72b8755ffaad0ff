"""A stand-in for NVML (the ``pynvml`` module of nvidia-ml-py): the only thing the tests fake.

It answers the calls ``inference.agent.inventory`` makes with the GPUs it is given, so the agent's GPU
code (inventory, per-process GPU memory, pinning by UUID) runs on a machine without a GPU. Install it
with ``install(monkeypatch, FakeNVML([...]))``; ``FakeNVML(driver=False)`` is a host without a driver.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field

GiB = 2**30


@dataclass
class FakeGPU:
    name: str = "NVIDIA A10"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    memory_total: int = 24 * GiB
    memory_used: int = 0
    utilization: int = 0
    temperature: int = 40
    processes: dict[int, int] = field(default_factory=dict)  # pid -> GPU memory bytes


class NVMLError(Exception):
    pass


def a10(index: int, **overrides: object) -> FakeGPU:
    """An A10 (24 GiB) with a UUID derived from its index."""
    fields: dict = {"uuid": f"GPU-a10a10a1-0000-0000-0000-00000000000{index}", **overrides}
    return FakeGPU(**fields)


class FakeNVML:
    NVML_TEMPERATURE_GPU = 0
    NVMLError = NVMLError

    def __init__(self, gpus: list[FakeGPU] | None = None, *, driver: bool = True) -> None:
        self.gpus = gpus or []
        self.driver = driver
        self.initialised = 0

    def module(self) -> types.ModuleType:
        module = types.ModuleType("pynvml")
        for name in dir(self):
            if name.startswith("nvml") or name.startswith("NVML"):
                setattr(module, name, getattr(self, name))
        return module

    def nvmlInit(self) -> None:
        if not self.driver:
            raise NVMLError("NVML Shared Library Not Found")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGPU:
        return self.gpus[index]

    def nvmlDeviceGetName(self, gpu: FakeGPU) -> bytes:
        return gpu.name.encode()  # older nvidia-ml-py answers bytes

    def nvmlDeviceGetUUID(self, gpu: FakeGPU) -> str:
        return gpu.uuid

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGPU) -> types.SimpleNamespace:
        used = gpu.memory_used + sum(gpu.processes.values())
        return types.SimpleNamespace(total=gpu.memory_total, used=used, free=gpu.memory_total - used)

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGPU) -> types.SimpleNamespace:
        return types.SimpleNamespace(gpu=gpu.utilization, memory=0)

    def nvmlDeviceGetTemperature(self, gpu: FakeGPU, sensor: int) -> int:
        return gpu.temperature

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGPU) -> list[types.SimpleNamespace]:
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.processes.items()]


def install(monkeypatch, nvml: FakeNVML) -> FakeNVML:
    """Make ``import pynvml`` find ``nvml`` for the rest of the test."""
    monkeypatch.setitem(__import__("sys").modules, "pynvml", nvml.module())
    return nvml
