"""The gateway target: a real Lantau (console, worker, node agent) on 127.0.0.1, built with the test
suite's ``Stack`` (``tests.support.stack``; run from the repository root), serving the benchmark models through ``/v1/`` with an API key.

The same replica is also called directly (with its runner token), so the gateway's added latency is
measured against the very runner process behind it. The stack gets its own PostgreSQL database and
Redis database index (11), so it never touches the test suite's.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tests.support.stack import Stack  # the test suite's real-process harness

from .contenders import HttpContender
from .load import Target, result_line

log = logging.getLogger("bench.gateway")
REDIS_DB = 11


def make_stack(workdir: Path) -> Stack:
    """A ``Stack`` whose node agent lets runners use every core (the tests pin them to one)."""

    class BenchStack(Stack):
        def __init__(self, folder: Path) -> None:
            super().__init__(folder)
            redis = urlsplit(self.env["REDIS_URL"])
            self.env["REDIS_URL"] = urlunsplit(redis._replace(path=f"/{REDIS_DB}"))

        def start_node(self, name: str = "bench", region: str = "hk", **options: Any) -> None:
            token = (
                self.manage("create_node_token", "--name", name, "--region", region).strip().splitlines()[-1]
            )
            self.spawn(f"node-{name}", [
                sys.executable, "-m", "inference.agent", "--console", self.url, "--region", region,
                "--name", name, "--interval", "0.5", "--threads", "0", "--data-dir", str(self.workdir / "node"),
            ], env={"LANTAU_NODE_TOKEN": token})  # fmt: skip

    return BenchStack(workdir)


class GatewayBench:
    def __init__(self, workdir: Path) -> None:
        self.stack = make_stack(workdir)
        self.manage_key = self.infer_key = ""

    def start(self) -> None:
        self.stack.start()
        self.stack.start_node()
        self.stack.user("bench", "bench", "owner")
        self.manage_key = self.stack.api_key("bench", "manage")
        self.infer_key = self.stack.api_key("bench", "inference")

    def stop(self) -> None:
        self.stack.stop()

    def deploy(self, name: str, model: Path, labels: list[str], *, max_batch: int, delay_ms: int) -> None:
        from inference.demo.efficientnet import PREPROCESSING

        with self.stack.client(self.manage_key) as api:
            files = {"file": (f"{name}.onnx", model.read_bytes(), "application/octet-stream")}
            data = {"name": name, "task": "image-classification", "labels": "\n".join(labels),
                    "preprocessing": json.dumps(PREPROCESSING)}  # fmt: skip
            upload = api.post("/api/v1/models", files=files, data=data, timeout=300)
            if upload.status_code != 201:
                raise RuntimeError(f"upload of {name} failed: {upload.status_code} {upload.text[:300]}")
            spec = {"name": name, "model_version_id": upload.json()["id"], "max_batch_size": max_batch,
                    "max_queue_delay_ms": delay_ms}  # fmt: skip
            created = api.post("/api/v1/deployments", json=spec)
            if created.status_code != 201:
                raise RuntimeError(f"deployment {name} failed: {created.status_code} {created.text[:300]}")
            self.stack.wait_deployment(api, name, timeout=180)

    def via_gateway(self, name: str) -> Target:
        url = f"{self.stack.url}/v1/deployments/{name}/predict"
        return Target(url, {"Authorization": f"Bearer {self.infer_key}"})

    def replica_direct(self, name: str) -> tuple[Target, str]:
        """The ready replica behind ``name``, called with its runner token; and its base URL.

        The token is derived inside the stack's own Django (its SECRET_KEY), by the one definition.
        """
        code = (
            "from inference.models import Replica; "
            "from inference.credentials import runner_token; "
            f"r = Replica.objects.filter(deployment__name={name!r}, state='ready').first(); "
            "print(r.url, runner_token(r.pk))"
        )
        base, token = self.stack.manage("shell", "-c", code).strip().splitlines()[-1].split()
        return Target(f"{base}/v1/deployments/{name}/predict", {"X-Lantau-Runner-Token": token}), base


def run_gateway(bench, models: dict[str, Path]) -> None:
    """Deploy each model on a fresh stack, then measure its replica directly and through the gateway."""
    gateway = GatewayBench(bench.workdir / "stack")
    try:
        gateway.start()
        for model, path in models.items():
            gateway.deploy(model, path, bench.labels(), max_batch=bench.args.max_batch_size,
                           delay_ms=bench.args.max_queue_delay_ms)  # fmt: skip
    except Exception as exc:  # no database, no Redis, a port in use: report it, keep the other figures
        log.warning("gateway scenarios skipped: %s", exc)
        for model in models:
            for concurrency in bench.args.concurrency:
                bench.emit(result_line("gateway", model, concurrency, None, skipped=str(exc)[:300]))
        gateway.stop()
        return
    try:
        for model in models:
            direct, base = gateway.replica_direct(model)
            console = gateway.stack.procs["console"].pid
            bench.compare(model, [
                HttpContender("stack-runner", direct, metrics_url=base, pid=None),
                HttpContender("gateway", gateway.via_gateway(model), metrics_url=base, pid=console),
            ])  # fmt: skip
    finally:
        gateway.stop()
