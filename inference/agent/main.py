"""Node agent loop: report actual state, receive desired replicas, converge (start or stop runners)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any, NotRequired, TypedDict

import httpx

from contract.manifest import ManifestError
from contract.replicas import ReplicaState
from inference.agent import artifacts, inventory, supervisor

log = logging.getLogger("lantau.agent")


class ReplicaReport(TypedDict):
    """One replica's actual state in a heartbeat."""

    id: int
    state: ReplicaState
    url: NotRequired[str]
    error: NotRequired[str]


class Agent:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.console = args.console.rstrip("/")
        self.http = httpx.Client(
            base_url=self.console,
            headers={"Authorization": f"Bearer {args.node_token}"},
            timeout=httpx.Timeout(30.0, connect=5.0),
        )
        self.probe = httpx.Client(timeout=1.0)
        self.cache = Path(args.data_dir).resolve() / "cache"
        self.cache.mkdir(parents=True, exist_ok=True)
        self.runners: dict[int, supervisor.RunnerProcess] = {}
        self.failed: dict[int, str] = {}
        self.stopping = False

    def reports(self) -> list[ReplicaReport]:
        out: list[ReplicaReport] = [
            {"id": rid, "state": ReplicaState.FAILED, "error": err} for rid, err in self.failed.items()
        ]
        for rid, proc in self.runners.items():
            if proc.process.poll() is not None:
                self.failed[rid] = proc.error()
                out.append({"id": rid, "state": ReplicaState.FAILED, "error": self.failed[rid]})
            elif supervisor.check_ready(proc, self.probe):
                out.append({"id": rid, "state": ReplicaState.READY, "url": proc.url})
            else:
                out.append({"id": rid, "state": ReplicaState.STARTING})
        for rid in list(self.runners):
            if rid in self.failed:
                del self.runners[rid]
        return out

    def beat(self) -> list[dict[str, Any]]:
        # The console pins the advertised host at the first heartbeat and accepts replica URLs only on it.
        facts = {**inventory.collect(), "advertise_host": self.args.advertise_host}
        payload = {"region": self.args.region, "inventory": facts, "replicas": self.reports()}
        response = self.http.post("/api/v1/nodes/heartbeat", json=payload)
        if response.status_code != 200:
            raise RuntimeError(f"heartbeat refused: HTTP {response.status_code} {response.text[:200]}")
        desired: list[dict[str, Any]] = response.json()["replicas"]  # the console's desired replicas
        return desired

    def converge(self, desired: list[dict[str, Any]]) -> None:
        wanted = {d["id"]: d for d in desired}
        for rid in list(self.runners):
            if rid not in wanted:
                log.info("stopping runner for replica %s", rid)
                supervisor.stop(self.runners.pop(rid))
        self.failed = {rid: err for rid, err in self.failed.items() if rid in wanted}
        for rid, spec in wanted.items():
            if rid in self.runners or rid in self.failed:
                continue
            if spec.get("error"):  # the console could not build a valid manifest for this version
                self.failed[rid] = f"cannot serve this version: {spec['error']}"
                continue
            try:
                model_dir = artifacts.prepare(self.http, self.cache, spec)
            except ManifestError as exc:
                self.failed[rid] = f"cannot serve this version: {exc}"
                continue
            except (artifacts.ArtifactError, httpx.HTTPError, OSError) as exc:
                self.failed[rid] = f"could not fetch the model: {exc}"
                continue
            log.info("starting runner for replica %s (%s)", rid, spec["deployment"])
            self.runners[rid] = supervisor.start(
                spec,
                model_dir,
                bind_host=self.args.bind_host,
                advertise_host=self.args.advertise_host,
                threads=self.args.threads,
                redis_url=self.args.redis,
            )

    def run(self) -> int:
        log.info(
            "node agent for %s (region %s) talking to %s", self.args.name, self.args.region, self.console
        )
        while not self.stopping:
            try:
                self.converge(self.beat())
            except (httpx.HTTPError, RuntimeError) as exc:
                log.warning("console unreachable or refused: %s", exc)
            for _ in range(int(self.args.interval * 10)):
                if self.stopping:
                    break
                time.sleep(0.1)
        self.shutdown()
        return 0

    def shutdown(self) -> None:
        for proc in self.runners.values():
            supervisor.stop(proc)
        self.runners.clear()


