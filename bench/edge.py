"""The edge target: ``python -m inference.edge`` in front of the benchmark's own runner, called with an
API key, taking turns with the same runner called directly (``runner``).

No console is needed: like the console, this module signs an API-key entry and a route entry (its own
throw-away Ed25519 key and edge key) and writes them to Redis (``REDIS_URL`` with database index 10,
its own prefix), then starts the edge with those secrets in its environment. The edge's line carries
``added_p50_ms`` and ``throughput_vs_runner`` against the runner line of the same scenario.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import redis

from contract.apikeys import entry_sign, key_generate, key_hash
from contract.redis_keys import PREFIX_ENV, RedisKeys
from contract.routes import EDGE_KEY_ENV, RouteEntry, RouteReplica, edge_key_text, route_sign
from contract.signing import public_key_text, signing_key_from_secret
from inference.runner import launch

from .load import Target

REDIS_DB = 10
PREFIX = "bench-edge"
REPO = Path(__file__).resolve().parents[1]


def _redis_url() -> str:
    parts = urlsplit(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    return urlunsplit(parts._replace(path=f"/{REDIS_DB}"))


class EdgeBench:
    """One edge process routing ``model`` to the runner at ``runner_url`` (region hk, one replica)."""

    def __init__(self, logs: Path, model: str, runner_url: str) -> None:
        self.names = RedisKeys(PREFIX)
        signer = signing_key_from_secret(os.urandom(32))
        edge_key = os.urandom(32)
        key, prefix = key_generate()
        self.key = key
        client = redis.Redis.from_url(_redis_url(), socket_timeout=5)
        entry = entry_sign(signer, PREFIX, prefix=prefix, digest=key_hash(key), key_id=1, team_id=1,
                           scopes=["inference"])  # fmt: skip
        route = RouteEntry(model, 1, "image-classification", f"{model}:1", False, 0,
                           (RouteReplica(1, runner_url, "hk", "bench", "unused"),))  # fmt: skip
        client.set(self.names.api_key(prefix), entry, ex=3600)
        client.hset(self.names.routes(), model, route_sign(signer, PREFIX, route, edge_key))
        client.close()
        env = launch.runner_env() | {
            EDGE_KEY_ENV: edge_key_text(edge_key), "LANTAU_KEY_VERIFY_KEY": public_key_text(signer),
            "LANTAU_REDIS_URL": _redis_url(), PREFIX_ENV: PREFIX,
        }  # fmt: skip
        command = [
            sys.executable,
            "-m",
            "inference.edge",
            "--region",
            "hk",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ]
        log_path = logs / f"edge-{model}.log"
        log_path.write_bytes(b"")
        self.handle = launch.start(command, env=env, cwd=REPO, log_path=log_path)
        self.handle.wait_ready(60)
        self.model = model

    @property
    def pid(self) -> int:
        return self.handle.process.pid

    def target(self) -> Target:
        url = f"{self.handle.url}/v1/deployments/{self.model}/predict"
        return Target(url, {"Authorization": f"Bearer {self.key}"})

    def stop(self) -> None:
        self.handle.stop(20)
        client = redis.Redis.from_url(_redis_url(), socket_timeout=5)
        stale = list(client.scan_iter(match=f"{PREFIX}:*"))
        if stale:
            client.delete(*stale)
        client.close()


def compare_with_runner(lines: dict[str, dict]) -> None:
    """Add the edge's cost against the runner measured in the same turns (the issue's targets:
    throughput at 32 clients >= 0.95x, p50 at 1 client <= runner + 1.5 ms)."""
    edge, runner = lines.get("edge"), lines.get("runner")
    if not edge or not runner:
        return
    if edge.get("p50_ms") and runner.get("p50_ms"):
        edge["added_p50_ms"] = round(edge["p50_ms"] - runner["p50_ms"], 3)
    if edge.get("throughput_rps") and runner.get("throughput_rps"):
        edge["throughput_vs_runner"] = round(edge["throughput_rps"] / runner["throughput_rps"], 3)
