"""Server processes for the benchmark: start, wait until ready, read their batch counters, stop."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from inference.runner import launch

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Server:
    name: str
    handle: launch.RunnerProcess
    port: int
    log_path: Path

    @property
    def process(self) -> subprocess.Popen[str]:
        return self.handle.process

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.handle.stop(20)


def start(name: str, command: list[str], log_dir: Path, timeout: float = 120) -> Server:
    """Start ``command`` (which prints the listening line) and wait for its ``/readyz``."""
    log_path = log_dir / f"{name}.log"
    log_path.write_bytes(b"")
    handle = launch.start(command, env=launch.runner_env(), cwd=REPO, log_path=log_path)
    try:
        handle.wait_ready(timeout)
    except launch.LaunchError as exc:
        raise RuntimeError(f"{name}: {exc}") from None
    assert handle.port is not None
    return Server(name, handle, handle.port, log_path)


def runner_command(model_dir: Path, *, max_batch: int, delay_ms: float, threads: int) -> list[str]:
    return launch.runner_command(model_dir, max_batch_size=max_batch, max_queue_delay_ms=delay_ms, threads=threads,
                                 max_queue=1024)  # fmt: skip


def plain_command(model_path: Path, *, threads: int) -> list[str]:
    return [sys.executable, "-m", "bench.plain_server", "--model", str(model_path), "--threads", str(threads)]


_BATCH = re.compile(r"^lantau_runner_batch_size_(sum|count)\{[^}]*\} ([0-9.eE+-]+)$", re.MULTILINE)


def batch_counters(base_url: str) -> tuple[float, float]:
    """(items, batches) so far from a runner's ``/metrics``."""
    text = httpx.get(base_url + "/metrics", timeout=10).text
    found = dict(_BATCH.findall(text))
    return float(found.get("sum", 0)), float(found.get("count", 0))
