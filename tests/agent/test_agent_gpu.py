"""The agent's GPU path on a machine without a GPU: only NVML's answers are faked (``tests.support.nvml``).

Inventory (per GPU: index, UUID, name, total and free memory, utilisation, temperature), the runner's
pinning (CUDA_VISIBLE_DEVICES by UUID, PCI order), its device flags (TensorRT engine cache per version
and GPU) and the GPU memory a replica's runner took, as the heartbeat reports it.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnxruntime
import pytest

from contract.replicas import ReplicaState
from inference.agent import inventory, supervisor
from tests.support.nvml import FakeNVML, GiB, a10, install


def desired(rid: int = 5, **overrides: object) -> dict:
    spec = {
        "id": rid, "deployment": "colours", "version_id": 42, "device": "cpu", "gpu_index": None,
        "batching": {"max_batch_size": 4, "max_queue_delay_ms": 2}, "runner_token": f"token-{rid}",
        "redis_prefix": "lantau", "limits": {},
    }  # fmt: skip
    spec.update(overrides)
    return spec


def test_the_inventory_lists_each_gpu_and_this_hosts_facts(monkeypatch, tmp_path) -> None:
    install(monkeypatch, FakeNVML([a10(0, memory_used=4 * GiB, utilization=37, temperature=61), a10(1)]))
    facts = inventory.collect(tmp_path)
    first, second = facts["gpus"]
    assert first == {
        "index": 0, "uuid": "GPU-a10a10a1-0000-0000-0000-000000000000", "name": "NVIDIA A10",
        "memory_total": 24 * GiB, "memory_free": 20 * GiB, "utilization": 37, "temperature": 61,
    }  # fmt: skip
    assert second["index"] == 1 and second["memory_free"] == 24 * GiB and second["uuid"].endswith("1")
    # The rest is this machine's, read for real.
    assert facts["providers"] == onnxruntime.get_available_providers()
    assert facts["cpus"] == os.cpu_count() and 0 < facts["memory_available_bytes"] <= facts["memory_bytes"]
    assert 0 < facts["disk_free_bytes"] == pytest.approx(os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize, rel=0.01)  # fmt: skip
    assert isinstance(facts["load1"], float) and facts["hostname"]


def test_no_driver_or_no_nvml_means_no_gpus(monkeypatch) -> None:
    nvml = install(monkeypatch, FakeNVML([a10(0)], driver=False))
    assert inventory.gpus() == [] and inventory.process_gpu_memory({1}, 0) is None
    assert nvml.initialised == 0
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # not installed: import fails
    assert inventory.gpus() == []


def test_a_gpu_replica_is_pinned_to_its_gpu_by_uuid_with_a_trt_cache_per_version_and_gpu(tmp_path) -> None:
    runners = supervisor.Supervisor(tmp_path, echo=False)
    runners.gpu_uuids = {0: "GPU-aaaa", 1: "GPU-bbbb"}
    spec = desired(device="tensorrt", gpu_index=1)
    replica = supervisor.Replica(5, spec, supervisor.spec_hash(spec), tmp_path / "model")
    env, command = runners.env(replica), runners.command(replica)
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-bbbb" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert command[command.index("--device") + 1] == "tensorrt"
    assert Path(command[command.index("--trt-cache-dir") + 1]) == tmp_path / "trt-cache" / "42" / "gpu1"
    # Without a known UUID the NVML index is used (PCI order, as NVML counts).
    runners.gpu_uuids = {}
    cuda = desired(device="cuda", gpu_index=0)
    replica = supervisor.Replica(6, cuda, supervisor.spec_hash(cuda), tmp_path / "model")
    assert runners.env(replica)["CUDA_VISIBLE_DEVICES"] == "0" and "--trt-cache-dir" not in runners.command(
        replica
    )
    # A CPU replica on a GPU host sees no GPU at all.
    cpu = supervisor.Replica(7, desired(), supervisor.spec_hash(desired()), tmp_path / "model")
    assert runners.env(cpu)["CUDA_VISIBLE_DEVICES"] == "" and runners.command(cpu)[runners.command(cpu).index("--device") + 1] == "cpu"  # fmt: skip
    runners.stop_all()


def test_the_gpu_memory_a_runner_took_is_reported_with_its_replica(monkeypatch, tmp_path) -> None:
    pid = os.getpid()  # any live process stands for the runner: NVML is what reports its memory
    install(monkeypatch, FakeNVML([a10(0), a10(1, processes={pid: 3 * GiB, 99999999: GiB})]))
    runners = supervisor.Supervisor(tmp_path, echo=False)
    spec = desired(device="cuda", gpu_index=1)
    replica = supervisor.Replica(5, spec, supervisor.spec_hash(spec), tmp_path / "model")
    replica.record = supervisor.RunnerRecord(5, pid, pid, None, 8123, replica.spec_hash, "", "")
    runners.replicas[5] = replica
    runners._judge(replica, "ready", 0.0)
    assert runners.reports() == [{"id": 5, "state": ReplicaState.READY, "url": "http://127.0.0.1:8123",
                                  "gpu_memory_bytes": 3 * GiB}]  # fmt: skip
    # A CPU replica never asks NVML.
    cpu = supervisor.Replica(6, desired(6), supervisor.spec_hash(desired(6)), tmp_path / "model")
    cpu.record = supervisor.RunnerRecord(6, pid, pid, None, 8124, cpu.spec_hash, "", "")
    runners._judge(cpu, "ready", 0.0)
    assert cpu.gpu_memory_bytes is None
    runners.replicas.clear()
    runners.stop_all()
