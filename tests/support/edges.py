"""Regional edge processes for tests (``python -m inference.edge``), configured as the console would
configure them (``inference.routes_publish.edge_environment``: the edge key and Redis in the
environment, never on the command line), and a small client that reads who served each answer."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from contract.routes import SERVED_BY_HEADER
from inference.credentials import runner_token
from inference.models import Deployment, Replica, ReplicaState
from inference.routes_publish import edge_environment, routes_publish
from inference.runner import launch
from tests.support.factories import image_bytes
from tests.support.runners import REPO, runner_command

RED = image_bytes()


def start_edge(region: str, log_path: Path, *flags: str) -> launch.RunnerProcess:
    """Start an edge for ``region`` on a free port; call ``wait_ready`` on it (starts overlap that way)."""
    log_path.write_bytes(b"")
    command = [sys.executable, "-m", "inference.edge", "--region", region, "--host", "127.0.0.1",
               "--port", "0", *flags]  # fmt: skip
    env = launch.runner_env() | edge_environment()
    return launch.start(command, env=env, cwd=REPO, log_path=log_path)


@dataclass
class Served:
    status: int
    by: str  # X-Lantau-Served-By: region/node/r<id>, "" when no replica answered
    body: dict

    @property
    def region(self) -> str:
        return self.by.split("/")[0]


def predict(
    client: httpx.Client, edge: launch.RunnerProcess, key: str, body: bytes, **headers: str
) -> Served:
    answer = client.post(
        f"{edge.url}/v1/deployments/colours/predict", content=body,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "image/jpeg", **headers},
    )  # fmt: skip
    return Served(answer.status_code, answer.headers.get(SERVED_BY_HEADER, ""), answer.json())


@dataclass
class World:
    deployment: Deployment
    key: str
    folder: Path
    logs: Path
    replicas: dict[str, Replica] = field(default_factory=dict)
    runners: dict[str, launch.RunnerProcess] = field(default_factory=dict)
    edges: dict[str, launch.RunnerProcess] = field(default_factory=dict)

    def start_runners(self, *names: str) -> None:
        """Start the named replicas' runners together, then mark each ready where it listens and publish."""
        for name in names:
            env = launch.runner_env(token=runner_token(self.replicas[name].pk))
            self.runners[name] = launch.start(runner_command(self.folder), env=env, cwd=REPO,
                                              log_path=self.logs / f"runner-{name}.log")  # fmt: skip
        for name in names:
            self.runners[name].wait_ready(60)
            Replica.objects.filter(pk=self.replicas[name].pk).update(state=ReplicaState.READY,
                                                                     url=self.runners[name].url)  # fmt: skip
        routes_publish(self.deployment)  # as the heartbeat that reports them ready does

    def fail(self, name: str) -> None:
        """The node agent reports the replica failed; the console republishes the route."""
        Replica.objects.filter(pk=self.replicas[name].pk).update(state=ReplicaState.FAILED)
        routes_publish(self.deployment)

    def stop(self) -> None:
        for process in [*self.edges.values(), *self.runners.values()]:
            process._signal(signal.SIGCONT)
            process.stop(10)


def start_edges(w: World, *flags: str) -> None:
    for region in ("hk", "us"):
        w.edges[region] = start_edge(region, w.logs / f"edge-{region}.log", *flags)
    for edge in w.edges.values():
        edge.wait_ready(60)


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``check`` until true: route changes travel by pub/sub, so they land within moments."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


class Load:
    """Requests sent back to back from another thread while a test changes the world."""

    def __init__(self, edge: launch.RunnerProcess, key: str) -> None:
        self.answers: list[Served] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(edge, key), daemon=True)

    def _run(self, edge: launch.RunnerProcess, key: str) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                self.answers.append(predict(client, edge, key, RED))

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
