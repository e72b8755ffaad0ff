"""The rollout target: a version change of a deployment with two replicas, under a steady load.

A real Lantau on 127.0.0.1 (the test suite's ``Stack``: console, worker with beat, one hk node agent
joined with an edge join token and running the region's edge, ``--edge-port``), its own PostgreSQL
database and Redis database index (14). The model is version 1 of a deployment with ``--rollout-replicas``
(2) replicas; a few clients send requests at a steady, bounded rate (``--rollout-rps`` in all, paced, so
the load neither grows nor stops while replicas come and go) through the agent's edge (or, with
``--rollout-via console``, the console's ``/v1/``). After ``before_s`` of it, version 2 is rolled out
(``PATCH /api/v1/deployments/{name}``), the rollout followed to its end, and the load kept for
``after_s`` more.

Full run: EfficientNet-Lite0, the benchmark's FP32 model as version 1 and its static INT8 copy as
version 2 (each runner with ``--threads``, default 1: three runners share the machine during the change).
``--quick``: the tests' 16x16 colour classifier (version 2 the same at 8x8), so the scenario costs a
stack's start and a few seconds.

The line: ``requests``, ``errors`` (non-200 or a wrong answer), percentiles and throughput during the
change (from the PATCH until every replica is of version 2 and ready), the same ``before_*`` (the
window before it) and ``after_*``; ``replaced_s`` (PATCH to that moment), ``rollout_s`` (PATCH until
the rollout's state left ``in_progress``: it is recorded by a later reconciler pass, up to 15 s after;
the quick run does not wait for it) and ``rollout_server_s`` (the rollout's own started/finished
times), the rollout's state, the answers per version during the change, the totals.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from inference.runner.metrics import percentile
from tests.support.stack import Stack  # the test suite's real-process harness

from .load import result_line

EDGE_LABEL = "lantau.io/edge"  # inference.services.node_join.EDGE_LABEL (Django-side; not imported here)

log = logging.getLogger("bench.rollout")
REDIS_DB = 14
NAME = "rollout"
TIMEOUT_S = 10.0  # a request's limit: past it, it counts as failed


@dataclass(frozen=True)
class RolloutOptions:
    quick: bool = False
    replicas: int = 2
    clients: int = 4
    rps: float = 16.0  # offered in all, paced: each client sends every clients/rps seconds
    before_s: float = 20.0
    after_s: float = 10.0
    via: str = "edge"  # or "console"
    threads: int = 1  # onnxruntime threads per runner (2 old + 1 new replica share the machine)

    @classmethod
    def quick_run(cls, **overrides: Any) -> RolloutOptions:
        return cls(**{"quick": True, "clients": 2, "rps": 10.0, "before_s": 1.5, "after_s": 0.5, **overrides})


@dataclass
class Outcome:
    at: float  # monotonic send time
    latency_s: float
    status: int  # 0: no answer; 299: 200 with a wrong answer
    version: str


@dataclass
class PacedLoad:
    """``clients`` threads, each sending one request every ``clients / rps`` seconds (at once when late)."""

    url: str
    headers: dict[str, str]
    body: bytes
    expected: str | None  # the top label every answer must have (None: any 200 with predictions)
    clients: int
    rps: float
    outcomes: list[Outcome] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for index in range(self.clients):
            thread = threading.Thread(
                target=self._client, args=(index,), name=f"rollout-load-{index}", daemon=True
            )
            thread.start()
            self.threads.append(thread)

    def _client(self, index: int) -> None:
        interval = self.clients / self.rps
        next_at = time.monotonic() + interval * index / self.clients
        with httpx.Client(timeout=TIMEOUT_S) as client:
            for _ in range(200_000):  # bounded
                if self.stop.is_set():
                    return
                delay = next_at - time.monotonic()
                if delay > 0:
                    self.stop.wait(delay)
                next_at = max(next_at + interval, time.monotonic() - interval)
                self.outcomes.append(self._one(client))

    def _one(self, client: httpx.Client) -> Outcome:
        started = time.monotonic()
        try:
            answer = client.post(self.url, content=self.body, headers=self.headers)
        except httpx.HTTPError:
            return Outcome(started, time.monotonic() - started, 0, "")
        latency = time.monotonic() - started
        if answer.status_code != 200:
            return Outcome(started, latency, answer.status_code, "")
        try:
            body = answer.json()
            label = body["predictions"][0]["label"]
        except (ValueError, KeyError, IndexError, TypeError):
            return Outcome(started, latency, 299, "")
        right = self.expected is None or label == self.expected
        return Outcome(started, latency, 200 if right else 299, body.get("model_version", ""))

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(TIMEOUT_S + 5)

    def window(self, start: float, end: float) -> list[Outcome]:
        return [o for o in list(self.outcomes) if start <= o.at < end]


def figures(outcomes: list[Outcome], seconds: float, prefix: str = "") -> dict[str, Any]:
    ok = sorted(o.latency_s for o in outcomes if o.status == 200)

    def ms(q: float) -> float | None:
        return round(percentile(ok, q) * 1000, 3) if ok else None

    return {f"{prefix}requests": len(outcomes), f"{prefix}errors": len(outcomes) - len(ok),
            f"{prefix}p50_ms": ms(0.50), f"{prefix}p95_ms": ms(0.95), f"{prefix}p99_ms": ms(0.99),
            f"{prefix}throughput_rps": round(len(ok) / seconds, 2) if seconds > 0 else 0.0}  # fmt: skip


class RolloutStack(Stack):
    """A ``Stack`` with its own Redis index, no bake time (the rollover itself; the default bakes 60 s)
    and one node agent, joined with an edge join token, running the hk edge."""

    def __init__(self, folder: Path, threads: int) -> None:
        super().__init__(folder)
        redis = urlsplit(self.env["REDIS_URL"])
        self.env["REDIS_URL"] = urlunsplit(redis._replace(path=f"/{REDIS_DB}"))
        self.env["LANTAU_ROLLOUT_BAKE_S"] = "0"
        self.threads = threads

    def start_with_owner(self) -> dict[str, str]:
        """``Stack.start``, with the owner and its keys made while the console boots: their
        ``manage.py shell`` needs only the migrated database."""
        self.prepare()  # the database and the processes' Redis users
        self.start_console(wait=False)
        self.start_worker()
        keys = self.owner_keys("bench", "bench", install_admin=True)  # it joins an edge node
        self.wait_http("/readyz")
        return keys

    def stop(self) -> None:
        """Every process asked to stop at once (the agent stops its edge and runners), then ``Stack.stop``."""
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(15)
        super().stop()

    def start_edge_node(self, join_token: str) -> None:
        command = [sys.executable, "-m", "inference.agent", "--console", self.url, "--region", "hk", "--name",
                   "bench", "--interval", "0.5", "--threads", str(self.threads), "--data-dir",
                   str(self.node_dir("bench")), "--edge-port", "0", "--edge-host", "127.0.0.1"]  # fmt: skip
        env = {"LANTAU_JOIN_TOKEN": join_token, "LANTAU_REDIS_URL": self._agent_redis_url}  # its own user
        self.nodes["bench"] = (command, env)  # stop() ends its runners and edge even if it was killed
        self.spawn("node-bench", command, env=env)

    def edge_url(self) -> str:
        edge = self.agent_state("bench").get("edge") or {}
        return f"http://127.0.0.1:{edge['port']}" if edge.get("ready") and edge.get("port") else ""


def _models(
    bench: Any, options: RolloutOptions, workdir: Path
) -> tuple[list[Path], str, dict[str, str], bytes]:
    """The two versions' files, the model's name in the line, the upload's form fields, a request body."""
    if options.quick:
        from tests.support.factories import image_bytes
        from tests.support.tiny_models import COLOURS, colour_classifier

        paths = [colour_classifier(workdir / "colours-16.onnx", size=16),
                 colour_classifier(workdir / "colours-8.onnx", size=8)]  # fmt: skip
        data = {"labels": "\n".join(COLOURS), "preprocessing": '{"mean": [0, 0, 0], "std": [1, 1, 1]}'}
        return paths, "colours-16->8", data, image_bytes((250, 10, 10))
    from inference.demo.efficientnet import PREPROCESSING

    from . import assets

    models = assets.prepare_models(bench.workdir, ["fp32", "int8"])
    data = {"labels": "\n".join(bench.labels()), "preprocessing": json.dumps(PREPROCESSING)}
    return [models["fp32"], models["int8"]], "efficientnet-lite0-fp32->int8", data, bench.bodies[1]


