"""Review finding M-D: on a node, one OS user ran every team's runners.

Every runner ran under the agent's uid, so a model that exploits onnxruntime could read the other
runners' ``/proc/<pid>/environ`` (runner tokens, Redis passwords), the node token and other teams'
models, and rewrite a cached ``model.onnx`` that another team's runner loads next.

Real runner processes, started by the agent's supervisor as the agent starts them (artifacts laid out by
``artifacts.prepare``, the data dir locked as an agent running as root locks it), for two replicas of two
deployments of two versions. They must run under two uids of the range, neither root, and a process
under runner A's uid (what code in A's runner could do) must read its own model and nothing of B's:
not B's environ, not B's model folder, not the node token, the agent's state or the runners' logs, and
must write no cached model, not even its own through its hard link. Without root, runners share the
agent's uid, and the agent says so (a warning and ``runner_isolation: shared-uid``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from contract.replicas import ReplicaState
from inference.agent import artifacts, isolation, supervisor
from inference.agent.main import NODE_TOKEN_FILE, STATE_FILE, store_secret
from tests.support.runners import image_manifest
from tests.support.stack import runner_pids
from tests.support.tiny_models import colour_classifier

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="starting runners under other uids needs root")

FAST = supervisor.Policy(
    probe_timeout_s=1.0, hang_probes=3, start_timeout_s=90, max_attempts=2, backoff_s=0.2
)
UID_BASE, UID_COUNT = 61000, 1000
PROJECT_ROOT = Path(__file__).resolve().parents[2]

# Run under another uid: try each (name, operation, path) and answer "ok" or the error's name.
PROBE = """
import json, os, sys
out = {}
for name, op, path in json.loads(sys.argv[1]):
    try:
        if op == "read":
            open(path, "rb").read(16)
        elif op == "list":
            os.listdir(path)
        elif op == "write":
            open(path, "r+b").write(b"x")
        elif op == "create":
            open(path, "xb").close()
        out[name] = "ok"
    except OSError as exc:
        out[name] = type(exc).__name__
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def reachable_python() -> Iterator[Path]:
    """A Python other uids can run. Production's lives in /usr or /opt; this machine's is under /root
    (0700): hard links of it (same files) in a folder of /tmp, as a venv that sees this one's packages."""
    if isolation.blocked_ancestor(Path(sys.executable)) is None:
        yield Path(sys.executable)
        return
    root = Path(tempfile.mkdtemp(prefix="lantau-m-d-python-", dir="/tmp"))
    root.chmod(0o755)
    try:
        subprocess.run(["cp", "-al", sys.base_prefix, str(root / "base")], check=True)
        env = {**os.environ, "LD_LIBRARY_PATH": str(root / "base" / "lib")}  # its RUNPATH names /root
        base_python = root / "base" / "bin" / Path(sys._base_executable).name
        subprocess.run(
            [str(base_python), "-m", "venv", "--without-pip", str(root / "venv")], check=True, env=env
        )
        packages = Path(sysconfig.get_path("purelib"))
        purelib = root / "venv" / packages.relative_to(sys.prefix)
        (purelib / "lantau.pth").write_text(f"import site; site.addsitedir({str(packages)!r})\n")
        yield root / "venv" / "bin" / "python"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def runner_python(reachable_python: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runners (``launch.runner_command``) and probes started with ``reachable_python``."""
    monkeypatch.setattr(sys, "executable", str(reachable_python))
    lib = reachable_python.resolve().parent.parent / "lib"
    if lib.is_dir() and str(lib).startswith("/tmp/"):
        monkeypatch.setenv("LD_LIBRARY_PATH", str(lib))  # runners inherit it (launch.INHERITED_ENV)
    return reachable_python


def as_uid(uid: int, checks: list[tuple[str, str, Path | str]]) -> dict[str, str]:
    """What a process under ``uid`` (its gid of the same number, no other groups) can do."""
    answer = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([(n, op, str(p)) for n, op, p in checks])],
        user=uid, group=uid, extra_groups=[], capture_output=True, text=True, timeout=60, cwd="/",
    )  # fmt: skip
    assert answer.returncode == 0, answer.stderr
    return json.loads(answer.stdout)


def status_ids(pid: int) -> dict[str, list[int]]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            fields[key] = [int(v) for v in value.split()]
    return fields


def cache_version(cache: Path, version: int) -> dict:
    """A version's model in the cache as a download leaves it (file and sha256 marker, the agent's)."""
    folder = cache / f"v{version}"
    folder.mkdir(parents=True)
    colour_classifier(folder / "model.onnx")
    sha = hashlib.sha256((folder / "model.onnx").read_bytes()).hexdigest()
    (folder / ".model.onnx.sha256").write_text(sha)
    return {"filename": "model.onnx", "sha256": sha, "url": f"/api/v1/nodes/artifacts/{sha}"}


def desired(rid: int, deployment: str, version: int, artifact: dict) -> dict:
    return {
        "id": rid, "deployment": deployment, "version_id": version, "device": "cpu", "gpu_index": None,
        "batching": {"max_batch_size": 4, "max_queue_delay_ms": 2}, "runner_token": f"secret-token-{rid}",
        "redis_prefix": "lantau", "limits": {}, "artifacts": [artifact],
        "manifest": image_manifest(deployment=deployment, model_version=str(version)),
    }  # fmt: skip


def until(runners: supervisor.Supervisor, check: Callable[[], object], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runners.tick()
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"not reached in {timeout} s: {runners.reports()}")


def all_ready(runners: supervisor.Supervisor) -> bool:
    reports = runners.reports()
    return len(reports) == 2 and all(r["state"] == ReplicaState.READY for r in reports)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data dir other uids can reach by its path (pytest's own tmp folders are 0700), as
    ``/var/lib/lantau/node`` is."""
    base = Path(tempfile.mkdtemp(prefix="lantau-m-d-", dir="/tmp"))
    base.chmod(0o711)
    umask = os.umask(0o022)
    os.umask(umask)
    try:
        yield base / "node"
    finally:
        os.umask(umask)  # lock_data_dir sets the agent's umask (077)
        for pid in runner_pids(base / "node"):
            os.kill(pid, 9)
        shutil.rmtree(base, ignore_errors=True)