TOKEN_ENV = "LANTAU_NODE_TOKEN"
REDIS_ENV = "LANTAU_REDIS_URL"


class SecretError(Exception):
    """A secret could not be read, or was passed where ``ps`` shows it and no other source exists."""


def read_secret_file(path: str, what: str) -> str:
    """The first line of a file only its owner may read (0600 or stricter); SecretError otherwise."""
    try:
        mode = os.stat(path).st_mode
        text = Path(path).read_text().strip()
    except OSError as exc:
        raise SecretError(f"cannot read the {what} file {path}: {exc.strerror or exc}") from None
    if mode & 0o077:
        raise SecretError(
            f"the {what} file {path} is readable by others (mode {mode & 0o777:o}); chmod 600 it"
        )
    if not text:
        raise SecretError(f"the {what} file {path} is empty")
    return text.splitlines()[0].strip()


def _secret(file: str | None, env: str, flag_value: str | None, what: str, flag: str) -> str | None:
    """A secret from its file, else its environment variable, else the deprecated command-line flag."""
    if file:
        return read_secret_file(file, what)
    if os.environ.get(env):
        return os.environ[env]
    if flag_value:
        log.warning("%s on the command line is deprecated: `ps` shows it to every local user; "
                    "use %s-file or the %s environment variable", flag, flag, env)  # fmt: skip
        return flag_value
    return None


def resolve_secrets(args: argparse.Namespace) -> argparse.Namespace:
    """Fill ``node_token`` and ``redis`` from files, the environment or (deprecated) flags."""
    args.node_token = _secret(args.token_file, TOKEN_ENV, args.token, "node token", "--token")
    if args.node_token is None:
        raise SecretError(f"no node token: set {TOKEN_ENV} or pass --token-file (a 0600 file)")
    args.redis = _secret(args.redis_url_file, REDIS_ENV, args.redis_url, "Redis URL", "--redis-url")
    args.bind_host = args.bind_host or args.advertise_host  # listen only where the gateway connects
    return args


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lantau-node", description="Lantau node agent")
    parser.add_argument("--console", required=True, help="console URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--token-file", help=f"file (mode 0600) holding the node token; else env {TOKEN_ENV}")
    parser.add_argument("--token", help=argparse.SUPPRESS)  # deprecated: visible in `ps`
    parser.add_argument("--region", required=True, choices=["hk", "us"])
    parser.add_argument("--name", default="", help="for logs only; the token decides which node this is")
    parser.add_argument("--data-dir", default="var/node")
    parser.add_argument(
        "--bind-host", default=None, help="address runners listen on (default: --advertise-host)"
    )
    parser.add_argument("--advertise-host", default="127.0.0.1", help="address the console's gateway uses")
    parser.add_argument(
        "--threads", type=int, default=0, help="onnxruntime threads per runner (0 = all cores)"
    )
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between heartbeats")
    parser.add_argument(
        "--redis-url-file",
        help=f"file (mode 0600) holding the Redis URL runners use for API keys, rate limits, usage and "
        f"live metrics; else env {REDIS_ENV}; without either, runners accept only the gateway",
    )
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)  # deprecated: its password shows in `ps`
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line and read the secrets; exit 2 with one line when a secret is missing."""
    parser = build_parser()
    try:
        return resolve_secrets(parser.parse_args(argv))
    except SecretError as exc:
        parser.error(str(exc))


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    agent = Agent(parse_args(argv))

    def on_signal(signum: int, frame: FrameType | None) -> None:
        agent.stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
