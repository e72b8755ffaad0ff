"""Server processes for the benchmark: start, wait until ready, read their batch counters, stop."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
LISTENING = "LANTAU_RUNNER_LISTENING port="
CLEAN_ENV = ("LANTAU_RUNNER_TOKEN", "LANTAU_REDIS_URL", "LANTAU_REPLICA_ID")


@dataclass
class Server:
    name: str
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def _read_port(process: subprocess.Popen, timeout: float) -> int | None:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and selector.select(deadline - time.monotonic()):
        line = process.stdout.readline().decode(errors="replace")
        if line.startswith(LISTENING):
            return int(line[len(LISTENING) :].split()[0])
        if not line:
            break
    return None


def start(name: str, command: list[str], log_dir: Path, timeout: float = 120) -> Server:
    """Start ``command`` (which prints the LISTENING line) and wait for its ``/readyz``."""
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log)
    port = _read_port(process, timeout)
    if port is None:
        process.kill()
        raise RuntimeError(f"{name} never listened:\n{log_path.read_text(errors='replace')[-2000:]}")
    server = Server(name, process, port, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(server.url + "/readyz", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"{name} never became ready:\n{log_path.read_text(errors='replace')[-2000:]}")


def runner_command(model_dir: Path, *, max_batch: int, delay_ms: float, threads: int) -> list[str]:
    return [
        sys.executable, "-m", "inference.runner", "--model-dir", str(model_dir), "--host", "127.0.0.1",
        "--port", "0", "--max-batch-size", str(max_batch), "--max-queue-delay-ms", str(delay_ms),
        "--threads", str(threads), "--max-queue", "1024",
    ]  # fmt: skip


def plain_command(model_path: Path, *, threads: int) -> list[str]:
    return [sys.executable, "-m", "bench.plain_server", "--model", str(model_path), "--threads", str(threads)]


_BATCH = re.compile(r"^lantau_runner_batch_size_(sum|count)\{[^}]*\} ([0-9.eE+-]+)$", re.MULTILINE)


def batch_counters(base_url: str) -> tuple[float, float]:
    """(items, batches) so far from a runner's ``/metrics``."""
    text = httpx.get(base_url + "/metrics", timeout=10).text
    found = dict(_BATCH.findall(text))
    return float(found.get("sum", 0)), float(found.get("count", 0))