@as_root
def test_each_replica_runs_under_its_own_uid_and_reaches_nothing_of_the_other(
    data_dir: Path, runner_python: Path
) -> None:
    cache = data_dir / "cache"
    cache.mkdir(parents=True)
    store_secret(data_dir / NODE_TOKEN_FILE, "node-credential")
    specs = {
        1: desired(1, "alpha", 1, cache_version(cache, 1)),
        2: desired(2, "beta", 2, cache_version(cache, 2)),
    }
    mode = isolation.decide(os.geteuid(), UID_BASE, UID_COUNT, data_dir, runner_python)
    assert mode.isolated and mode.mode == "uid-per-replica", mode.reason
    isolation.lock_data_dir(data_dir, cache)
    (data_dir / STATE_FILE).write_text("{}")  # the agent writes its state with its umask (077)
    offline = httpx.Client(base_url="http://127.0.0.1:9")  # cached already: nothing is downloaded
    runners = supervisor.Supervisor(data_dir, threads=1, policy=FAST, echo=False, isolate=mode)
    try:
        replicas = {
            rid: runners.ensure(spec, artifacts.prepare(offline, cache, spec)) for rid, spec in specs.items()
        }
        until(runners, lambda: all_ready(runners))
        a, b = replicas[1], replicas[2]
        assert a.record is not None and b.record is not None
        ids_a, ids_b = status_ids(a.record.pid), status_ids(b.record.pid)
        uid_a, uid_b = ids_a["Uid"][0], ids_b["Uid"][0]
        # Real, effective, saved and filesystem uid: the replica's own, never root, never shared.
        assert set(ids_a["Uid"]) == {uid_a} and set(ids_b["Uid"]) == {uid_b}
        assert uid_a != uid_b and 0 not in (uid_a, uid_b)
        assert {uid_a, uid_b} <= set(range(UID_BASE, UID_BASE + UID_COUNT))
        assert ids_a["Gid"] == [uid_a] * 4 and ids_a.get("Groups", []) == []  # no supplementary group
        assert a.record.uid == uid_a and runners.state()["runner_isolation"] == "uid-per-replica"

        log_b = Path(b.record.log_path)
        seen = as_uid(uid_a, [
            ("own model", "read", a.model_dir / "model.onnx"),
            ("own environ", "read", f"/proc/{a.record.pid}/environ"),
            ("other environ", "read", f"/proc/{b.record.pid}/environ"),
            ("other model folder", "list", b.model_dir),
            ("other model", "read", b.model_dir / "model.onnx"),
            ("other cached version", "read", cache / "v2" / "model.onnx"),
            ("cache listing", "list", cache),
            ("node token", "read", data_dir / NODE_TOKEN_FILE),
            ("agent state", "read", data_dir / STATE_FILE),
            ("other runner's log", "read", log_b),
            ("other runner's record", "read", data_dir / "runners" / "2.json"),
            ("own model, rewritten through its hard link", "write", a.model_dir / "model.onnx"),
            ("own cached version, rewritten", "write", cache / "v1" / "model.onnx"),
            ("other cached version, rewritten", "write", cache / "v2" / "model.onnx"),
            ("a file planted in its model folder", "create", a.model_dir / "manifest.json.new"),
        ])  # fmt: skip
        assert seen.pop("own model") == "ok" and seen.pop("own environ") == "ok"  # the probe works
        assert seen == dict.fromkeys(seen, "PermissionError"), seen
        assert (a.model_dir / "model.onnx").stat().st_ino == (cache / "v1" / "model.onnx").stat().st_ino
        cached = (cache / "v1" / "model.onnx").stat()
        assert cached.st_uid == 0 and cached.st_mode & 0o777 == 0o644  # root's, read-only for runners

        # A restarted agent adopts each runner with its uid; a runner killed comes back under the same.
        runners.pool.shutdown(wait=False)
        runners = supervisor.Supervisor(data_dir, threads=1, policy=FAST, echo=False, isolate=mode)
        adopted = {
            rid: runners.ensure(spec, artifacts.prepare(offline, cache, spec)) for rid, spec in specs.items()
        }
        assert adopted[1].adopted and adopted[1].uid == uid_a and adopted[2].uid == uid_b
        assert adopted[1].record is not None
        os.kill(adopted[1].record.pid, 9)
        until(runners, lambda: adopted[1].record is not None and adopted[1].record.pid != a.record.pid
              and all_ready(runners))  # fmt: skip
        assert adopted[1].record is not None and status_ids(adopted[1].record.pid)["Uid"][0] == uid_a
    finally:
        runners.stop_all()
    assert runner_pids(data_dir) == []


