"""The fleet target: one real console (daphne + worker, the ``Stack`` the gateway target uses) holding
many simulated node agents, while people use the management API and the console's pages.

Each simulated agent is a coroutine speaking the real protocol: it joins with a single-use join token
made through the API (``POST /api/v1/nodes/join-tokens``, then ``/nodes/join``) and heartbeats with
its credential every ``--fleet-interval`` seconds (jittered), carrying an agent-shaped inventory (half
the nodes with a fake 24 GiB GPU whose load and temperature move) and its replicas' states: those the
console asks for are reported ready at a URL on the node's advertised host (no runner runs). The
model version and deployments are created through the API so that each node holds a few replicas.

After a warm-up (agents join, deployments are placed, replicas reported ready), a measured window
records heartbeat latency, and two clients poll the management API and the console's pages (a
logged-in session). PostgreSQL writes are read from ``pg_stat_user_tables`` before and after the
window: ``writes_avoided`` is heartbeats minus updates of the node table.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import psycopg

from inference.runner.metrics import percentile
from tests.support.stack import Stack

from .contenders import process_cpu_s

log = logging.getLogger("bench.fleet")
REDIS_DB = 12
REPLICAS_PER_DEPLOYMENT = 30  # at most 32 per deployment
GIB = 1 << 30


@dataclass(frozen=True)
class FleetOptions:
    nodes: int = 200
    replicas_per_node: int = 3
    interval_s: float = 2.0  # the agent's default --interval
    warmup_s: float = 20.0
    duration_s: float = 40.0

    @classmethod
    def quick(cls) -> FleetOptions:
        return cls(nodes=6, replicas_per_node=2, interval_s=1.0, warmup_s=4.0, duration_s=4.0)


@dataclass
class Latencies:
    seconds: list[float] = field(default_factory=list)
    errors: int = 0
    samples: list[str] = field(default_factory=list)
    by_path: dict[str, list[float]] = field(default_factory=dict)  # the pages' and API's, per path

    def add(self, seconds: float, path: str | None = None) -> None:
        self.seconds.append(seconds)
        if path is not None:
            self.by_path.setdefault(path, []).append(seconds)

    def p95_by_path(self) -> dict[str, float]:
        """Each path's p95 (ms): which page or route holds the figure up."""
        return {
            path: round(percentile(sorted(times), 0.95) * 1000, 1) for path, times in self.by_path.items()
        }

    def fail(self, what: str) -> None:
        self.errors += 1
        if len(self.samples) < 3:
            self.samples.append(what[:200])

    def ms(self, q: float) -> float | None:
        ordered = sorted(self.seconds)
        return round(percentile(ordered, q) * 1000, 1) if ordered else None


