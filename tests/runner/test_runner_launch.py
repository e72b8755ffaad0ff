"""The shared runner launcher (inference.runner.launch): clear errors when a runner never comes up,
and SIGTERM-then-SIGKILL stopping. The happy path is exercised by every runner test (tests.support.runners)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from inference.runner import launch
from tests.support.runners import REPO, image_manifest, runner_command, write_manifest


def test_a_runner_that_exits_before_listening_is_reported_with_its_last_output(tmp_path: Path) -> None:
    write_manifest(tmp_path, image_manifest(task="speech"))
    log_path = tmp_path / "runner.log"
    handle = launch.start(runner_command(tmp_path), env=launch.runner_env(), cwd=REPO, log_path=log_path)
    with pytest.raises(launch.LaunchError, match="exited with code 2 before listening") as caught:
        handle.wait_ready(30)
    assert "unsupported task 'speech'" in str(caught.value)


def test_a_silent_process_times_out_and_is_stopped(tmp_path: Path) -> None:
    script = "import sys, time; print('warming up', flush=True); time.sleep(60)"
    handle = launch.start([sys.executable, "-c", script], env=launch.runner_env(), group=True)
    started = time.monotonic()
    with pytest.raises(launch.LaunchError, match="no listening line within 1 s") as caught:
        handle.wait_listening(1)
    assert "warming up" in str(caught.value) and time.monotonic() - started < 15
    assert handle.process.poll() is not None  # stopped, not left behind


def test_stop_escalates_to_sigkill_when_sigterm_is_ignored() -> None:
    script = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('LANTAU_RUNNER_LISTENING port=4321', flush=True); time.sleep(60)"
    )
    handle = launch.start([sys.executable, "-c", script], env=launch.runner_env())
    assert handle.wait_listening(10) == 4321
    assert handle.stop(timeout=0.5) == -9


def test_runner_env_drops_inherited_runner_settings_and_adds_the_given_ones() -> None:
    base = {"PATH": "/bin", "LANTAU_REDIS_URL": "redis://elsewhere", "LANTAU_REDIS_PREFIX": "other"}
    env = launch.runner_env(token="t", replica="7", base=base)
    assert env["PATH"] == "/bin" and env["LANTAU_RUNNER_TOKEN"] == "t" and env["LANTAU_REPLICA_ID"] == "7"
    assert "LANTAU_REDIS_URL" not in env and "LANTAU_REDIS_PREFIX" not in env
    command = launch.runner_command(Path("m"), "--threads", "2", threads=1, redis_prefix="a", spinning=True,
                                    max_queue=None)  # fmt: skip
    assert command[-7:] == ["--threads", "1", "--redis-prefix", "a", "--spinning", "--threads", "2"]
