"""The region's edge on an edge node: one ``python -m inference.edge`` process, started and watched by
the node agent (``--edge-port``).

Its secrets (the edge key that opens the runner tokens sealed in route entries, the public key of
signed entries, Redis and its prefix) come from the console at each start, over the agent's own
credential (``GET /api/v1/nodes/edge-config``), which answers only nodes that joined with a join token
an owner or admin made with ``edge``. They go to the edge in its environment (never on its command
line, where ``ps`` shows them, nor in a log or a file) and stay in the agent's memory only, so a
crashed edge restarts with them while the console is unreachable. Only ``LANTAU_*`` variables of the
console's answer are passed on: the console cannot set the edge's ``PATH`` or ``LD_PRELOAD``.

Like a runner (``inference.agent.supervisor``), the edge is started detached and recorded in
``<data_dir>/edge.json`` (pid, process group, port, a digest of its command and environment): an agent
that restarts, even after SIGKILL, adopts it when it still runs what the console hands out, and stops
it otherwise. It is probed every half second (``/readyz``: 200 once the route table was read from
Redis); one that exits, or stops answering (``hang_probes`` probes in a row time out), is killed with
its process group and started again after a back-off that doubles up to ``backoff_max_s``, without a
limit: it is the region's entry point. A clean agent stop (SIGTERM) stops it; the edge then lets its
requests in progress finish.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from contract.redis_acl import REDIS_PASSWORD_ENV, REDIS_USER_ENV, url_with_user
from contract.redis_keys import PREFIX_ENV
from contract.routes import EDGE_KEY_ENV
from inference.agent.supervisor import (
    LOG_TAIL_BYTES,
    Policy,
    ProcessRecord,
    file_size,
    kill_group,
    new_log_lines,
    process_alive,
    process_start_ticks,
    tail_lines,
)
from inference.edge.config import REDIS_URL_ENV, VERIFY_KEY_ENV
from inference.runner import launch

log = logging.getLogger("lantau.agent.edge")

EDGE_CONFIG_PATH = "/api/v1/nodes/edge-config"
RECORD_FILE = "edge.json"  # in the data dir: the edge process this agent (or a previous one) started
LOG_FILE = "edge.log"  # in the data dir: the edge's output (no secrets: it never prints them)
REQUIRED_ENV = (EDGE_KEY_ENV, VERIFY_KEY_ENV, REDIS_URL_ENV, PREFIX_ENV)
TICK_S = 0.5


class EdgeRefused(Exception):
    """The console will not hand this node the edge's secrets (403: not an edge node); final."""


class EdgeUnavailable(Exception):
    """The edge's secrets could not be fetched now (console unreachable, an unexpected answer)."""


def fetch_environment(console: str, token: Callable[[], str], *, timeout: float = 15.0) -> dict[str, str]:
    """The edge's environment from the console, with the node credential ``token()`` gives now."""
    try:
        answer = httpx.get(
            console.rstrip("/") + EDGE_CONFIG_PATH, headers={"Authorization": f"Bearer {token()}"},
            timeout=httpx.Timeout(timeout, connect=5.0),
        )  # fmt: skip
    except httpx.HTTPError as exc:
        raise EdgeUnavailable(f"cannot reach the console for the edge's configuration: {exc}") from None
    if answer.status_code == 403:
        raise EdgeRefused(_message(answer))
    if answer.status_code != 200:
        raise EdgeUnavailable(f"the console answered HTTP {answer.status_code}: {_message(answer)}")
    try:
        environment = answer.json()["environment"]
    except (ValueError, KeyError, TypeError):
        raise EdgeUnavailable("the console's edge configuration holds no environment") from None
    return edge_environment(environment)


