"""Runner processes on this node: start, probe, restart, adopt, stop. One process per replica.

Every runner is started detached (``launch.start_detached``: its own session, its output in a file) and
recorded in ``<data_dir>/runners/<replica_id>.json`` (pid, process group, port, spec hash). So it outlives
the agent: an agent that restarts, even after SIGKILL, adopts the runners it recorded when they still
serve the same spec, and stops the others; it never starts a second runner for one replica.

Health is probed all the time, not only until the first ready answer: ``/readyz`` is asked every tick,
in parallel. A runner that crashes, or stops answering (``hang_probes`` probes in a row time out: it
keeps its port but is stopped or deadlocked), is killed with its process group and started again after
a back-off that doubles; it is reported STARTING meanwhile and FAILED, with the reason, after
``max_attempts`` starts, so the console replaces it elsewhere. A runner that refuses its configuration
(exit code 2: a bad manifest, a device this host lacks) fails at once: starting it again cannot help.

With an ``isolation.Isolation`` that isolates (an agent running as root), each replica's runner runs
under a uid of its own, kept over its restarts and in its record (``inference.agent.isolation``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import MISSING, asdict, dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx

from contract.node_protocol import (
    RUNNER_TOKEN_HEADER,
    SPEC_KEYS,
    ReplicaReport,
    device_of,
    gpu_index_of,
    limits_of,
)
from contract.redis_acl import url_with_user
from contract.redis_keys import DEFAULT_PREFIX
from contract.replicas import ReplicaState
from inference.agent import inventory, isolation
from inference.runner import launch

log = logging.getLogger("lantau.agent.supervisor")

GPU_DEVICES = frozenset({"cuda", "tensorrt"})
IDENTITY_PATH = "/.lantau-agent/identity"  # no such route: 404 with the right token, 401 with a wrong one
CONFIG_EXIT = 2  # the runner's exit code for a configuration it refuses (inference.runner.__main__)
LOG_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class Policy:
    """How runners are watched; each field is an agent flag (docs/configuration.md)."""

    probe_timeout_s: float = 1.0
    hang_probes: int = 3  # probes in a row that time out (or fail after ready) before the runner is killed
    start_timeout_s: float = 180.0  # a runner not ready by then is killed and started again
    max_attempts: int = 5  # starts of one replica before it is reported FAILED
    backoff_s: float = 1.0  # wait before the first restart; doubled for each further one
    backoff_max_s: float = 30.0
    stable_s: float = 60.0  # ready this long: earlier crashes are forgiven (attempts start again at 0)


def _has_default(spec: Any) -> bool:
    return spec.default is not MISSING or spec.default_factory is not MISSING


def spec_hash(desired: dict[str, Any]) -> str:
    text = json.dumps({key: desired.get(key) for key in SPEC_KEYS}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first); None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()


def process_start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks after boot): with the pid it names one process, since
    pids are reused. None where /proc is missing."""
    stat = _proc_stat(pid)
    return int(stat[19]) if stat is not None and len(stat) > 19 else None


def process_alive(pid: int, start_ticks: int | None = None) -> bool:
    """The process runs (not a zombie) and, when ``start_ticks`` is known, is the one that was recorded."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process: not a runner of ours
    stat = _proc_stat(pid)
    if stat is None:
        return sys.platform != "linux"  # no /proc to ask: trust kill(0)
    if stat[0] in ("Z", "X"):
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)  # our own child (the agent started it): reap it
        return False
    return start_ticks is None or process_start_ticks(pid) == start_ticks


def kill_group(pgid: int, pid: int, start_ticks: int | None, timeout: float = 10.0) -> None:
    """SIGTERM the runner's process group (it drains), SIGKILL it after ``timeout``; wait until gone."""
    if not process_alive(pid, start_ticks):
        return
    for signum, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)
            if signum == signal.SIGTERM:
                os.killpg(
                    pgid, signal.SIGCONT
                )  # a stopped (SIGSTOP) runner handles SIGTERM only once resumed
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not process_alive(pid, start_ticks):
                return
            time.sleep(0.05)