def _upload(api: httpx.Client, path: Path, data: dict[str, str]) -> tuple[int, str]:
    """Upload ``path`` as the next version of model ``rollout``: its id and name (``rollout:<n>``)."""
    files = {"file": (path.name, path.read_bytes(), "application/octet-stream")}
    answer = api.post("/api/v1/models", files=files, data={"name": NAME, "task": "image-classification", **data},
                      timeout=300)  # fmt: skip
    if answer.status_code != 201:
        raise RuntimeError(f"upload of {path.name} failed: {answer.status_code} {answer.text[:300]}")
    return int(answer.json()["id"]), f"{NAME}:{answer.json()['number']}"


def _wait(check: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.HTTPError, KeyError, TypeError, ValueError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"not {what} after {timeout:.0f} s")


def measure(bench: Any, options: RolloutOptions) -> dict[str, Any]:
    workdir = bench.workdir / "rollout"
    workdir.mkdir(parents=True, exist_ok=True)
    paths, model, data, body = _models(bench, options, workdir)
    # FP32 and INT8 may rank this photo's close classes differently: the full run checks the shape only.
    expected = "red" if options.quick else None
    shutil.rmtree(workdir / "stack", ignore_errors=True)  # a kept --work-dir: no credential of a past run
    stack = RolloutStack(workdir / "stack", options.threads)
    load: PacedLoad | None = None
    try:
        log.info("rollout: starting a console, worker and edge node agent")
        keys = stack.start_with_owner()
        manage, infer = keys["manage"], keys["inference"]
        with stack.client(manage) as api:
            # The owner's edge join token, through the API as an operator makes it.
            join = api.post(
                "/api/v1/nodes/join-tokens", json={"region": "hk", "labels": {EDGE_LABEL: "true"}}
            )
            if join.status_code != 201:
                raise RuntimeError(f"join token refused: {join.status_code} {join.text[:300]}")
            stack.start_edge_node(join.json()["join_token"])
            (v1, _), (v2, new) = (_upload(api, path, data) for path in paths)
            created = api.post("/api/v1/deployments", json={"name": NAME, "model_version_id": v1,
                               "replicas": options.replicas, "max_batch_size": 8, "max_queue_delay_ms": 2})  # fmt: skip
            if created.status_code != 201:
                raise RuntimeError(f"deployment failed: {created.status_code} {created.text[:300]}")
            log.info("rollout: deploying version 1 on %d replicas", options.replicas)
            stack.wait_deployment(api, NAME, timeout=300)
            _wait(lambda: sum(r["state"] == "ready" for r in api.get(f"/api/v1/deployments/{NAME}").json()["replica_set"])
                  == options.replicas, "both replicas ready", 300)  # fmt: skip
            if options.via == "edge":
                _wait(stack.edge_url, "the agent's edge ready", 60)
                base = stack.edge_url()
            else:
                base = stack.url
            url = f"{base}/v1/deployments/{NAME}/predict"
            headers = {"Authorization": f"Bearer {infer}", "Content-Type": "image/jpeg"}
            _wait(
                lambda: httpx.post(url, content=body, headers=headers, timeout=30).status_code == 200,
                "served",
                60,
            )
            load = PacedLoad(url, headers, body, expected, options.clients, options.rps)
            load.start()
            log.info(
                "rollout: %.0f requests/s from %d clients through %s", options.rps, options.clients, base
            )
            begun = time.monotonic()
            time.sleep(options.before_s)
            changed_at = time.monotonic()
            log.info("rollout: rolling out version 2")
            patched = api.patch(f"/api/v1/deployments/{NAME}", json={"model_version_id": v2})
            if patched.status_code != 200:
                raise RuntimeError(f"rollout refused: {patched.status_code} {patched.text[:300]}")
            state: dict[str, Any] = {}
            marks: dict[str, float] = {}

            def ended() -> bool:
                """Record when the replicas are all of version 2 and ready (the change as traffic sees
                it) and when the rollout says done (its record; it may lag, ending on a later pass of
                the reconciler); the quick run stops at the first."""
                body = api.get(f"/api/v1/deployments/{NAME}").json()
                state.update(body["rollout"])
                replicas = body["replica_set"]
                if (
                    "replaced" not in marks
                    and len(replicas) == options.replicas
                    and all(r["model_version"] == new and r["state"] == "ready" for r in replicas)
                ):
                    marks["replaced"] = time.monotonic()
                if state.get("state") != "in_progress":
                    marks.setdefault("ended", time.monotonic())
                return "ended" in marks or (options.quick and "replaced" in marks)

            _wait(ended, "rolled out", 600)
            log.info("rollout: %s", "replaced" if "replaced" in marks else state.get("state"))
            done_at = marks.get("replaced") or marks["ended"]
            time.sleep(options.after_s)
            ended_at = time.monotonic()
            load.finish()
    finally:
        if load is not None:
            load.finish()
        stack.stop()
    assert load is not None
    during = load.window(changed_at, done_at)
    versions: dict[str, int] = {}
    for outcome in during:
        if outcome.version:
            versions[outcome.version] = versions.get(outcome.version, 0) + 1
    server_s = None
    if state.get("started_at") and state.get("finished_at"):
        from datetime import datetime

        started, finished = (datetime.fromisoformat(state[k]) for k in ("started_at", "finished_at"))
        server_s = round((finished - started).total_seconds(), 2)
    everything = load.window(begun, ended_at)
    line = result_line("rollout", model, options.clients, None, **figures(during, done_at - changed_at))
    line.update(figures(load.window(begun, changed_at), changed_at - begun, "before_"))
    line.update(figures(load.window(done_at, ended_at), ended_at - done_at, "after_"))
    line.update({
        "mean_batch_size": None, "rollout_state": state.get("state"), "rollout_reason": state.get("reason") or "",
        "replaced_s": round(marks["replaced"] - changed_at, 2) if "replaced" in marks else None,
        "rollout_s": round(marks["ended"] - changed_at, 2) if "ended" in marks else None,
        "rollout_server_s": server_s, "replicas": options.replicas,
        "offered_rps": options.rps, "via": options.via, "served_by_version": versions,
        "requests_total": len(everything), "failed_total": sum(o.status != 200 for o in everything),
        "timeout_s": TIMEOUT_S,
    })  # fmt: skip
    return line


def run_rollout(bench: Any, options: RolloutOptions) -> None:
    """Measure one rollout; a stack that cannot start is reported as a skipped line."""
    try:
        line = measure(bench, options)
    except Exception as exc:  # no database, no Redis, a port in use: report it, keep the other figures
        log.warning("rollout scenario skipped: %s", exc)
        line = result_line("rollout", "rollout", options.clients, None, skipped=str(exc)[:300])
    bench.emit(line)