@as_root
def test_an_engine_cache_is_written_only_by_its_versions_runner_and_taken_back_from_a_reused_uid(
    data_dir: Path, runner_python: Path
) -> None:
    """TensorRT engines are code-like: ``trt-cache/<version>/gpu<i>`` is writable by the uid of that
    version's runner only, and a uid handed out again loses the folders it had."""
    data_dir.mkdir()
    isolation.lock_data_dir(data_dir, data_dir / "cache")
    v1, v2 = data_dir / "trt-cache" / "1" / "gpu0", data_dir / "trt-cache" / "2" / "gpu0"
    first, second = UID_BASE + 7, UID_BASE + 8
    isolation.give_trt_cache(v1, first)
    isolation.give_trt_cache(v2, second)
    assert as_uid(first, [("own", "create", v1 / "engine"), ("other", "create", v2 / "engine")]) == {
        "own": "ok", "other": "PermissionError",
    }  # fmt: skip
    # Version 1's folder given to another uid: the engines the old owner wrote are not kept.
    isolation.give_trt_cache(v1, second)
    assert not (v1 / "engine").exists() and v1.stat().st_uid == second
    # ``first`` is handed out again (to version 3): nothing it or ``second`` owned stays reachable.
    isolation.take_back(
        second, replicas_dir=data_dir / "cache" / "replicas", trt_dir=data_dir / "trt-cache", keep=set()
    )
    assert as_uid(second, [("v1", "create", v1 / "x"), ("v2", "create", v2 / "x")]) == {
        "v1": "PermissionError", "v2": "PermissionError",
    }  # fmt: skip
    assert v1.stat().st_uid == 0 and v1.stat().st_mode & 0o777 == 0o700


