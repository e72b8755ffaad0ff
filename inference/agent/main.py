"""Node agent loop: report actual state, receive desired replicas, converge (start or stop runners)."""

from __future__ import annotations

import argparse
import faulthandler
import ipaddress
import json
import logging
import os
import platform
import re
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any, NotRequired, TypedDict, cast
from urllib.parse import urlsplit

import httpx

from contract.manifest import ManifestError
from contract.node_protocol import HeartbeatRequest, ProtocolError, heartbeat_answer_parse
from contract.regions import REGION_NAME_RULE, region_name_ok
from contract.replicas import ReplicaState
from inference.agent import artifacts, edge, inventory, isolation, supervisor

log = logging.getLogger("lantau.agent")


class ReplicaReport(TypedDict):
    """One replica's actual state in a heartbeat."""

    id: int
    state: ReplicaState
    url: NotRequired[str]
    error: NotRequired[str]
    gpu_memory_bytes: NotRequired[int]  # measured after load (NVML), for GPU replicas


class JoinError(Exception):
    """The console refused the join token (used, expired or unknown) or could not be reached."""


class Agent:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.console = args.console.rstrip("/")
        self.data_dir = Path(args.data_dir).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.http = httpx.Client(base_url=self.console, timeout=httpx.Timeout(30.0, connect=5.0))
        if args.node_token is None:
            args.node_token = self.join()
        self.use_token(args.node_token)
        self.cache = self.data_dir / "cache"
        self.cache.mkdir(parents=True, exist_ok=True)
        self.isolation = isolation.decide(
            os.geteuid(), args.runner_uid_base, args.runner_uid_count, self.data_dir
        )
        if self.isolation.isolated:
            isolation.lock_data_dir(self.data_dir, self.cache)
            log.info("runners run under uids of their own, from %d (%d of them)", args.runner_uid_base,
                     args.runner_uid_count)  # fmt: skip
        else:
            log.warning("%s", self.isolation.warning())
        policy = supervisor.Policy(
            probe_timeout_s=args.probe_timeout, hang_probes=args.hang_probes,
            start_timeout_s=args.start_timeout, max_attempts=args.max_restarts,
            backoff_s=args.restart_backoff,
        )  # fmt: skip
        self.runners = supervisor.Supervisor(
            self.data_dir, bind_host=args.bind_host, advertise_host=args.advertise_host,
            threads=args.threads, redis_url=args.redis, policy=policy, isolate=self.isolation,
        )  # fmt: skip
        self.edge: edge.EdgeSupervisor | None = None
        if args.edge_port is not None:  # an edge node: the region's edge runs beside the runners
            self.edge = edge.EdgeSupervisor(
                self.data_dir, region=args.region, host=args.edge_host, port=args.edge_port,
                fetch=lambda: edge.fetch_environment(self.console, lambda: self.token),
                redis_url=args.redis, policy=policy,
            )  # fmt: skip
        self.stopping = False
        self.heartbeat_at: float | None = None

    # -- credentials ---------------------------------------------------------------------------
    def use_token(self, token: str) -> None:
        self.token = token
        self.http.headers["Authorization"] = f"Bearer {token}"

    def join(self) -> str:
        """Exchange the single-use join token for this node's credential, stored 0600 in the data dir."""
        name = self.args.name or platform.node().split(".")[0].lower()
        body = {"join_token": self.args.join_token, "name": name, "region": self.args.region,
                "labels": self.args.labels}  # fmt: skip
        try:
            answer = self.http.post("/api/v1/nodes/join", json=body)
        except httpx.HTTPError as exc:
            raise JoinError(f"cannot reach the console to join: {exc}") from None
        if answer.status_code not in (200, 201):
            raise JoinError(f"the console refused to join: HTTP {answer.status_code} {answer.text[:300]}")
        token = answer.json().get("node_token")
        if not isinstance(token, str) or not token:
            raise JoinError("the console's join answer holds no node_token")
        store_secret(self.data_dir / NODE_TOKEN_FILE, token)
        log.info(
            "joined the console as node %s; credential stored in %s", name, self.data_dir / NODE_TOKEN_FILE
        )
        return token

    def rotate(self) -> None:
        """Ask for a new credential (the console said so), store it atomically, then use it."""
        answer = self.http.post("/api/v1/nodes/credential")
        if answer.status_code != 200:
            log.warning("credential rotation refused: HTTP %s %s", answer.status_code, answer.text[:200])
            return
        token = answer.json().get("node_token")
        if not isinstance(token, str) or not token:
            log.warning("credential rotation answered no node_token")
            return
        target = Path(self.args.token_file) if self.args.token_file else self.data_dir / NODE_TOKEN_FILE
        store_secret(target, token)
        if target != self.data_dir / NODE_TOKEN_FILE and (self.data_dir / NODE_TOKEN_FILE).exists():
            store_secret(self.data_dir / NODE_TOKEN_FILE, token)
        self.use_token(token)
        log.info("node credential rotated; stored in %s", target)

    def _stored_token(self) -> str | None:
        """The credential in the data dir when it differs from the one in use (rotated since the
        environment or flag that started this agent was written)."""
        try:
            stored = read_secret_file(str(self.data_dir / NODE_TOKEN_FILE), "node token")
        except SecretError:
            return None
        return stored if stored != self.token else None

    # -- the loop ------------------------------------------------------------------------------
    def inventory(self) -> dict[str, Any]:
        facts: dict[str, Any] = {**inventory.collect(self.data_dir), "labels": self.args.labels}
        # The console pins the advertised host at the first heartbeat and accepts replica URLs only on it.
        facts["advertise_host"] = self.args.advertise_host
        facts["runner_isolation"] = self.isolation.mode  # shown on the console's node page (review M-D)
        if self.edge is not None:  # where this node's edge listens and whether it serves (pages, API)
            facts["edge"] = self.edge.summary()
        self.runners.gpu_uuids = {gpu["index"]: gpu["uuid"] for gpu in facts["gpus"] if gpu.get("uuid")}
        return facts

    def beat(self) -> list[dict[str, Any]]:
        payload: HeartbeatRequest = {
            "region": self.args.region,
            "inventory": self.inventory(),
            "replicas": self.runners.reports(),
        }
        response = self.http.post("/api/v1/nodes/heartbeat", json=payload, timeout=HEARTBEAT_TIMEOUT)
        if response.status_code == 401 and (stored := self._stored_token()) is not None:
            log.info("the console refused this credential; using the one stored in the data dir")
            self.use_token(stored)
            response = self.http.post("/api/v1/nodes/heartbeat", json=payload)
        if response.status_code != 200:
            raise RuntimeError(f"heartbeat refused: HTTP {response.status_code} {response.text[:200]}")
        try:
            answer = heartbeat_answer_parse(response.json())
        except (ValueError, ProtocolError) as exc:  # not JSON, or not the node protocol's shape
            raise RuntimeError(f"the console's heartbeat answer is unusable: {exc}") from None
        if answer["rotate_credential"]:
            self.rotate()
        # The console's desired replicas, each checked by ``desired_problem`` before it is used.
        return cast(list[dict[str, Any]], answer["replicas"])

    def converge(self, desired: list[dict[str, Any]]) -> None:
        wanted: dict[int, dict[str, Any]] = {}
        for spec in desired:
            # Its id and version_id name folders and files here: anything but ints is refused, not used.
            if (problem := artifacts.desired_problem(spec)) is not None:
                log.error("refusing a desired replica from the console: %s; nothing written", problem)
                continue
            wanted[spec["id"]] = spec
        self.runners.unwanted(set(wanted))
        fetched = False
        for rid, spec in wanted.items():
            if self.runners.has(rid, spec):
                continue
            if spec.get("error"):  # the console could not build a valid manifest for this version
                self.runners.fail(rid, f"cannot serve this version: {spec['error']}")
                continue
            try:
                model_dir = artifacts.prepare(self.http, self.cache, spec)
                fetched = True
            except ManifestError as exc:
                self.runners.fail(rid, f"cannot serve this version: {exc}")
                continue
            except (artifacts.ArtifactError, httpx.HTTPError, OSError) as exc:
                self.runners.fail(rid, f"could not fetch the model: {exc}")
                continue
            self.runners.ensure(spec, model_dir)
        if fetched or not wanted:
            alive = set(self.runners.replicas) | set(self.runners.orphans)
            evicted = artifacts.evict(
                self.cache, self.args.cache_max_bytes,
                versions_in_use=self.runners.versions_in_use(), replicas_alive=alive,
            )  # fmt: skip
            if evicted:
                log.info("cache over %d bytes: evicted versions %s", self.args.cache_max_bytes, evicted)

    def run(self) -> int:
        log.info(
            "node agent for %s (region %s) talking to %s", self.args.name, self.args.region, self.console
        )
        if self.edge is not None:
            self.edge.start()
        while not self.stopping:
            started = time.monotonic()
            try:
                self.runners.tick()
                self.converge(self.beat())
                self.heartbeat_at = time.time()
            except (httpx.HTTPError, RuntimeError) as exc:
                log.warning("console unreachable or refused: %s", exc)
            if time.monotonic() - started > max(5.0, 3 * self.args.interval):
                log.warning("slow heartbeat round: %.1f s", time.monotonic() - started)
            self.write_state()
            for _ in range(max(1, int(self.args.interval * 10))):
                if self.stopping:
                    break
                time.sleep(0.1)
        self.shutdown()
        return 0

    def write_state(self) -> None:
        """``<data_dir>/agent-state.json``: this agent's pid, its last answered heartbeat and its runners."""
        state = {"pid": os.getpid(), "heartbeat_at": self.heartbeat_at, **self.runners.state()}
        if self.edge is not None:
            state["edge"] = self.edge.state()
        path = self.data_dir / STATE_FILE
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(state))
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("cannot write %s: %s", path, exc)

    def shutdown(self) -> None:
        """A clean stop (SIGTERM/SIGINT) stops the edge (its requests in progress finish first), then the
        runners; a killed agent leaves them to be adopted."""
        if self.edge is not None:
            self.edge.stop()
        self.runners.stop_all()


