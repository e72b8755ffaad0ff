"""The agent's runner supervision with real runner processes (no console: the desired replicas are given
as a heartbeat answer would give them).

* A runner that hangs (SIGSTOP: it keeps its port but stops answering) is detected by the continuous
  ``/readyz`` probes, killed and replaced; one that crashes is restarted with back-off and reported
  FAILED, with the reason, after ``max_attempts`` starts; one that refuses its device fails at once.
* Runners outlive their agent: a new agent adopts those whose spec matches (same process, no
  duplicate), and stops those no longer desired or started for another spec.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from contract.replicas import ReplicaState
from inference.agent import supervisor
from tests.support.runners import image_manifest, write_manifest
from tests.support.stack import runner_pids
from tests.support.tiny_models import colour_classifier

FAST = supervisor.Policy(
    probe_timeout_s=0.5, hang_probes=2, start_timeout_s=60, max_attempts=2, backoff_s=0.2
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("colours")
    colour_classifier(folder / "model.onnx")
    return write_manifest(folder, image_manifest())


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "node"
    for pid in runner_pids(tmp_path / "node"):  # whatever a test left running
        os.kill(pid, signal.SIGKILL)


def desired(rid: int = 1, **overrides: object) -> dict:
    spec = {
        "id": rid, "deployment": "colours", "version_id": 1, "device": "cpu", "gpu_index": None,
        "batching": {"max_batch_size": 4, "max_queue_delay_ms": 2}, "runner_token": f"token-{rid}",
        "redis_prefix": "lantau", "limits": {},
    }  # fmt: skip
    spec.update(overrides)
    return spec


def until(runners: supervisor.Supervisor, check: Callable[[], object], timeout: float = 60) -> None:
    """Tick the supervisor (as the agent's loop does) until ``check`` holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runners.tick()
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"not reached in {timeout} s: {runners.reports()}")


def report(runners: supervisor.Supervisor, rid: int = 1) -> dict:
    return next(r for r in runners.reports() if r["id"] == rid)


def is_ready(runners: supervisor.Supervisor, rid: int = 1) -> Callable[[], bool]:
    return lambda: report(runners, rid)["state"] == ReplicaState.READY


def test_a_hung_runner_is_detected_killed_and_replaced(model_dir, data_dir) -> None:
    runners = supervisor.Supervisor(data_dir, threads=1, policy=FAST, echo=False)
    try:
        replica = runners.ensure(desired(), model_dir)
        until(runners, is_ready(runners))
        assert replica.record is not None
        hung = replica.record.pid
        os.kill(hung, signal.SIGSTOP)  # keeps its port; the kernel still accepts connections
        until(runners, lambda: replica.record is None or replica.record.pid != hung, timeout=30)
        assert report(runners)["state"] == ReplicaState.STARTING
        assert "stopped answering /readyz (2 probes in a row failed: timeout)" in runners.replicas[1].error
        until(runners, is_ready(runners))
        assert replica.record is not None and replica.record.pid != hung and replica.attempts == 2
        assert not supervisor.process_alive(hung) and runner_pids(data_dir) == [replica.record.pid]
        assert httpx.get(f"http://127.0.0.1:{replica.port}/readyz").status_code == 200
    finally:
        runners.stop_all()


def test_a_ready_runner_that_answers_one_probe_late_keeps_its_traffic(model_dir, data_dir) -> None:
    """Slow is not hung: fewer than ``hang_probes`` late answers leave it ready (in its route) and running."""
    runners = supervisor.Supervisor(data_dir, threads=1, policy=FAST, echo=False)
    try:
        replica = runners.ensure(desired(), model_dir)
        until(runners, is_ready(runners))
        assert replica.record is not None
        pid = replica.record.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            until(runners, lambda: replica.misses >= 1, timeout=10)  # one probe timed out
            assert report(runners)["state"] == ReplicaState.READY
        finally:
            os.kill(pid, signal.SIGCONT)
        until(runners, lambda: replica.misses == 0, timeout=10)
        assert replica.record is not None and replica.record.pid == pid and replica.attempts == 1
        assert report(runners)["state"] == ReplicaState.READY
    finally:
        runners.stop_all()


def test_a_crashing_runner_is_restarted_then_reported_failed_and_a_bad_device_fails_at_once(
    model_dir, data_dir
) -> None:
    runners = supervisor.Supervisor(data_dir, threads=1, policy=FAST, echo=False)
    try:
        replica = runners.ensure(desired(), model_dir)
        cuda = runners.ensure(desired(2, device="cuda", gpu_index=0), model_dir)
        until(runners, lambda: is_ready(runners)() and report(runners, 2)["state"] == ReplicaState.FAILED)
        # This host's onnxruntime has no CUDA provider: exit 2, no retry, the reason for the console.
        assert cuda.attempts == 1 and "device cuda needs CUDAExecutionProvider" in report(runners, 2)["error"]
        for attempt in (1, 2):
            assert replica.record is not None and replica.attempts == attempt
            os.kill(replica.record.pid, signal.SIGKILL)
            if attempt == 1:
                until(runners, lambda: replica.attempts == 2 and is_ready(runners)())
        until(runners, lambda: report(runners)["state"] == ReplicaState.FAILED)
        error = report(runners)["error"]
        assert error.startswith("runner exited with code -9") and error.endswith("(after 2 starts)")
        assert runner_pids(data_dir) == []
        runners.unwanted(set())  # the console replaced them: the failures are forgotten
        assert runners.reports() == []
    finally:
        runners.stop_all()


def test_a_new_agent_adopts_matching_runners_and_stops_the_others(model_dir, data_dir) -> None:
    first = supervisor.Supervisor(data_dir, threads=1, policy=FAST, echo=False)
    kept = first.ensure(desired(1), model_dir)
    changed = first.ensure(desired(2), model_dir)
    dropped = first.ensure(desired(3), model_dir)
    until(first, lambda: all(is_ready(first, rid)() for rid in (1, 2, 3)))
    pids = {rid: r.record.pid for rid, r in ((1, kept), (2, changed), (3, dropped)) if r.record}
    assert sorted(runner_pids(data_dir)) == sorted(pids.values())
    first.pool.shutdown(wait=False)  # the agent dies without stopping anything (as after SIGKILL)

    second = supervisor.Supervisor(data_dir, threads=1, policy=FAST, echo=False)
    try:
        assert set(second.orphans) == {1, 2, 3}
        # The console now wants replica 1 as before, replica 2 with other batching, and no replica 3.
        second.unwanted({1, 2})
        adopted = second.ensure(desired(1), model_dir)
        restarted = second.ensure(
            desired(2, batching={"max_batch_size": 8, "max_queue_delay_ms": 2}), model_dir
        )
        assert adopted.record is not None and adopted.record.pid == pids[1] and adopted.process is None
        assert not supervisor.process_alive(pids[2]) and not supervisor.process_alive(pids[3])
        until(second, lambda: is_ready(second, 1)() and is_ready(second, 2)())
        assert report(second, 1)["url"] == f"http://127.0.0.1:{adopted.port}"
        assert restarted.record is not None and restarted.record.pid != pids[2]
        assert sorted(runner_pids(data_dir)) == sorted([pids[1], restarted.record.pid])  # no duplicate
        # An adopted runner is still watched: killed, it is noticed and started again.
        os.kill(pids[1], signal.SIGKILL)
        until(
            second,
            lambda: adopted.record is not None and adopted.record.pid != pids[1] and is_ready(second)(),
        )
        assert len(runner_pids(data_dir)) == 2
    finally:
        second.stop_all()
    assert runner_pids(data_dir) == []