@as_root
def test_what_an_agent_that_did_not_isolate_left_is_locked_at_start(
    data_dir: Path, runner_python: Path
) -> None:
    """Upgrading a node: folders and files a shared-uid agent made 0755/0644 are the agent's alone."""
    cache = data_dir / "cache"
    for folder in (
        cache / "v3",
        cache / "replicas" / "r3",
        data_dir / "trt-cache" / "3" / "gpu0",
        data_dir / "runners",
    ):
        folder.mkdir(parents=True, mode=0o755)
        folder.chmod(0o755)
    for path in (cache / "v3" / "model.onnx", cache / "replicas" / "r3" / "manifest.json", data_dir / STATE_FILE,
                 data_dir / "trt-cache" / "3" / "gpu0" / "engine", data_dir / "edge.log"):  # fmt: skip
        path.write_text("x")
        path.chmod(0o644)
    isolation.lock_data_dir(data_dir, cache)
    seen = as_uid(UID_BASE + 9, [
        ("cached version", "read", cache / "v3" / "model.onnx"),
        ("model folder", "read", cache / "replicas" / "r3" / "manifest.json"),
        ("engine", "read", data_dir / "trt-cache" / "3" / "gpu0" / "engine"),
        ("agent state", "read", data_dir / STATE_FILE),
        ("edge log", "read", data_dir / "edge.log"),
        ("runners", "list", data_dir / "runners"),
    ])  # fmt: skip
    assert seen == dict.fromkeys(seen, "PermissionError"), seen
    assert data_dir.stat().st_mode & 0o777 == 0o711  # runners still reach their own folder by its path


@as_root
def test_a_uid_in_use_or_of_an_account_is_never_handed_out() -> None:
    mode = isolation.Isolation(isolation.UID_PER_REPLICA, UID_BASE, 3)
    sleeper = subprocess.Popen(["sleep", "30"], user=UID_BASE, group=UID_BASE, extra_groups=[])
    try:
        assert isolation.allocate(mode, taken={UID_BASE + 1}) == UID_BASE + 2  # a process runs as UID_BASE
        assert isolation.allocate(mode, taken={UID_BASE + 1, UID_BASE + 2}) is None
    finally:
        sleeper.kill()
        sleeper.wait()
    nobody = isolation.Isolation(isolation.UID_PER_REPLICA, 65534, 1)  # an account of most machines
    assert isolation.allocate(nobody, taken=set()) is (None if isolation.account_exists(65534) else 65534)