class FleetStack(Stack):
    """A ``Stack`` with its own database, Redis index and prefix (never the gateway target's)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.db_name = f"lantau_fleet_{os.getpid()}"
        redis = urlsplit(self.env["REDIS_URL"])
        self.env |= {
            "DATABASE_URL": urlunsplit(urlsplit(self.env["DATABASE_URL"])._replace(path="/" + self.db_name)),
            "REDIS_URL": urlunsplit(redis._replace(path=f"/{REDIS_DB}")),
            "LANTAU_REDIS_PREFIX": f"fleet{os.getpid()}",
            "LANTAU_NODE_OFFLINE_AFTER_S": "10",  # the default: a few missed heartbeats
        }

    def table_updates(self) -> dict[str, int]:
        """Rows updated so far in the node and replica tables (PostgreSQL's statistics)."""
        sql = ("SELECT relname, n_tup_upd FROM pg_stat_user_tables "
               "WHERE relname IN ('inference_node', 'inference_replica')")  # fmt: skip
        with psycopg.connect(self.env["DATABASE_URL"], autocommit=True) as conn:
            return {name: int(count) for name, count in conn.execute(sql).fetchall()}


class SimNode:
    """One simulated node agent: its credential, inventory and the replicas it reports."""

    def __init__(self, name: str, region: str, token: str, gpu: bool) -> None:
        self.name, self.region, self.token, self.gpu = name, region, token, gpu
        self.ports: dict[int, int] = {}  # replica id -> the port it "listens" on
        self.replicas = 0

    def inventory(self) -> dict:
        gpus = []
        if self.gpu:
            gpus = [{"index": 0, "uuid": f"GPU-{self.name}", "name": "NVIDIA A10", "memory_total": 24 * GIB,
                     "memory_free": 20 * GIB + random.randrange(GIB // 2), "utilization": random.randrange(100),
                     "temperature": random.randrange(40, 80)}]  # fmt: skip
        return {"cpus": 16, "memory_bytes": 64 * GIB, "memory_available_bytes": 40 * GIB + random.randrange(GIB),
                "disk_free_bytes": 500 * GIB, "load1": round(random.uniform(0, 8), 2), "gpus": gpus,
                "providers": ["CUDAExecutionProvider", "CPUExecutionProvider"] if self.gpu else ["CPUExecutionProvider"],
                "hostname": self.name, "labels": {}, "advertise_host": "127.0.0.1"}  # fmt: skip

    def payload(self) -> dict:
        reports = [
            {"id": rid, "state": "ready", "url": f"http://127.0.0.1:{port}"}
            for rid, port in self.ports.items()
        ]
        return {"region": self.region, "inventory": self.inventory(), "replicas": reports}

    def learn(self, desired: list[dict]) -> None:
        """Run what the console asks for: keep the known replicas' ports, give new ones a port."""
        wanted = {r["id"] for r in desired}
        self.ports = {rid: port for rid, port in self.ports.items() if rid in wanted}
        for rid in wanted - set(self.ports):
            self.ports[rid] = 20000 + rid % 40000
        self.replicas = len(self.ports)


class Fleet:
    def __init__(self, workdir: Path, options: FleetOptions) -> None:
        self.options = options
        self.stack = FleetStack(workdir)
        self.key = ""
        self.password = ""
        self.nodes: list[SimNode] = []
        self.deployments: list[str] = []

    def start(self) -> None:
        """The console and worker, an owner (an install administrator: they join the nodes) with a
        management key, and every node joined."""
        self.stack.start()
        self.password = self.stack.user("fleet", "fleet", "owner")
        self.stack.manage("install_admin", "--grant", "fleet")
        self.key = self.stack.api_key("fleet", "manage")
        with self.stack.client(self.key) as api:
            self.nodes = [self._join(api, index) for index in range(self.options.nodes)]

    def stop(self) -> None:
        self.stack.stop()

    def _join(self, api, index: int) -> SimNode:
        region = "hk" if index % 2 == 0 else "us"
        name = f"{region}-sim-{index:03d}"
        made = api.post("/api/v1/nodes/join-tokens", json={"region": region, "labels": {}, "name_hint": name})
        if made.status_code != 201:
            raise RuntimeError(f"join token refused: {made.status_code} {made.text[:200]}")
        joined = api.post("/api/v1/nodes/join", json={"join_token": made.json()["join_token"], "name": name,
                                                       "region": region, "labels": {}})  # fmt: skip
        if joined.status_code != 201:
            raise RuntimeError(f"join refused: {joined.status_code} {joined.text[:200]}")
        return SimNode(name, region, joined.json()["node_token"], gpu=index % 4 < 2)

    def deploy(self, model: Path) -> None:
        """Upload ``model`` and create enough deployments for a few replicas per node (both regions)."""
        with self.stack.client(self.key) as api:
            self._deploy(api, model)

    def _deploy(self, api, model: Path) -> None:
        from tests.support.tiny_models import COLOURS, PREPROCESSING

        files = {"file": ("fleet.onnx", model.read_bytes(), "application/octet-stream")}
        data = {"name": "fleet", "task": "image-classification", "labels": "\n".join(COLOURS),
                "preprocessing": json.dumps(PREPROCESSING)}  # fmt: skip
        upload = api.post("/api/v1/models", files=files, data=data, timeout=120)
        if upload.status_code != 201:
            raise RuntimeError(f"upload failed: {upload.status_code} {upload.text[:300]}")
        total = self.options.nodes * self.options.replicas_per_node
        count = max(1, math.ceil(total / REPLICAS_PER_DEPLOYMENT))
        for index in range(count):
            replicas = min(REPLICAS_PER_DEPLOYMENT, total - index * REPLICAS_PER_DEPLOYMENT)
            name = f"fleet-{index:02d}"
            spec = {"name": name, "model_version_id": upload.json()["id"], "replicas": replicas,
                    "region": "hk" if index % 2 == 0 else "us"}  # fmt: skip
            created = api.post("/api/v1/deployments", json=spec)
            if created.status_code != 201:
                raise RuntimeError(f"deployment failed: {created.status_code} {created.text[:300]}")
            self.deployments.append(name)


@dataclass
class Window:
    """When heartbeats count (monotonic seconds), and what was seen during the measured window."""

    start: float = math.inf
    end: float = math.inf
    beats: Latencies = field(default_factory=Latencies)
    api: Latencies = field(default_factory=Latencies)
    pages: Latencies = field(default_factory=Latencies)
    answered: set[str] = field(default_factory=set)  # nodes heard at least once (the warm-up)
    console_cpu_s: float = 0.0  # CPU the console process spent during the window
    worker_cpu_s: float = 0.0  # the worker's (celery, with beat)
    client_cpu_s: float = 0.0  # this process's: the simulated agents, the API client and the browser
    load: list[float] = field(default_factory=list)  # the machine's 1-minute load average, before and after

    def counts(self, began: float) -> bool:
        return self.start <= began < self.end


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants alive now (the worker's pool processes)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += process_cpu_s(current)
        todo += children.get(current, [])
    return total


async def _agent(session: aiohttp.ClientSession, node: SimNode, interval: float, window: Window) -> None:
    """Heartbeat like ``inference.agent`` does, until cancelled."""
    await asyncio.sleep(random.uniform(0, interval))  # agents start at different moments
    headers = {"Authorization": f"Bearer {node.token}"}
    while True:
        began = time.monotonic()
        try:
            async with session.post(
                "/api/v1/nodes/heartbeat", json=node.payload(), headers=headers
            ) as answer:
                body: dict[str, Any] = (
                    await answer.json() if answer.status == 200 else {"error": await answer.text()}
                )
                status = answer.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            status, body = 0, {"error": str(exc)}
        took = time.monotonic() - began
        if status == 200:
            node.learn(body["replicas"])
            window.answered.add(node.name)
        if window.counts(began):
            if status == 200:
                window.beats.seconds.append(took)
            else:
                window.beats.fail(f"{status}: {body.get('error')}")
        await asyncio.sleep(max(0.0, interval * random.uniform(0.9, 1.1) - took))


async def _poll(session: aiohttp.ClientSession, paths: list[str], out: Latencies, window: Window,
                headers: dict[str, str] | None = None) -> None:  # fmt: skip
    """A person clicking through ``paths`` in turn (a quarter of a second between answers)."""
    for index in range(1_000_000):
        path = paths[index % len(paths)]
        began = time.monotonic()
        try:
            async with session.get(path, headers=headers or {}, allow_redirects=False) as answer:
                await answer.read()
                status = answer.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            status = 0
            path = f"{path} ({exc})"
        if window.counts(began):
            if status == 200:
                out.add(time.monotonic() - began, path)
            else:
                out.fail(f"{status}: GET {path}")
        await asyncio.sleep(0.25)


async def _login(session: aiohttp.ClientSession, username: str, password: str) -> None:
    async with session.get("/accounts/login/") as page:
        found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', await page.text())
    if found is None:
        raise RuntimeError("no CSRF token on the login page")
    form = {"username": username, "password": password, "csrfmiddlewaretoken": found.group(1)}
    async with session.post("/accounts/login/", data=form, allow_redirects=False) as answer:
        if answer.status != 302:
            raise RuntimeError(f"login refused: HTTP {answer.status}")


async def _until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"fleet: no {what} after {timeout:.0f} s")
        await asyncio.sleep(0.2)


async def _warm_up(fleet: Fleet, model: Path, window: Window) -> None:
    """Every node heard once, then the deployments placed and every replica reported, then a pause."""
    await _until(lambda: len(window.answered) == len(fleet.nodes), 120, "first heartbeat from every node")
    await asyncio.to_thread(fleet.deploy, model)
    total = fleet.options.nodes * fleet.options.replicas_per_node
    await _until(lambda: sum(n.replicas for n in fleet.nodes) >= total, 180, "placement of every replica")
    await asyncio.sleep(fleet.options.warmup_s)


async def _measure(fleet: Fleet, model: Path) -> tuple[Window, dict[str, int], dict[str, int]]:
    """Warm up, then measure one window; returns it and the table updates before and after it."""
    options, window = fleet.options, Window()
    timeout = aiohttp.ClientTimeout(total=30)
    url = fleet.stack.url
    jar = aiohttp.CookieJar(unsafe=True)  # the console is reached by IP address
    async with (
        aiohttp.ClientSession(url, connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as agents,
        aiohttp.ClientSession(url, timeout=timeout) as api,
        aiohttp.ClientSession(url, timeout=timeout, cookie_jar=jar) as browser,
    ):
        tasks = [
            asyncio.create_task(_agent(agents, node, options.interval_s, window)) for node in fleet.nodes
        ]
        try:
            await _warm_up(fleet, model, window)
            await _login(browser, "fleet", fleet.password)
            node, deployment = fleet.nodes[0].name, fleet.deployments[0]
            api_paths = ["/api/v1/nodes", "/api/v1/deployments", f"/api/v1/deployments/{deployment}",
                         f"/api/v1/nodes/{node}"]  # fmt: skip
            pages = ["/", "/nodes/", "/deployments/", f"/deployments/{deployment}/", f"/nodes/{node}/"]
            before = await asyncio.to_thread(fleet.stack.table_updates)
            console = fleet.stack.procs["console"].pid
            worker = fleet.stack.procs["worker"].pid
            cpu, worker_cpu, client_cpu = process_cpu_s(console), _tree_cpu_s(worker), time.process_time()
            window.load.append(os.getloadavg()[0])
            window.start = time.monotonic()
            window.end = window.start + options.duration_s
            tasks.append(asyncio.create_task(
                _poll(api, api_paths, window.api, window, {"Authorization": f"Bearer {fleet.key}"})))  # fmt: skip
            tasks.append(asyncio.create_task(_poll(browser, pages, window.pages, window)))
            await asyncio.sleep(options.duration_s)
            window.console_cpu_s = process_cpu_s(console) - cpu
            window.worker_cpu_s = _tree_cpu_s(worker) - worker_cpu
            window.client_cpu_s = time.process_time() - client_cpu
            window.load.append(os.getloadavg()[0])
            await asyncio.sleep(2.0)  # PostgreSQL flushes busy backends' statistics every second
            after = await asyncio.to_thread(fleet.stack.table_updates)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return window, before, after


def fleet_line(fleet: Fleet, window: Window, before: dict[str, int], after: dict[str, int]) -> dict:
    """One JSON line: heartbeat figures in the common fields, the API's and pages' alongside."""
    options, beats = fleet.options, window.beats
    node_writes = after.get("inference_node", 0) - before.get("inference_node", 0)
    held = [node.replicas for node in fleet.nodes]
    answered = len(beats.seconds) + len(window.api.seconds) + len(window.pages.seconds)
    return {
        "target": "fleet", "model": "tiny", "concurrency": options.nodes, "requests": len(beats.seconds) + beats.errors,
        "p50_ms": beats.ms(0.50), "p95_ms": beats.ms(0.95), "p99_ms": beats.ms(0.99),
        "throughput_rps": round(len(beats.seconds) / options.duration_s, 2), "errors": beats.errors,
        "mean_batch_size": None, "interval_s": options.interval_s, "duration_s": options.duration_s,
        "replicas": sum(held), "replicas_per_node": [min(held), max(held)],
        "api_requests": len(window.api.seconds) + window.api.errors, "api_p50_ms": window.api.ms(0.50),
        "api_p95_ms": window.api.ms(0.95), "api_errors": window.api.errors,
        "api_p95_ms_by_path": window.api.p95_by_path(),
        "page_requests": len(window.pages.seconds) + window.pages.errors, "page_p50_ms": window.pages.ms(0.50),
        "page_p95_ms": window.pages.ms(0.95), "page_errors": window.pages.errors,
        "page_p95_ms_by_path": window.pages.p95_by_path(),
        "console_cpu_ms_per_request": round(window.console_cpu_s * 1000 / answered, 2) if answered else None,
        "console_cores": round(window.console_cpu_s / options.duration_s, 2),
        "worker_cores": round(window.worker_cpu_s / options.duration_s, 2),
        "client_cores": round(window.client_cpu_s / options.duration_s, 2),
        "node_row_writes": node_writes,
        "replica_row_writes": after.get("inference_replica", 0) - before.get("inference_replica", 0),
        "writes_avoided": len(beats.seconds) - node_writes,
        "offered_beats_per_s": round(options.nodes / options.interval_s, 1),
        "load_1m": [round(x, 2) for x in window.load],
        **({"error_samples": beats.samples + window.api.samples + window.pages.samples}
           if beats.errors or window.api.errors or window.pages.errors else {}),
    }  # fmt: skip


def run_fleet(bench, options: FleetOptions) -> None:
    """Start a console, simulate the fleet, emit the ``fleet`` line (with ``skipped`` if it could not run)."""
    from tests.support.tiny_models import colour_classifier

    fleet = Fleet(bench.workdir / "fleet", options)
    model = colour_classifier(bench.workdir / "fleet-colour.onnx")
    try:
        fleet.start()
        window, before, after = asyncio.run(_measure(fleet, model))
    except Exception as exc:  # no database, no Redis, a port in use: report it, keep the other figures
        log.warning("fleet scenario skipped: %s", exc)
        bench.emit({"target": "fleet", "model": "tiny", "concurrency": options.nodes, "skipped": str(exc)[:300],
                    **dict.fromkeys(("requests", "p50_ms", "p95_ms", "p99_ms", "throughput_rps", "errors",
                                     "mean_batch_size"))})  # fmt: skip
        return
    finally:
        fleet.stop()
    bench.emit(fleet_line(fleet, window, before, after))
