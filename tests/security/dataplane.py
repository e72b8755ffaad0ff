"""What the data-plane security tests share: the in-process `/v1/` gateway called as ASGI, a deployment
whose one ready replica is a real runner process, and a private redis-server the test may stall."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from inference.gateway.app import gateway_app
from inference.models import Replica, ReplicaState
from inference.services.deployments import DeploymentSpec, deployment_create, deployment_reconcile
from inference.services.registry import UploadedModel, model_version_upload
from tests.support import hardware
from tests.support.ports import free_port
from tests.support.tiny_models import COLOURS, colour_classifier


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


async def call(
    method: str, path: str, *, key: str | None = None, body: bytes = b"", content_type: str = "application/json",
    extra: tuple[tuple[bytes, bytes], ...] = (),
) -> Answer:  # fmt: skip
    """One request through the gateway ASGI app, its body sent in 64 KiB chunks as daphne would."""
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()),
               *extra]  # fmt: skip
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    scope = {"type": "http", "method": method, "path": path, "query_string": b"", "headers": headers}
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)] or [b""]
    sent: list[dict] = []

    async def receive() -> dict:
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message: dict) -> None:
        sent.append(message)

    await gateway_app(scope, receive, send)
    start = sent[0]
    return Answer(
        start["status"],
        {k.decode(): v.decode() for k, v in start["headers"]},
        b"".join(m.get("body", b"") for m in sent[1:]),
    )


def colour_deployment(team, owner, tmp_path: Path, name: str = "colours") -> Replica:
    """A deployment of the colour classifier placed on an online HK node: its one replica, not yet ready."""
    upload = UploadedModel(
        name=name,
        task="image-classification",
        model_chunks=[colour_classifier(tmp_path / f"{name}.onnx").read_bytes()],
        labels_text="\n".join(COLOURS),
    )
    version = model_version_upload(team=team, actor=owner, upload=upload)
    hardware.node_hk_cpu()
    deployment = deployment_create(
        team=team, actor=owner, spec=DeploymentSpec(name=name, model_version_id=version.pk)
    )
    deployment_reconcile(deployment.pk)
    return Replica.objects.get(deployment=deployment)


def serve_replica(replica: Replica, url: str) -> None:
    """Mark the replica ready at ``url``, as the node agent's heartbeat would."""
    Replica.objects.filter(pk=replica.pk).update(state=ReplicaState.READY, url=url)


class PrivateRedis:
    """A redis-server of the test's own on a free port, so stalling it (SIGSTOP) disturbs nobody else."""

    def __init__(self, folder: Path) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None, "these tests need redis-server on PATH"
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(folder)],
            stdout=(folder / "redis.log").open("ab"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.05)
        client.close()

    def stall(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self.resume()
        self.process.terminate()
        self.process.wait(10)