def _message(answer: httpx.Response) -> str:
    try:
        return str(answer.json()["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return answer.text[:300]


def edge_environment(given: object) -> dict[str, str]:
    """The ``LANTAU_*`` string variables of the console's answer; EdgeUnavailable when one the edge
    needs is missing (the values are never shown: the edge key is among them)."""
    if not isinstance(given, dict):
        raise EdgeUnavailable("the console's edge environment is not an object")
    env = {
        k: v
        for k, v in given.items()
        if isinstance(k, str) and k.startswith("LANTAU_") and isinstance(v, str)
    }
    missing = [name for name in REQUIRED_ENV if not env.get(name)]
    if missing:
        raise EdgeUnavailable(f"the console's edge environment lacks {', '.join(missing)}")
    return env


def probe_host(host: str) -> str:
    """Where the agent reaches an edge listening on ``host`` (all interfaces: the loopback)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


@dataclass
class EdgeRecord(ProcessRecord):
    """What ``<data_dir>/edge.json`` holds about the started edge."""

    pid: int
    pgid: int
    start_ticks: int | None
    port: int | None
    digest: str  # of its command and environment: an edge started otherwise is not adopted
    log_path: str

    def save(self, path: Path) -> None:
        self.write(path)


class EdgeSupervisor:
    """One edge process for ``region`` on ``host:port`` (port 0: a free one), kept running."""

    def __init__(
        self,
        data_dir: Path,
        *,
        region: str,
        host: str,
        port: int,
        fetch: Callable[[], dict[str, str]],
        redis_url: str | None = None,
        policy: Policy | None = None,
        echo: bool = True,
    ) -> None:
        self.data_dir = data_dir
        self.region, self.host, self.port = region, host, port
        self.fetch = fetch
        self.redis_url = redis_url  # the agent's own Redis URL (this node's view) wins over the console's
        self.policy = policy or Policy()
        self.echo = echo
        self.record_path = data_dir / RECORD_FILE
        self.log_path = data_dir / LOG_FILE
        self.environment: dict[str, str] | None = None  # the last one fetched; in memory only
        self.record: EdgeRecord | None = None
        self.process: subprocess.Popen[bytes] | None = None  # None for an adopted edge (not our child)
        self.orphan = EdgeRecord.load(self.record_path)  # left by a previous agent: adopted or stopped
        if self.orphan is not None and not process_alive(self.orphan.pid, self.orphan.start_ticks):
            self.orphan = None
            self.record_path.unlink(missing_ok=True)
        self.ready = self.was_ready = self.adopted = False
        self.refused = ""  # why the console refused: no edge runs on this node
        self.error = ""
        self.attempts = self.misses = 0
        self.fetch_failures = 0  # configuration fetches in a row that failed (the console away)
        self.starts = 0  # processes started by this agent (restarts included)
        self.next_start_at = 0.0
        self.started_at = self.ready_since = 0.0
        self.log_offset = 0
        self.probe = httpx.Client(timeout=self.policy.probe_timeout_s)
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the loop --------------------------------------------------------------------------------
    def start(self) -> None:
        """Watch the edge from a thread of its own: a slow heartbeat round never delays a restart."""
        self._thread = threading.Thread(target=self._run, name="edge", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self.lock:
                    if not self._stop.is_set():
                        self.tick()
            except Exception:  # never let the watcher die: the edge is the region's entry point
                log.exception("edge supervision round failed")
            self._stop.wait(TICK_S)

    def tick(self) -> None:
        if self.refused:
            return
        now = time.monotonic()
        if self.record is None:
            if now >= self.next_start_at:
                self._launch()
            return
        self._follow_log()
        code = self._exit_code()
        if code is not None:
            tail = " | ".join(tail_lines(Path(self.record.log_path), 3))
            how = f"exited with code {code}" if self.process is not None else "vanished"
            self._retry(f"edge {how}: {tail}")
            return
        if self.record.port is None:
            if now - self.started_at > self.policy.start_timeout_s:
                self._kill_and_retry(f"edge printed no listening line in {self.policy.start_timeout_s:.0f} s")
            return
        self._judge(self._probe(), now)

    def _launch(self) -> None:
        """Fetch the environment (or keep the last one), then adopt the edge a previous agent left
        when it runs exactly that, else start one."""
        try:
            self.environment = self.fetch()
        except EdgeRefused as exc:
            self.refused = str(exc)
            self.error = f"the console refused: {exc}"
            log.error("no edge on this node: the console refused its configuration: %s", exc)
            if self.orphan is not None:
                log.info("stopping the edge a previous agent left (pid %s)", self.orphan.pid)
                kill_group(self.orphan.pgid, self.orphan.pid, self.orphan.start_ticks)
                self.orphan = None
                self.record_path.unlink(missing_ok=True)
            return
        except EdgeUnavailable as exc:
            self.fetch_failures += 1
            if self.environment is None:
                self._backoff(str(exc), self.fetch_failures)
                return
            log.warning("%s; starting the edge with the configuration fetched last", exc)
        else:
            self.fetch_failures = 0
        command, secrets = self.command(), self.secrets()
        digest = _digest(command, secrets)
        orphan, self.orphan = self.orphan, None
        if orphan is not None and orphan.port is None:
            orphan.port = launch.listening_port(tail_lines(Path(orphan.log_path)))
        if orphan is not None:
            if (
                orphan.digest == digest
                and orphan.port is not None
                and process_alive(orphan.pid, orphan.start_ticks)
            ):
                log.info(
                    "adopted the edge left by a previous agent (pid %s, port %s)", orphan.pid, orphan.port
                )
                self.record, self.adopted = orphan, True
                self.log_offset = file_size(Path(orphan.log_path))
                self.started_at = time.monotonic()
                return
            log.info("the edge a previous agent left runs another configuration: stopping it")
            kill_group(orphan.pgid, orphan.pid, orphan.start_ticks)
        self._start(command, {**launch.runner_env(), **secrets}, digest)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "inference.edge", "--region", self.region, "--host", self.host,
                "--port", str(self.port)]  # fmt: skip

    def secrets(self) -> dict[str, str]:
        """The edge's own variables: the console's, with this agent's Redis URL when it has one (and the
        edge's Redis user from the console on it, when the console sent one: the agent's own user may
        only PING). The edge gets them on top of the allowlisted part of the agent's environment."""
        assert self.environment is not None
        env = dict(self.environment)
        user, password = env.pop(REDIS_USER_ENV, ""), env.pop(REDIS_PASSWORD_ENV, "")
        if self.redis_url:
            env[REDIS_URL_ENV] = url_with_user(self.redis_url, user, password) if user else self.redis_url
        return env

    def _start(self, command: list[str], env: Mapping[str, str], digest: str) -> None:
        with contextlib.suppress(OSError):
            if file_size(self.log_path) > 8 * LOG_TAIL_BYTES:
                self.log_path.unlink()
        self.log_offset = file_size(self.log_path)
        self.attempts += 1
        self.starts += 1
        log.info(
            "starting the %s edge on %s:%s, attempt %d", self.region, self.host, self.port, self.attempts
        )
        process = launch.start_detached(command, env=env, log_path=self.log_path)
        self.process = process
        self.record = EdgeRecord(pid=process.pid, pgid=process.pid, start_ticks=process_start_ticks(process.pid),
                                 port=None, digest=digest, log_path=str(self.log_path))  # fmt: skip
        self.record.save(self.record_path)
        self.ready = self.was_ready = self.adopted = False
        self.misses = 0
        self.started_at = time.monotonic()

    # -- health ----------------------------------------------------------------------------------
    def _exit_code(self) -> int | None:
        assert self.record is not None
        if self.process is not None:
            return self.process.poll()
        return None if process_alive(self.record.pid, self.record.start_ticks) else -1

    def _follow_log(self) -> None:
        assert self.record is not None
        lines, self.log_offset = new_log_lines(Path(self.record.log_path), self.log_offset)
        if self.echo:
            for line in lines:
                sys.stderr.write(f"edge | {line}\n")
            sys.stderr.flush()
        if self.record.port is None:
            port = launch.listening_port(lines)
            if port is not None:
                self.record.port = port
                self.record.save(self.record_path)

    def _probe(self) -> str:
        assert self.record is not None
        host = probe_host(self.host)
        host = f"[{host}]" if ":" in host else host
        try:
            answer = self.probe.get(f"http://{host}:{self.record.port}/readyz")
        except httpx.TimeoutException:
            return "timeout"
        except httpx.HTTPError:
            return "refused"
        return "ready" if answer.status_code == 200 else "loading"

    def _judge(self, outcome: str, now: float) -> None:
        if outcome == "ready":
            if not self.ready:
                log.info("the %s edge is ready on port %s", self.region, self.port_now)
                self.ready_since = now
            self.ready = self.was_ready = True
            self.misses = 0
            self.error = ""
            if now - self.ready_since > self.policy.stable_s:
                self.attempts = min(self.attempts, 1)  # forgive old crashes
            return
        self.ready = False
        # "loading" (503: the route table not read yet, Redis away) is alive; a timeout is not, and
        # neither is a refused connection once it served.
        if outcome == "timeout" or (self.was_ready and outcome != "loading"):
            self.misses += 1
            if self.misses >= self.policy.hang_probes:
                self._kill_and_retry(
                    f"edge stopped answering /readyz ({self.misses} probes in a row: {outcome})"
                )

    def _kill_and_retry(self, reason: str) -> None:
        log.warning("edge: %s; killing it", reason)
        if self.record is not None:
            kill_group(self.record.pgid, self.record.pid, self.record.start_ticks, timeout=2.0)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(5)
        self._retry(reason)

    def _retry(self, reason: str) -> None:
        self.record = self.process = None
        self.record_path.unlink(missing_ok=True)
        self.ready = False
        self._backoff(reason, self.attempts)

    def _backoff(self, reason: str, failures: int) -> None:
        """The next start after ``backoff_s``, doubled per failure before this one, at most ``backoff_max_s``."""
        delay = min(self.policy.backoff_s * 2 ** min(max(failures - 1, 0), 16), self.policy.backoff_max_s)
        self.next_start_at = time.monotonic() + delay
        self.error = f"restarting in {delay:.1f} s: {reason}"
        log.warning("edge: %s", self.error)

    # -- reports and the end ---------------------------------------------------------------------
    @property
    def port_now(self) -> int | None:
        return self.record.port if self.record is not None else None

    def summary(self) -> dict[str, Any]:
        """What the console is told in each heartbeat's inventory: the port, ready or not, and why not."""
        return {"port": self.port_now, "ready": self.ready, "error": (self.error or "")[:200]}

    def state(self) -> dict[str, Any]:
        """For ``<data_dir>/agent-state.json`` (operators, tests); never the environment."""
        record = self.record
        return {"region": self.region, "host": self.host, "port": self.port_now, "ready": self.ready,
                "pid": record.pid if record else None, "adopted": self.adopted, "attempts": self.attempts,
                "starts": self.starts, "error": self.error}  # fmt: skip

    def stop(self) -> None:
        """Stop watching and stop the edge (a clean agent shutdown); its requests in progress finish."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        with self.lock:
            if self.record is not None:
                log.info("stopping the edge (pid %s)", self.record.pid)
                kill_group(self.record.pgid, self.record.pid, self.record.start_ticks)
                self.record_path.unlink(missing_ok=True)
            if self.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(1)
            self.record = self.process = None
            self.ready = False
        self.probe.close()


def _digest(command: list[str], secrets: Mapping[str, str]) -> str:
    """Whether an edge left running runs this command with these variables: an HMAC keyed with the
    edge key, so the record file says nothing about the secrets (a Redis password) it covers."""
    text = json.dumps([command, sorted(secrets.items())])
    return hmac.new(secrets[EDGE_KEY_ENV].encode(), text.encode(), hashlib.sha256).hexdigest()