class ProcessRecord:
    """A dataclass kept as JSON beside the data it describes, so the next agent can adopt the process:
    read back whole or not at all, written atomically (rename)."""

    @classmethod
    def load(cls, path: Path) -> Self | None:
        """The record, or None; a field with a default may be missing (an older agent's record)."""
        try:
            data = json.loads(path.read_text())
            fields = cls.__dataclass_fields__  # type: ignore[attr-defined]
            return cls(
                **{name: data[name] for name in fields if name in data or not _has_default(fields[name])}
            )
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))  # type: ignore[call-overload]
        os.replace(tmp, path)


@dataclass
class RunnerRecord(ProcessRecord):
    """What ``<data_dir>/runners/<replica_id>.json`` holds about a started runner."""

    replica_id: int
    pid: int
    pgid: int
    start_ticks: int | None
    port: int | None
    spec_hash: str
    model_dir: str
    log_path: str
    uid: int | None = None  # the runner's own uid (isolation); None: the agent's

    def save(self, folder: Path) -> None:
        self.write(folder / f"{self.replica_id}.json")


@dataclass
class Replica:
    """One desired replica on this node and the runner process serving it (if any just now)."""

    replica_id: int
    spec: dict[str, Any]
    spec_hash: str
    model_dir: Path
    record: RunnerRecord | None = None
    process: subprocess.Popen[bytes] | None = None  # None for an adopted runner (not our child)
    ready: bool = False
    was_ready: bool = False
    misses: int = 0
    attempts: int = 0
    next_start_at: float = 0.0
    started_at: float = field(default_factory=time.monotonic)
    ready_since: float | None = None
    error: str = ""
    failed: bool = False
    gpu_memory_bytes: int | None = None
    log_offset: int = 0
    adopted: bool = False  # started by a previous agent and taken over
    uid: int | None = None  # its own uid, kept over restarts (isolation); None: the agent's

    @property
    def running(self) -> bool:
        return self.record is not None

    @property
    def port(self) -> int | None:
        return self.record.port if self.record is not None else None


