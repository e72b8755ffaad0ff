"""Review finding L-H: the node agent trusted the paths in heartbeat answers and accepted plain HTTP.

A real agent (``python -m inference.agent``) talks to a fake console, a tiny HTTP server on this machine
that answers heartbeats with hostile desired replicas (``version_id`` or ``id`` climbing out of the cache
with ``/../``) and serves the artifact with its true sha256, as a man in the middle could. Nothing may be
written outside ``<data-dir>/cache``. An ``http://`` console on another host is refused unless
``--allow-insecure-console`` (or ``LANTAU_ALLOW_INSECURE_CONSOLE=1``) says the network is trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from inference.agent import artifacts

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PAYLOAD = b"#!/bin/sh\necho pwned\n"
SHA = hashlib.sha256(PAYLOAD).hexdigest()
ARTIFACT = {
    "filename": "autostart.sh",
    "sha256": SHA,
    "size": len(PAYLOAD),
    "url": f"/api/v1/nodes/artifacts/{SHA}",
}


class FakeConsole:
    """Answers every heartbeat with ``replicas`` and serves the payload at its artifact URL."""

    def __init__(self, host: str, replicas: list[dict]) -> None:
        self.replicas, self.beats, self.requests = replicas, 0, 0
        console = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def answer(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                console.requests += 1
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/api/v1/nodes/heartbeat":
                    console.beats += 1
                    self.answer(200, json.dumps({"replicas": console.replicas}).encode(), "application/json")
                else:
                    self.answer(404, b"{}", "application/json")

            def do_GET(self) -> None:
                console.requests += 1
                if self.path == ARTIFACT["url"]:
                    self.answer(200, PAYLOAD, "application/octet-stream")
                else:
                    self.answer(404, b"", "text/plain")

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def console_at() -> Iterator:
    made: list[FakeConsole] = []

    def make(replicas: list[dict], host: str = "127.0.0.1") -> FakeConsole:
        made.append(FakeConsole(host, replicas))
        return made[-1]

    yield make
    for console in made:
        console.close()


def agent_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANTAU_")}
    return env | {"LANTAU_NODE_TOKEN": "ltn_fake-node-token"} | extra


def start_agent(
    console: str, data_dir: Path, *flags: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    command = [sys.executable, "-m", "inference.agent", "--console", console, "--region", "hk", "--name", "lh",
               "--data-dir", str(data_dir), "--interval", "0.2", "--threads", "1", *flags]  # fmt: skip
    return subprocess.Popen(command, cwd=PROJECT_ROOT, env=env or agent_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip


def stop(agent: subprocess.Popen) -> str:
    if agent.poll() is None:
        agent.terminate()
    try:
        output, _ = agent.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        agent.kill()
        output, _ = agent.communicate()
    return output


def run_beats(console: FakeConsole, data_dir: Path, beats: int = 4, *flags: str, env=None) -> str:
    """Start the agent, let it take ``beats`` heartbeat answers, stop it; its log."""
    agent = start_agent(console.url, data_dir, *flags, env=env)
    deadline = time.monotonic() + 60
    while console.beats < beats and agent.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    output = stop(agent)
    assert console.beats >= beats, f"the agent took {console.beats} heartbeat answers:\n{output}"
    return output


def hostile(**fields: object) -> dict:
    spec = {"id": 7, "version_id": 5, "deployment": "victim", "artifacts": [ARTIFACT], "manifest": {},
            "device": "cpu", "runner_token": "lrt_x", "batching": {"max_batch_size": 1, "max_queue_delay_ms": 1}}  # fmt: skip
    return spec | fields


def written_outside(root: Path, data_dir: Path) -> list[str]:
    """Files and folders under ``root`` but outside ``data_dir``'s cache and the agent's own files."""
    cache = data_dir / "cache"
    found = []
    for path in root.rglob("*"):
        if path == data_dir or path.is_relative_to(cache):
            continue
        if path.parent == data_dir and path.name in (
            "cache",
            "runners",
            "agent-state.json",
            "agent-state.tmp",
        ):
            continue
        if path.parent == data_dir / "runners" and path.suffix in (".json", ".tmp"):
            continue
        found.append(str(path.relative_to(root)))
    return found


@pytest.mark.parametrize(
    "fields, climbed",
    [
        ({"version_id": "/../../../outside"}, "version_id"),  # cache/v/../../../outside = <tmp>/outside
        ({"id": "/../../../../outside"}, "replica id"),  # cache/replicas/r/../../../../outside
        ({"id": "/../../../../outside", "version_id": "/../../../outside"}, "replica id"),
    ],
)
def test_l_h_ids_climbing_out_of_the_cache_are_refused_and_nothing_is_written(
    console_at, tmp_path: Path, fields: dict, climbed: str
) -> None:
    data_dir = tmp_path / "node"
    console = console_at([hostile(**fields)])
    output = run_beats(console, data_dir)
    assert not (tmp_path / "outside").exists(), output
    assert written_outside(tmp_path, data_dir) == [], output
    assert not list((data_dir / "cache").rglob("autostart.sh")), "nothing of a refused replica is fetched"
    assert "refusing a desired replica from the console" in output and climbed in output, output


def test_l_h_ids_that_are_bools_or_negative_are_refused(console_at, tmp_path: Path) -> None:
    data_dir = tmp_path / "node"
    console = console_at([hostile(id=True, version_id=True), hostile(id=8, version_id=-1), hostile(id=9.0)])
    output = run_beats(console, data_dir)
    cache = data_dir / "cache"
    assert sorted(p.name for p in cache.rglob("*")) == [], output  # no vTrue, v-1, r9.0
    assert output.count("refusing a desired replica from the console") >= 3, output
    assert not list((data_dir / "runners").glob("*.log")), "no runner was started for them"


def test_l_h_a_valid_replica_beside_a_hostile_one_is_still_fetched(console_at, tmp_path: Path) -> None:
    data_dir = tmp_path / "node"
    console = console_at([hostile(id="/../../../../outside"), hostile(id=3, version_id=4)])
    output = run_beats(console, data_dir)
    assert (data_dir / "cache" / "v4" / "autostart.sh").read_bytes() == PAYLOAD, output
    assert not (tmp_path / "outside").exists()


def test_l_h_a_version_folder_that_is_a_link_out_of_the_cache_is_not_written_through(
    console_at, tmp_path: Path
) -> None:
    """Even with an int id, the path is resolved and must stay in the cache (a planted ``v5`` link)."""
    console = console_at([])
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    cache.mkdir()
    outside.mkdir()
    (cache / "v5").symlink_to(outside)
    with (
        httpx.Client(base_url=console.url) as client,
        pytest.raises(artifacts.ArtifactError, match="outside"),
    ):
        artifacts.prepare(client, cache, hostile())
    assert list(outside.iterdir()) == [] and console.requests == 0
    (cache / "replicas").mkdir()
    (cache / "replicas" / "r7").symlink_to(outside)
    (cache / "v5").unlink()
    with (
        httpx.Client(base_url=console.url) as client,
        pytest.raises(artifacts.ArtifactError, match="outside"),
    ):
        artifacts.prepare(client, cache, hostile())
    assert list(outside.iterdir()) == []


def non_loopback_address() -> str | None:
    """An address of this machine that is not loopback (the one a route to TEST-NET-1 leaves by)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@pytest.fixture
