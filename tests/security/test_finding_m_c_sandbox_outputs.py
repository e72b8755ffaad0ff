"""Review finding M-C: a FIFO planted in the sandbox's out/ hung the worker, and processes the child
started with ``setsid()`` outlived the job.

These run the real child (``python -m inference.sandbox.child``) and its ``confinement`` task, which
plants FIFOs or leaves daemons as hostile model code would. Each call runs in a thread with a deadline:
a parent blocked in ``open()`` on a FIFO fails the test instead of hanging it (the FIFO is then opened
for writing, which releases the parent).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from inference.sandbox import Sandbox, SandboxFailed, SandboxLimits

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the worker runs as root; namespaces need it here")
DEADLINE_S = 30.0


class Call:
    """``box.call`` (then ``take``) in a thread; what it returned or raised, and whether it came back."""

    def __init__(self, args: dict, *, limits: SandboxLimits | None = None, take: str | None = None) -> None:
        self.args, self.limits, self.take = args, limits or SandboxLimits(timeout_s=20), take
        self.out: Path | None = None
        self.root: Path | None = None
        self.result: object = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        try:
            with Sandbox(self.limits) as box:
                self.out, self.root = box.out, box.root
                self.result = box.call("confinement", self.args)
                if self.take:
                    box.take(self.take, box.root.parent / f"{box.root.name}-taken")
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc

    def finish(self) -> float:
        """Seconds it took; fails (after releasing a blocked parent) past the deadline."""
        started = time.monotonic()
        self.thread.start()
        self.thread.join(DEADLINE_S)
        if self.thread.is_alive():
            release(self.out)
            self.thread.join(10)
            pytest.fail(f"the worker blocked for more than {DEADLINE_S:g} s on out/ (a FIFO)")
        return time.monotonic() - started


def release(out: Path | None) -> None:
    """Open every FIFO under out/ for writing: a reader blocked in open() then returns."""
    if out is None or not out.exists():
        return
    for path in out.rglob("*"):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        os.close(fd)


@pytest.mark.parametrize(
    "args, name",
    [
        ({"fifos": ["result.json"], "exit_now": True}, "result.json"),  # the result replaced, then exit 0
        ({"fifos": ["progress.jsonl"], "sleep_s": 15}, "progress.jsonl"),  # progress replaced while running
    ],
)
def test_m_c_a_fifo_for_the_result_or_the_progress_is_refused_at_once(args: dict, name: str) -> None:
    call = Call(args)
    took = call.finish()
    assert isinstance(call.error, SandboxFailed), call.error
    assert f"{name} is not a regular file" in str(call.error)
    assert took < 10, f"refused only after {took:.1f} s"  # not after the child's sleep or its deadline


def test_m_c_a_fifo_planted_as_an_output_is_refused_by_take() -> None:
    call = Call({"fifos": ["model.onnx"]}, take="model.onnx")
    call.finish()
    assert isinstance(call.error, SandboxFailed), call.error
    assert "model.onnx is not a regular file" in str(call.error)
    assert call.root is not None and not call.root.parent.joinpath(f"{call.root.name}-taken").exists()
    regular = Call({}, take="result.json")  # a regular file the child wrote is still taken
    regular.finish()
    assert regular.error is None and isinstance(regular.result, dict) and "uid" in regular.result
    assert regular.root is not None
    taken = regular.root.parent / f"{regular.root.name}-taken"
    assert b'"ok": true' in taken.read_bytes()
    taken.unlink()


def survivors(root: Path) -> list[int]:
    """Live processes whose command line names this box (the child and whatever it forked)."""
    found = []
    needle = str(root).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmdline and state != "Z":
            found.append(int(entry))
    return found


def settle(root: Path) -> list[int]:
    left = survivors(root)
    deadline = time.monotonic() + 2
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = survivors(root)
    for pid in left:  # started by this test: do not leave them behind whatever the outcome
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


@ROOT_ONLY
def test_m_c_processes_started_with_setsid_do_not_outlive_a_job_that_ended() -> None:
    call = Call({"daemons": 2, "daemon_s": 120})
    call.finish()
    assert call.error is None, call.error
    assert call.root is not None
    assert settle(call.root) == [], "a double-forked setsid() process outlived its job"
    assert call.result["uid"] != 0  # type: ignore[index]  # the task still runs as the sandbox user


@ROOT_ONLY
def test_m_c_processes_started_with_setsid_do_not_outlive_a_job_that_was_stopped() -> None:
    call = Call({"daemons": 2, "daemon_s": 120, "sleep_s": 60}, limits=SandboxLimits(timeout_s=1.5))
    call.finish()
    assert isinstance(call.error, SandboxFailed) and "took longer than 1.5 s" in str(call.error)
    assert call.root is not None
    assert settle(call.root) == [], "a double-forked setsid() process outlived its stopped job"
    # The limits still end the task with their own message (the task's end passes through the init).
    memory = Call({"allocate_bytes": 1024**3}, limits=SandboxLimits(memory_bytes=512 * 1024**2))
    memory.finish()
    assert isinstance(memory.error, SandboxFailed) and "exhausted the 512 MiB memory limit" in str(
        memory.error
    )
