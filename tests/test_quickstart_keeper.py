"""The quick start keeps going when one of its processes dies (issue 19: one child killed by the kernel
took the whole quick start down). ``scripts/quickstart.py``'s ``Keeper`` starts a dead child again after
a back-off and leaves the others alone; a child that keeps dying stops the quick start with its last
lines. Real child processes, with the module's own ``Child``."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def quickstart():
    spec = importlib.util.spec_from_file_location("quickstart_keeper", REPO / "scripts" / "quickstart.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def child(quickstart, tmp_path: Path, name: str, code: str):
    return quickstart.Child(name, [sys.executable, "-c", code], dict(os.environ), tmp_path)


def wait_for(check, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_killed_child_is_started_again_and_the_others_keep_running(quickstart, tmp_path) -> None:
    worker = child(quickstart, tmp_path, "worker", "import time; print('up', flush=True); time.sleep(60)")
    console = child(quickstart, tmp_path, "console", "import time; time.sleep(60)")
    keeper = quickstart.Keeper([worker, console])
    first, console_pid = worker.proc.pid, console.proc.pid
    try:
        wait_for(lambda: "up" in (tmp_path / "worker.log").read_text())
        os.killpg(first, signal.SIGKILL)  # as the OOM killer would
        worker.proc.wait(5)
        began = time.monotonic()
        keeper.tick(began)  # noticed: due again after the first back-off
        assert worker.proc.pid == first
        keeper.tick(began + quickstart.RESTART_BACKOFF_S[0])
        assert worker.proc.pid != first and worker.proc.poll() is None
        assert console.proc.pid == console_pid and console.proc.poll() is None
        wait_for(lambda: (tmp_path / "worker.log").read_text().count("up") == 2)  # one log, both lives
    finally:
        quickstart.stop_children([worker, console])


def test_a_child_that_keeps_dying_stops_the_quick_start_with_its_last_lines(quickstart, tmp_path) -> None:
    dying = child(quickstart, tmp_path, "node", "import sys; print('bad config', flush=True); sys.exit(3)")
    keeper = quickstart.Keeper([dying])
    now, starts = 0.0, 1
    try:
        with pytest.raises(quickstart.Failed) as failed:
            for backoff in quickstart.RESTART_BACKOFF_S:  # exits at 0, 1.1, 3.2, 7.3, 15.4 s: one minute
                wait_for(lambda: dying.proc.poll() is not None)
                keeper.tick(now)  # the exit is noticed (the fifth raises)
                now += backoff + 0.1
                keeper.tick(now)  # started again
                starts += 1
        assert starts == quickstart.CRASH_LOOP
        message = str(failed.value)
        assert (
            "node exited 5 times within 60s (last code 3); giving up" in message and "bad config" in message
        )
    finally:
        quickstart.stop_children([dying])