def remote_console(console_at) -> FakeConsole:
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to serve a 'remote' console on")
    return console_at([], host=address)


def test_l_h_an_http_console_on_another_host_is_refused_at_start(remote_console, tmp_path: Path) -> None:
    agent = start_agent(remote_console.url, tmp_path / "node")
    try:
        agent.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    output = stop(agent)
    assert agent.returncode == 2, output
    assert "--allow-insecure-console" in output and "LANTAU_ALLOW_INSECURE_CONSOLE" in output, output
    assert remote_console.requests == 0, "not one request (the node token) went over plain HTTP"


def test_l_h_the_flag_or_its_environment_variable_allows_an_http_console(
    remote_console, tmp_path: Path
) -> None:
    run_beats(remote_console, tmp_path / "flag", 1, "--allow-insecure-console")
    before = remote_console.beats
    run_beats(remote_console, tmp_path / "env", before + 1, env=agent_env(LANTAU_ALLOW_INSECURE_CONSOLE="1"))


def test_l_h_a_loopback_http_console_is_accepted(console_at, tmp_path: Path) -> None:
    """What the quick start and the test stack use (``http://127.0.0.1:<port>``)."""
    run_beats(console_at([]), tmp_path / "node", 2)
    from inference.agent.main import console_refusal

    for url in ("http://127.0.0.1:8000", "http://127.3.4.5", "http://localhost:8000", "http://[::1]:8000",
                "https://console.example", "https://10.8.0.1:8443"):  # fmt: skip
        assert console_refusal(url, False) is None, url
    for url in ("http://console.example", "http://10.8.0.1:8000", "http://[fe80::1]:80", "ftp://127.0.0.1",
                "console.example:8000"):  # fmt: skip
        assert console_refusal(url, False) is not None, url
    assert console_refusal("http://10.8.0.1:8000", True) is None