class FakeConsole:
    """Answers every heartbeat with ``desired`` and serves the models by sha256; keeps what the agent
    reported last (its inventory, its replicas)."""

    def __init__(self, desired: list[dict], files: dict[str, bytes]) -> None:
        self.desired, self.inventory, self.reports = desired, {}, []
        console = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def answer(self, body: bytes, status: int = 200) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                beat = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                console.inventory, console.reports = beat.get("inventory", {}), beat.get("replicas", [])
                self.answer(json.dumps({"replicas": console.desired}).encode())

            def do_GET(self) -> None:  # noqa: N802
                body = files.get(self.path.rsplit("/", 1)[-1])
                self.answer(body or b"", 200 if body is not None else 404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def ready(self, count: int) -> bool:
        return len([r for r in self.reports if r.get("state") == ReplicaState.READY]) == count

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def models(count: int, folder: Path) -> tuple[list[dict], dict[str, bytes]]:
    """``count`` desired replicas, each of its own deployment and version, and their model files."""
    files, specs = {}, []
    for rid in range(1, count + 1):
        data = colour_classifier(folder / f"model-{rid}.onnx").read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        files[sha] = data
        artifact = {"filename": "model.onnx", "sha256": sha, "url": f"/api/v1/nodes/artifacts/{sha}"}
        specs.append(desired(rid, f"team{rid}-model", 10 + rid, artifact))
    return specs, files


class AgentRun:
    output = ""  # its log, once stopped


@contextlib.contextmanager
def running_agent(
    python: Path, console: FakeConsole, data_dir: Path, count: int, uid: int | None = None
) -> Iterator[AgentRun]:
    """``python -m inference.agent`` (as root, or under ``uid``), handed over once ``count`` replicas
    are ready; then stopped with SIGTERM (it stops its runners), its log in ``output``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANTAU_")}
    command = [str(python), "-m", "inference.agent", "--console", console.url, "--region", "hk", "--name", "md",
               "--data-dir", str(data_dir), "--interval", "0.3", "--threads", "1"]  # fmt: skip
    as_user: dict = {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}
    agent = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, **as_user)  # fmt: skip
    run = AgentRun()
    try:
        deadline = time.monotonic() + 120
        while not console.ready(count) and agent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert console.ready(count), f"replicas reported: {console.reports}"
        yield run
    finally:
        agent.terminate()
        try:
            run.output, _ = agent.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
            run.output, _ = agent.communicate()


@as_root
def test_a_real_agent_as_root_isolates_its_runners_and_says_so(
    data_dir: Path, runner_python: Path, tmp_path: Path
) -> None:
    """The whole agent: its flags' defaults isolate, its heartbeat says ``uid-per-replica``."""
    specs, files = models(2, tmp_path)
    data_dir.mkdir()
    store_secret(data_dir / NODE_TOKEN_FILE, "ltn_node-credential")
    console = FakeConsole(specs, files)
    try:
        with running_agent(runner_python, console, data_dir, 2) as run:
            assert console.inventory["runner_isolation"] == "uid-per-replica"
            state = json.loads((data_dir / STATE_FILE).read_text())
            assert state["runner_isolation"] == "uid-per-replica"
            pid_a, pid_b = (r["pid"] for r in state["replicas"])
            uid_a, uid_b = status_ids(pid_a)["Uid"][0], status_ids(pid_b)["Uid"][0]
            assert uid_a != uid_b and 0 not in (uid_a, uid_b)
            seen = as_uid(uid_a, [
                ("other environ", "read", f"/proc/{pid_b}/environ"),
                ("node token", "read", data_dir / NODE_TOKEN_FILE),
                ("agent state", "read", data_dir / STATE_FILE),
                ("other model folder", "list", data_dir / "cache" / "replicas" / "r2"),
                ("other cached version", "read", data_dir / "cache" / "v12" / "model.onnx"),
                ("own cached version, rewritten", "write", data_dir / "cache" / "replicas" / "r1" / "model.onnx"),
            ])  # fmt: skip
            assert seen == dict.fromkeys(seen, "PermissionError"), seen
    finally:
        console.close()
    assert "runners run under uids of their own" in run.output and "share the agent's uid" not in run.output
    assert runner_pids(data_dir) == []


@as_root
def test_a_real_agent_without_root_warns_once_and_its_runners_share_its_uid(
    data_dir: Path, runner_python: Path, tmp_path: Path
) -> None:
    specs, files = models(1, tmp_path)
    agent_uid = UID_BASE - 1  # an unprivileged agent, outside the runners' range
    data_dir.mkdir()
    store_secret(data_dir / NODE_TOKEN_FILE, "ltn_node-credential")
    for path in (data_dir, data_dir / NODE_TOKEN_FILE):
        os.chown(path, agent_uid, agent_uid)
    console = FakeConsole(specs, files)
    try:
        with running_agent(runner_python, console, data_dir, 1, uid=agent_uid) as run:
            assert console.inventory["runner_isolation"] == "shared-uid"
            (pid,) = (r["pid"] for r in json.loads((data_dir / STATE_FILE).read_text())["replicas"])
            assert status_ids(pid)["Uid"][0] == agent_uid
    finally:
        console.close()
    warning = f"runners share the agent's uid: run the agent as root to isolate tenants (the agent runs as uid {agent_uid}, not root)"
    assert run.output.count(warning) == 1, run.output


@pytest.mark.parametrize(
    ("euid", "count", "reason"),
    [(1000, 1000, "the agent runs as uid 1000, not root"), (0, 0, "--runner-uid-count is 0")],
)
def test_without_root_runners_share_the_agents_uid_and_the_agent_says_so(
    euid: int, count: int, reason: str, tmp_path: Path
) -> None:
    mode = isolation.decide(euid, UID_BASE, count, tmp_path)
    assert not mode.isolated and mode.mode == "shared-uid" and mode.reason == reason
    assert (
        mode.warning()
        == f"runners share the agent's uid: run the agent as root to isolate tenants ({reason})"
    )
    # A data dir under a folder other uids cannot traverse (pytest's are 0700): runners could not reach
    # their models by path, so they share the agent's uid, and the warning names the folder.
    blocked = isolation.decide(0, UID_BASE, UID_COUNT, tmp_path / "node")
    assert not blocked.isolated and "cannot be traversed by other uids" in blocked.warning()
    runners = supervisor.Supervisor(tmp_path / "node", isolate=mode, echo=False)
    try:
        assert runners.state()["runner_isolation"] == "shared-uid"
    finally:
        runners.stop_all()


def test_the_node_page_shows_whether_runners_are_isolated() -> None:
    from inference.models import Node
    from inference.selectors import node_inventory_rows

    shared = node_inventory_rows(Node(name="n", inventory={"runner_isolation": "shared-uid"}), full=False)
    assert ("Runner isolation", "none: every replica's runner runs as the agent's OS user") in shared
    isolated = node_inventory_rows(
        Node(name="n", inventory={"runner_isolation": "uid-per-replica"}), full=False
    )
    assert ("Runner isolation", "one OS user per replica") in isolated