class Supervisor:
    def __init__(
        self,
        data_dir: Path,
        *,
        bind_host: str = "127.0.0.1",
        advertise_host: str = "127.0.0.1",
        threads: int = 0,
        redis_url: str | None = None,
        policy: Policy | None = None,
        echo: bool = True,
        isolate: isolation.Isolation | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.records_dir = data_dir / "runners"
        self.records_dir.mkdir(parents=True, exist_ok=True)
        self.isolation = isolate or isolation.Isolation()
        self.bind_host, self.advertise_host = bind_host, advertise_host
        self.threads, self.redis_url = threads, redis_url
        self.policy = policy or Policy()
        self.echo = echo
        self.replicas: dict[int, Replica] = {}
        self.failed: dict[int, str] = {}  # replicas that cannot be served here, with the reason
        # Runners a previous agent started: adopted or stopped at the first desired state.
        self.orphans: dict[int, RunnerRecord] = {}
        for path in sorted(self.records_dir.glob("*.json")):
            record = RunnerRecord.load(path)
            if record is not None and process_alive(record.pid, record.start_ticks):
                self.orphans[record.replica_id] = record
            else:
                path.unlink(missing_ok=True)
        self.probe = httpx.Client(timeout=self.policy.probe_timeout_s)
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="probe")
        self.gpu_uuids: dict[int, str] = {}  # NVML index -> UUID, from the last inventory

    # -- desired state -------------------------------------------------------------------------
    def unwanted(self, wanted: set[int]) -> None:
        """Stop the runners of replicas no longer desired here (the console moved or removed them)."""
        for rid in [rid for rid in self.replicas if rid not in wanted]:
            log.info("stopping runner for replica %s: no longer desired here", rid)
            self._stop(self.replicas.pop(rid))
        for rid in [rid for rid in self.orphans if rid not in wanted]:
            log.info("stopping runner for replica %s left by a previous agent: no longer desired", rid)
            self._stop_record(self.orphans.pop(rid))
        self.failed = {rid: err for rid, err in self.failed.items() if rid in wanted}

    def has(self, rid: int, desired: dict[str, Any]) -> bool:
        """Whether the replica is handled as desired already (running, restarting or failed)."""
        if rid in self.failed:
            return True
        current = self.replicas.get(rid)
        if current is None:
            return False
        if current.spec_hash == spec_hash(desired):
            return True
        log.info("replica %s: its spec changed; starting a new runner", rid)
        self._stop(self.replicas.pop(rid))
        return False

    def fail(self, rid: int, error: str) -> None:
        self.failed[rid] = error

    def ensure(self, desired: dict[str, Any], model_dir: Path) -> Replica:
        """Adopt the runner a previous agent left for this replica if it serves this spec, else start one."""
        rid = desired["id"]
        replica = Replica(rid, desired, spec_hash(desired), model_dir)
        record = self.orphans.pop(rid, None)
        if record is not None:
            if self._adoptable(record, replica):
                log.info("adopted runner for replica %s (pid %s, port %s)", rid, record.pid, record.port)
                replica.record, replica.adopted, replica.uid = record, True, record.uid
                replica.log_offset = file_size(Path(record.log_path))
                self.replicas[rid] = replica
                return replica
            log.info("runner for replica %s left by a previous agent does not match: stopping it", rid)
            self._stop_record(record)
        self.replicas[rid] = replica
        self._start(replica)
        return replica

    def _adoptable(self, record: RunnerRecord, replica: Replica) -> bool:
        if record.spec_hash != replica.spec_hash or record.port is None:
            if record.port is None:
                record.port = launch.listening_port(tail_lines(Path(record.log_path)))
            if record.spec_hash != replica.spec_hash or record.port is None:
                return False
        if not process_alive(record.pid, record.start_ticks):
            return False
        if self.isolation.isolated and (
            record.uid is None or isolation.process_uid(record.pid) != record.uid
        ):
            return False  # a runner under the agent's uid (started before isolation): started again under its own
        url = f"http://127.0.0.1:{record.port}"
        token = str(replica.spec.get("runner_token") or "")
        try:  # the process on that port is this replica's runner: it knows the replica's token
            identity = self.probe.get(url + IDENTITY_PATH, headers={RUNNER_TOKEN_HEADER: token})
            ready = self.probe.get(url + "/readyz")
        except httpx.HTTPError:
            return False
        return identity.status_code == 404 and ready.status_code in (200, 503)

    # -- processes -----------------------------------------------------------------------------
    def trt_cache_dir(self, desired: dict[str, Any]) -> Path:
        index = gpu_index_of(desired)
        return (
            self.data_dir
            / "trt-cache"
            / str(desired["version_id"])
            / f"gpu{'all' if index is None else index}"
        )

    def visible_gpus(self, desired: dict[str, Any]) -> str:
        """CUDA_VISIBLE_DEVICES for the replica: its GPU (by UUID when known), none for a CPU replica."""
        if device_of(desired) not in GPU_DEVICES:
            return ""
        index = gpu_index_of(desired)
        if index is None:
            return os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in sorted(self.gpu_uuids)))
        return self.gpu_uuids.get(index) or str(index)

    def command(self, replica: Replica) -> list[str]:
        desired = replica.spec
        batching = desired["batching"]
        device = device_of(desired)
        return launch.runner_command(
            replica.model_dir, host=self.bind_host, max_batch_size=batching["max_batch_size"],
            max_queue_delay_ms=batching["max_queue_delay_ms"], threads=self.threads, device=device,
            trt_cache_dir=self.trt_cache_dir(desired) if device == "tensorrt" else None,
            redis_prefix=desired.get("redis_prefix") or DEFAULT_PREFIX,  # the console's: keys it wrote are found
            **limits_of(desired),
        )  # fmt: skip

    def env(self, replica: Replica) -> dict[str, str]:
        desired = replica.spec
        # With Redis: API keys at the runner, rate limits, usage counters and live metrics.
        return launch.runner_env(
            token=desired["runner_token"], redis_url=self.runner_redis_url(desired),
            replica=str(replica.replica_id), visible_gpus=self.visible_gpus(desired),
        )  # fmt: skip

    def runner_redis_url(self, desired: dict[str, Any]) -> str | None:
        """This agent's Redis URL, with the deployment's own Redis user when the console sent one
        (``LANTAU_REDIS_ACL``): a runner reaches only its deployment's keys, not the agent's."""
        user, password = desired.get("redis_user"), desired.get("redis_password")
        if not self.redis_url or not isinstance(user, str) or not isinstance(password, str) or not user:
            return self.redis_url
        return url_with_user(self.redis_url, user, password)

    def _start(self, replica: Replica) -> None:
        rid = replica.replica_id
        log_path = self.records_dir / f"{rid}.log"
        with contextlib.suppress(OSError):
            if file_size(log_path) > 8 * LOG_TAIL_BYTES:
                log_path.unlink()
        replica.log_offset = file_size(log_path)
        replica.attempts += 1
        log.info(
            "starting runner for replica %s (%s), attempt %d",
            rid,
            replica.spec.get("deployment", "?"),
            replica.attempts,
        )
        if self.isolation.isolated:
            try:
                problem = (
                    "" if self._isolate(replica) else "no free uid in --runner-uid-base/--runner-uid-count"
                )
            except OSError as exc:
                problem = f"cannot give the runner its folders: {exc}"
            if problem:
                self._retry(replica, f"runner not started: {problem}", fatal=True)
                return
        process = launch.start_detached(
            self.command(replica), env=self.env(replica), log_path=log_path, uid=replica.uid
        )
        replica.process = process
        replica.record = RunnerRecord(
            replica_id=rid, pid=process.pid, pgid=process.pid, start_ticks=process_start_ticks(process.pid),
            port=None, spec_hash=replica.spec_hash, model_dir=str(replica.model_dir), log_path=str(log_path),
            uid=replica.uid,
        )  # fmt: skip
        replica.record.save(self.records_dir)
        replica.ready = replica.was_ready = False
        replica.misses = 0
        replica.started_at = time.monotonic()
        replica.ready_since = None

    def _isolate(self, replica: Replica) -> bool:
        """Give the replica its uid (kept from its last start, else a free one: the owner of its engine
        cache when free) and hand it its model folder and engine cache; False when none is free."""
        trt = self.trt_cache_dir(replica.spec) if device_of(replica.spec) == "tensorrt" else None
        if replica.uid is None:
            taken = {r.uid for r in self.replicas.values() if r.uid is not None}
            taken |= {r.uid for r in self.orphans.values() if r.uid is not None}
            prefer = trt.lstat().st_uid if trt is not None and trt.is_dir() else None
            replica.uid = isolation.allocate(self.isolation, taken, prefer)
            if replica.uid is None:
                return False
            isolation.take_back(
                replica.uid, replicas_dir=replica.model_dir.parent, trt_dir=self.data_dir / "trt-cache",
                keep={replica.model_dir} | ({trt} if trt is not None else set()),
            )  # fmt: skip
        isolation.give_model_dir(replica.model_dir, replica.uid)
        if trt is not None:
            isolation.give_trt_cache(trt, replica.uid)
        return True

    def _stop_record(self, record: RunnerRecord, timeout: float = 10.0) -> None:
        kill_group(record.pgid, record.pid, record.start_ticks, timeout)
        (self.records_dir / f"{record.replica_id}.json").unlink(missing_ok=True)

    def _stop(self, replica: Replica, timeout: float = 10.0) -> None:
        if replica.record is not None:
            self._stop_record(replica.record, timeout)
        if replica.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                replica.process.wait(1)
        replica.record = replica.process = None
        replica.ready = False

    def _exit_code(self, replica: Replica) -> int | None:
        """The exit code when the runner is gone (-1 when it was not our child), else None."""
        assert replica.record is not None
        if replica.process is not None:
            return replica.process.poll()
        return None if process_alive(replica.record.pid, replica.record.start_ticks) else -1

    def _follow_log(self, replica: Replica) -> list[str]:
        """New lines of the runner's log: echoed to the agent's log; the listening line gives the port."""
        assert replica.record is not None
        lines, replica.log_offset = new_log_lines(Path(replica.record.log_path), replica.log_offset)
        if self.echo:
            for line in lines:
                sys.stderr.write(f"runner r{replica.replica_id} | {line}\n")
            sys.stderr.flush()
        if replica.record.port is None:
            port = launch.listening_port(lines)
            if port is not None:
                replica.record.port = port
                replica.record.save(self.records_dir)
        return lines

    def _probe(self, replica: Replica) -> str:
        """``ready``, ``loading`` (answered, not ready), ``refused`` or ``timeout``."""
        try:
            answer = self.probe.get(f"http://127.0.0.1:{replica.port}/readyz")
        except httpx.TimeoutException:
            return "timeout"
        except httpx.HTTPError:
            return "refused"
        return "ready" if answer.status_code == 200 else "loading"

    def _retry(self, replica: Replica, reason: str, *, fatal: bool = False) -> None:
        """The runner died or was killed: start it again after a back-off, or give the replica up."""
        replica.record = replica.process = None
        (self.records_dir / f"{replica.replica_id}.json").unlink(missing_ok=True)
        replica.ready = False
        if fatal or replica.attempts >= self.policy.max_attempts:
            after = "" if fatal else f" (after {replica.attempts} starts)"
            log.warning("replica %s failed%s: %s", replica.replica_id, after, reason)
            self.replicas.pop(replica.replica_id, None)
            self.failed[replica.replica_id] = reason + after
            return
        delay = min(self.policy.backoff_s * 2 ** (replica.attempts - 1), self.policy.backoff_max_s)
        replica.next_start_at = time.monotonic() + delay
        replica.error = f"restarting in {delay:.1f} s: {reason}"
        log.warning("replica %s: %s", replica.replica_id, replica.error)

    def tick(self) -> None:
        """Probe every runner (in parallel), restart the crashed and the hung, start those whose back-off
        is over; called before every heartbeat."""
        now = time.monotonic()
        for replica in list(self.replicas.values()):
            if not replica.running:
                if now >= replica.next_start_at:
                    self._start(replica)
                continue
            self._follow_log(replica)
            code = self._exit_code(replica)
            if code is not None and replica.record is not None:
                tail = " | ".join(tail_lines(Path(replica.record.log_path), 3))
                how = f"exited with code {code}" if replica.process is not None else "vanished"
                reason = f"runner {how}: {tail}"
                self._retry(replica, reason, fatal=code == CONFIG_EXIT)
        live = [r for r in self.replicas.values() if r.running and r.port is not None]
        for replica, outcome in zip(live, self.pool.map(self._probe, live), strict=True):
            self._judge(replica, outcome, now)
        for replica in self.replicas.values():
            if (
                replica.running
                and not replica.ready
                and now - replica.started_at > self.policy.start_timeout_s
            ):
                self._kill_and_retry(replica, f"runner not ready after {self.policy.start_timeout_s:.0f} s")

    def _judge(self, replica: Replica, outcome: str, now: float) -> None:
        if outcome == "ready":
            if not replica.ready:
                log.info("replica %s ready on port %s", replica.replica_id, replica.port)
                replica.ready_since = now
                self._measure_gpu(replica)
            replica.ready = replica.was_ready = True
            replica.misses = 0
            replica.error = ""
            if replica.ready_since is not None and now - replica.ready_since > self.policy.stable_s:
                replica.attempts = min(replica.attempts, 1)  # forgive old crashes
            return
        if outcome == "timeout" and replica.ready:
            # Slow, not gone (a host busy loading other models answers late): it keeps its traffic
            # until ``hang_probes`` probes in a row time out, then it is killed and replaced. Taking a
            # deployment's only ready replica out of its route at the first late answer turned a busy
            # second into a "no ready replica" outage.
            replica.misses += 1
            if replica.misses >= self.policy.hang_probes:
                replica.ready = False
                self._kill_and_retry(
                    replica,
                    f"runner stopped answering /readyz ({replica.misses} probes in a row failed: timeout)",
                )
            return
        replica.ready = False
        # A loading runner answers 503 at once and one not listening yet refuses; a timeout means it
        # holds its port but does not answer, and after it was ready any failed probe counts.
        if outcome == "timeout" or (replica.was_ready and outcome != "loading"):
            replica.misses += 1
            if replica.misses >= self.policy.hang_probes:
                self._kill_and_retry(
                    replica,
                    f"runner stopped answering /readyz ({replica.misses} probes in a row failed: {outcome})",
                )

    def _kill_and_retry(self, replica: Replica, reason: str) -> None:
        log.warning("replica %s: %s; killing it", replica.replica_id, reason)
        if replica.record is not None:
            kill_group(replica.record.pgid, replica.record.pid, replica.record.start_ticks, timeout=0.5)
        if replica.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                replica.process.wait(5)
        self._retry(replica, reason)

    def _measure_gpu(self, replica: Replica) -> None:
        if device_of(replica.spec) in GPU_DEVICES and replica.record is not None:
            replica.gpu_memory_bytes = inventory.process_gpu_memory(
                {replica.record.pid}, gpu_index_of(replica.spec)
            )

    # -- reports -------------------------------------------------------------------------------
    def url(self, replica: Replica) -> str:
        return f"http://{self.advertise_host}:{replica.port}" if replica.port else ""

    def reports(self) -> list[ReplicaReport]:
        out: list[ReplicaReport] = [
            {"id": rid, "state": ReplicaState.FAILED, "error": err} for rid, err in self.failed.items()
        ]
        for rid, replica in self.replicas.items():
            report: ReplicaReport = {"id": rid, "state": ReplicaState.STARTING}
            if replica.ready:
                report = {"id": rid, "state": ReplicaState.READY, "url": self.url(replica)}
            elif replica.error:
                report["error"] = replica.error
            if replica.gpu_memory_bytes is not None:
                report["gpu_memory_bytes"] = replica.gpu_memory_bytes
            out.append(report)
        return out

    def state(self) -> dict[str, Any]:
        """What this agent runs, for ``<data_dir>/agent-state.json`` (operators, tests)."""
        replicas = [
            {"id": rid, "ready": r.ready, "pid": r.record.pid if r.record else None, "port": r.port,
             "adopted": r.adopted, "attempts": r.attempts, "error": r.error, "uid": r.uid}
            for rid, r in sorted(self.replicas.items())
        ]  # fmt: skip
        return {"replicas": replicas, "failed": {str(rid): err for rid, err in self.failed.items()},
                "runner_isolation": self.isolation.mode}  # fmt: skip

    def versions_in_use(self) -> set[int]:
        return {int(r.spec["version_id"]) for r in self.replicas.values()}

    def stop_all(self) -> None:
        """Stop every runner (a clean agent shutdown: SIGTERM/SIGINT). An agent that is killed stops
        none, and the next one adopts them."""
        for replica in self.replicas.values():
            self._stop(replica)
        self.replicas.clear()
        self.pool.shutdown(wait=False)


def new_log_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """The whole lines written to ``path`` after ``offset`` (at most LOG_TAIL_BYTES), and the offset
    after them (a partial last line waits for the next call)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read(LOG_TAIL_BYTES)
    except OSError:
        return [], offset
    cut = data.rfind(b"\n") + 1
    return data[:cut].decode(errors="replace").splitlines(), offset + cut


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def tail_lines(path: Path, count: int = 200) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(max(0, file_size(path) - LOG_TAIL_BYTES))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if line.strip()][-count:]
