"""Runner processes on this node: start, watch, stop. One process per replica (``inference.runner.launch``)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from contract.redis_keys import DEFAULT_PREFIX
from inference.runner import launch

# Request limits the console may set for its runners (desired["limits"]), each a runner ``--max-*`` flag.
LIMIT_OPTIONS = frozenset({
    "max_body_bytes", "max_json_depth", "max_prompt_bytes", "max_messages", "max_stop_strings",
    "max_inputs", "max_image_pixels",
})  # fmt: skip


@dataclass
class RunnerProcess:
    replica_id: int
    runner: launch.RunnerProcess
    advertise_host: str
    ready: bool = False
    started_at: float = field(default_factory=time.monotonic)

    @property
    def process(self) -> subprocess.Popen[str]:
        return self.runner.process

    @property
    def port(self) -> int | None:
        return self.runner.port

    @property
    def url(self) -> str:
        return f"http://{self.advertise_host}:{self.port}" if self.port else ""

    def error(self) -> str:
        lines = [line for line in self.runner.tail if line.strip()]
        return f"runner exited with code {self.process.returncode}: " + " | ".join(lines[-3:])


def _echo(replica_id: int) -> Callable[[str], None]:
    def write(line: str) -> None:
        sys.stderr.write(f"runner r{replica_id} | {line}\n")
        sys.stderr.flush()

    return write


def limit_options(desired: dict[str, Any]) -> dict[str, int]:
    """The known, positive integer limits of a desired replica; anything else is left to the runner's defaults."""
    limits = desired.get("limits")
    if not isinstance(limits, dict):
        return {}
    return {
        name: value
        for name, value in limits.items()
        if name in LIMIT_OPTIONS and isinstance(value, int) and not isinstance(value, bool) and value > 0
    }


def start(
    desired: dict[str, Any],
    model_dir: Path,
    *,
    bind_host: str,
    advertise_host: str,
    threads: int,
    redis_url: str | None = None,
) -> RunnerProcess:
    """Start the runner of one desired replica; its output goes to the agent's stderr, prefixed."""
    batching = desired["batching"]
    command = launch.runner_command(
        model_dir, host=bind_host, max_batch_size=batching["max_batch_size"],
        max_queue_delay_ms=batching["max_queue_delay_ms"], threads=threads,
        redis_prefix=desired.get("redis_prefix") or DEFAULT_PREFIX,  # the console's: keys it wrote are found
        **limit_options(desired),
    )  # fmt: skip
    # With Redis: API keys at the runner, rate limits, usage counters and live metrics.
    env = launch.runner_env(token=desired["runner_token"], redis_url=redis_url, replica=str(desired["id"]))
    runner = launch.start(command, env=env, sink=_echo(desired["id"]), group=True)
    return RunnerProcess(replica_id=desired["id"], runner=runner, advertise_host=advertise_host)


def check_ready(proc: RunnerProcess, client: httpx.Client) -> bool:
    if proc.ready or proc.port is None or proc.process.poll() is not None:
        return proc.ready and proc.process.poll() is None
    try:
        proc.ready = client.get(proc.url + "/readyz", timeout=0.5).status_code == 200
    except httpx.HTTPError:
        proc.ready = False
    return proc.ready


def stop(proc: RunnerProcess, timeout: float = 10.0) -> None:
    proc.runner.stop(timeout)