TOKEN_ENV = "LANTAU_NODE_TOKEN"
JOIN_ENV = "LANTAU_JOIN_TOKEN"
REDIS_ENV = "LANTAU_REDIS_URL"
INSECURE_CONSOLE_ENV = "LANTAU_ALLOW_INSECURE_CONSOLE"
INSECURE_CONSOLE_FLAG = "--allow-insecure-console"
HEARTBEAT_TIMEOUT = httpx.Timeout(15.0, connect=5.0)
STATE_FILE = "agent-state.json"  # in the data dir: what this agent runs, rewritten every round
NODE_TOKEN_FILE = "node-token"  # in the data dir: the credential the join gave (or a rotation)
_LABEL_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


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


def store_secret(path: Path, secret: str) -> None:
    """Write a secret atomically: a 0600 temporary file beside ``path``, synced, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secret + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def parse_labels(text: str) -> dict[str, str]:
    """``gpu=a10,tier=edge`` as a dict; argparse turns the ValueError into a one-line usage error."""
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or not _LABEL_RE.match(key) or not _LABEL_VALUE_RE.match(value):
            raise argparse.ArgumentTypeError(
                f"label {item!r} is not key=value (letters, digits, '.', '_', '-'; at most 63 each)"
            )
        labels[key] = value
    return labels


def _env_flag(name: str) -> bool:
    """A yes/no setting from the environment (1/true/yes/on); unset or empty is no."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def loopback_host(host: str | None) -> bool:
    """Whether ``host`` is this machine: ``localhost``, 127.0.0.0/8 or ::1."""
    if not host:
        return False
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def console_refusal(url: str, allow_insecure: bool) -> str | None:
    """Why the agent will not talk to the console at ``url``; None when it will. Over plain HTTP anyone
    on the path reads the node token and answers heartbeats (desired replicas, artifacts and their
    sha256), so ``http://`` is for this machine only unless explicitly allowed."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return f"--console {url!r} is not an https:// URL"
    if scheme == "https" or loopback_host(parts.hostname) or allow_insecure:
        return None
    return (
        f"--console {url} is plain http:// to another host: anyone on the path could read the node token "
        f"and send the agent replicas and files to run. Use https://, or, on a private network you trust "
        f"(VPN, WireGuard, VPC), pass {INSECURE_CONSOLE_FLAG} (or set {INSECURE_CONSOLE_ENV}=1)"
    )


def _region(text: str) -> str:
    """A region's name in form only: which regions exist is the console's to say (at join and heartbeat)."""
    if not region_name_ok(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a region name ({REGION_NAME_RULE})")
    return text


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return port


def _secret(file: str | None, env: str, flag_value: str | None, what: str, flag: str) -> str | None:
    """A secret from its file, else its environment variable; never from the command line, where `ps`
    shows it to every local user (the old flag is refused with where to put it instead)."""
    if flag_value:
        raise SecretError(f"{flag} is refused: a {what} on the command line is visible to every local user "
                          f"(ps); put it in a 0600 file named by {flag}-file or in the {env} environment variable")  # fmt: skip
    if file:
        return read_secret_file(file, what)
    if os.environ.get(env):
        return os.environ[env]
    return None


def resolve_secrets(args: argparse.Namespace) -> argparse.Namespace:
    """Fill ``node_token`` (or ``join_token``) and ``redis`` from files or the environment. The node
    token comes from --token-file, else LANTAU_NODE_TOKEN, else the credential a join stored in the
    data dir; with none of these a join token (--join-token-file or LANTAU_JOIN_TOKEN) is exchanged
    for one at start."""
    args.node_token = _secret(args.token_file, TOKEN_ENV, args.token, "node token", "--token")
    stored = Path(args.data_dir) / NODE_TOKEN_FILE
    if args.node_token is None and stored.exists():
        args.node_token = read_secret_file(str(stored), "node token")
    args.join_token = None
    if args.node_token is None:
        args.join_token = _secret(args.join_token_file, JOIN_ENV, None, "join token", "--join-token")
    if args.node_token is None and args.join_token is None:
        raise SecretError(
            f"no node token: set {TOKEN_ENV} or pass --token-file (a 0600 file), or join with a join "
            f"token ({JOIN_ENV} or --join-token-file)"
        )
    args.redis = _secret(args.redis_url_file, REDIS_ENV, args.redis_url, "Redis URL", "--redis-url")
    args.bind_host = args.bind_host or args.advertise_host  # listen only where the gateway connects
    return args


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lantau-node", description="Lantau node agent")
    parser.add_argument(
        "--console", required=True,
        help=f"console URL, e.g. https://console.example; http:// only to this machine (127.0.0.1, ::1, "
        f"localhost) unless {INSECURE_CONSOLE_FLAG}",
    )  # fmt: skip
    parser.add_argument(
        INSECURE_CONSOLE_FLAG, action="store_true", default=_env_flag(INSECURE_CONSOLE_ENV),
        help="accept an http:// console on another host (a private network you trust: the node token and "
        f"the desired replicas travel in clear); else env {INSECURE_CONSOLE_ENV}=1",
    )  # fmt: skip
    parser.add_argument("--token-file", help=f"file (mode 0600) holding the node token; else env {TOKEN_ENV}")
    parser.add_argument("--token", help=argparse.SUPPRESS)  # refused with a message: visible in `ps`
    parser.add_argument(
        "--join-token-file",
        help=f"file (mode 0600) holding a single-use join token, exchanged at the first start for the "
        f"node's credential (stored in <data-dir>/{NODE_TOKEN_FILE}); else env {JOIN_ENV}",
    )
    parser.add_argument(
        "--region", required=True, type=_region,
        help="the node's region, one the console's administrators defined (GET /api/v1/regions), e.g. hk",
    )  # fmt: skip
    parser.add_argument(
        "--name", default="", help="the node's name when joining (default: the host name); else for logs"
    )
    parser.add_argument(
        "--labels", type=parse_labels, default={}, help="placement labels, e.g. gpu=a10,tier=edge"
    )
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
    # Refused with a message: its password would show in `ps`.
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    parser.add_argument(
        "--edge-port", type=_port, default=os.environ.get("LANTAU_EDGE_PORT") or None,
        help="also run this region's edge (python -m inference.edge) on this port (0: a free one); only "
        "for a node that joined with an edge join token; its secrets come from the console; else env "
        "LANTAU_EDGE_PORT",
    )  # fmt: skip
    parser.add_argument(
        "--edge-host",
        default=os.environ.get("LANTAU_EDGE_HOST") or "0.0.0.0",
        help="address the edge listens on (with --edge-port); else env LANTAU_EDGE_HOST",
    )
    parser.add_argument(
        "--runner-uid-base", type=int, default=isolation.DEFAULT_UID_BASE,
        help="first uid of the range runners run under, one uid per replica, when the agent runs as root "
        "(no account of this machine may use the range)",
    )  # fmt: skip
    parser.add_argument(
        "--runner-uid-count", type=int, default=isolation.DEFAULT_UID_COUNT,
        help="uids in that range: replicas this node can run isolated; 0 runs every runner under the "
        "agent's uid (not isolated, warned about)",
    )  # fmt: skip
    policy = supervisor.Policy()
    parser.add_argument(
        "--cache-max-bytes", type=int, default=20 * 2**30,
        help="bound of the model cache; least recently used versions no replica runs are evicted",
    )  # fmt: skip
    parser.add_argument(
        "--probe-timeout", type=float, default=policy.probe_timeout_s,
        help="seconds a runner's /readyz may take to answer a probe",
    )  # fmt: skip
    parser.add_argument(
        "--hang-probes", type=int, default=policy.hang_probes,
        help="failed probes in a row after which a runner counts as hung and is restarted; until then a "
        "ready runner whose probes time out keeps its traffic (slow is not hung)",
    )  # fmt: skip
    parser.add_argument(
        "--start-timeout", type=float, default=policy.start_timeout_s,
        help="seconds a runner may take to become ready before it is restarted",
    )  # fmt: skip
    parser.add_argument(
        "--max-restarts", type=int, default=policy.max_attempts,
        help="starts of one replica before it is reported failed (the console then replaces it)",
    )  # fmt: skip
    parser.add_argument(
        "--restart-backoff", type=float, default=policy.backoff_s,
        help="seconds before the first restart of a crashed or hung runner, doubled for each further one",
    )  # fmt: skip
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
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <agent>` writes every thread's stack to its log
    args = parse_args(argv)
    refusal = console_refusal(args.console, args.allow_insecure_console)
    if refusal is not None:  # before any request: the join would send the join token
        log.error("refusing to start: %s", refusal)
        return 2
    try:
        agent = Agent(args)
    except JoinError as exc:
        log.error("%s", exc)
        return 2

    def on_signal(signum: int, frame: FrameType | None) -> None:
        agent.stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
