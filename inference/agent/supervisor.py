"""Runner processes on this node: start, watch, stop. One process per replica."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

LISTENING = "LANTAU_RUNNER_LISTENING port="


@dataclass
class RunnerProcess:
    replica_id: int
    process: subprocess.Popen
    advertise_host: str
    port: int | None = None
    ready: bool = False
    started_at: float = field(default_factory=time.monotonic)
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=20))

    @property
    def url(self) -> str:
        return f"http://{self.advertise_host}:{self.port}" if self.port else ""

    def error(self) -> str:
        lines = [line for line in self.tail if line.strip()]
        return f"runner exited with code {self.process.returncode}: " + " | ".join(lines[-3:])


def _pump(proc: RunnerProcess, stream, sink) -> None:
    # Read the runner's output in a thread: find the port line, keep a tail for error reports.
    for raw in stream:
        line = raw.rstrip("\n")
        if line.startswith(LISTENING):
            proc.port = int(line[len(LISTENING):].split()[0])
        proc.tail.append(line)
        sink.write(f"runner r{proc.replica_id} | {line}\n")
        sink.flush()


def start(desired: dict, model_dir: Path, *, bind_host: str, advertise_host: str, threads: int,
          redis_url: str | None = None) -> RunnerProcess:
    batching = desired["batching"]
    cmd = [sys.executable, "-m", "inference.runner", "--model-dir", str(model_dir), "--host", bind_host,
           "--port", "0", "--max-batch-size", str(batching["max_batch_size"]),
           "--max-queue-delay-ms", str(batching["max_queue_delay_ms"]), "--threads", str(threads)]
    env = {**os.environ, "LANTAU_RUNNER_TOKEN": desired["runner_token"], "PYTHONUNBUFFERED": "1",
           "LANTAU_REPLICA_ID": str(desired["id"])}
    if redis_url:  # API keys at the runner, rate limits, usage counters and live metrics
        env["LANTAU_REDIS_URL"] = redis_url
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               start_new_session=True)
    proc = RunnerProcess(replica_id=desired["id"], process=process, advertise_host=advertise_host)
    threading.Thread(target=_pump, args=(proc, process.stdout, sys.stderr), daemon=True).start()
    return proc


def check_ready(proc: RunnerProcess, client: httpx.Client) -> bool:
    if proc.ready or proc.port is None or proc.process.poll() is not None:
        return proc.ready and proc.process.poll() is None
    try:
        proc.ready = client.get(proc.url + "/readyz", timeout=0.5).status_code == 200
    except httpx.HTTPError:
        proc.ready = False
    return proc.ready


def stop(proc: RunnerProcess, timeout: float = 10.0) -> None:
    if proc.process.poll() is not None:
        return
    try:
        os.killpg(proc.process.pid, signal.SIGTERM)
        proc.process.wait(timeout=timeout)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.process.wait(timeout=5)
