"""A real Lantau on 127.0.0.1 for end-to-end tests: console (daphne), Celery worker with beat, node agent.

It gets its own PostgreSQL database and Redis database index, derived from DATABASE_URL/REDIS_URL,
so it never touches the in-process test database. Everything is reached over HTTP as a client would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import redis

from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]


def runner_pids(data_dir: Path) -> list[int]:
    """Live runner processes a node agent with this data dir started, found by their output file
    (``<data_dir>/runners/<replica>.log``, their stdout), whichever agent started or adopted them."""
    return _pids_writing_to(str(data_dir.resolve() / "runners") + os.sep)


def edge_pids(data_dir: Path) -> list[int]:
    """Live edge processes a node agent with this data dir started (stdout: ``<data_dir>/edge.log``)."""
    return _pids_writing_to(str(data_dir.resolve() / "edge.log"))


def _pids_writing_to(logs: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            target = os.readlink(entry / "fd" / "1")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if target.startswith(logs) and state not in ("Z", "X"):
            pids.append(int(entry.name))
    return sorted(pids)


def _with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


class Stack:
    _started = 0  # stacks made in this process: each gets its own database and Redis prefix

    def __init__(self, workdir: Path) -> None:
        Stack._started += 1
        # The session's stack and a module's own must not collide, nor reuse an earlier run's Redis keys
        # (Redis outlives the run and process ids come round again): a random part too.
        tag = f"{os.getpid()}_{Stack._started}_{os.urandom(3).hex()}"
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        base_db = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
        self.db_name = f"lantau_e2e_{tag}"
        self.admin_url = base_db
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        redis = urlsplit(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
        # Not the xdist worker's variables: console.test_settings would give every process of this stack
        # the worker's Redis prefix instead of the stack's own, so stacks of one worker (and its
        # in-process tests) would share Redis keys and ACL users, and one stack's `redis_acl apply`
        # (another SECRET_KEY) would change the passwords another stack's edge was given.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
        self.env = {
            **inherited,
            "DATABASE_URL": _with_db(base_db, self.db_name),
            "REDIS_URL": urlunsplit(redis._replace(path="/13")),
            "SECRET_KEY": "e2e-" + os.urandom(16).hex(),
            "LANTAU_DEBUG": "0",
            "LANTAU_DATA_DIR": str(workdir / "data"),
            "LANTAU_NODE_OFFLINE_AFTER_S": "6",
            "LANTAU_JOB_HEARTBEAT_STALE_S": "8",
            # Short windows for tests/rollouts: autoscaling (only deployments with it on) and rollouts
            # (the first new replica serves beside the old ones for a while, watched for errors).
            "LANTAU_AUTOSCALE_EVERY_S": "1",
            "LANTAU_AUTOSCALE_WINDOW_S": "5",
            "LANTAU_ROLLOUT_WATCH_S": "1",
            "LANTAU_ROLLOUT_BAKE_S": "12",
            "LANTAU_ROLLOUT_MIN_REQUESTS": "3",
            "LANTAU_REDIS_PREFIX": f"e2e{tag}",  # parallel test sessions must not steal each other's tasks
            # Edges, agents and runners on their own Redis ACL users, as the quick start runs them.
            "LANTAU_REDIS_ACL": "1",
            "PYTHONUNBUFFERED": "1",
        }
        self.procs: dict[str, subprocess.Popen] = {}
        self.nodes: dict[str, tuple[list[str], dict[str, str]]] = {}  # name -> (command, env) to restart it
        self._agent_redis_url = self.env["REDIS_URL"]  # the agent's own Redis user once started
        self._join_admin = False

    # -- lifecycle -------------------------------------------------------------------------------
    def _admin(self, sql: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql)

    def prepare(self) -> None:
        """A new migrated database and the Redis ACL users of the edge, the agent and the runners (the
        console hands their credentials out): what every start does before the console runs."""
        self._admin(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        self._admin(f'CREATE DATABASE "{self.db_name}"')
        self.manage("migrate", "--noinput")
        self.manage("redis_acl", "apply")
        self._agent_redis_url = self.manage("redis_acl", "url", "agent").strip()

    def start(self) -> None:
        self.prepare()
        self.start_console(wait=False)
        self.start_worker()
        self.wait_http("/readyz")

    def start_console(self, wait: bool = True) -> None:
        """The console (daphne) on ``self.port``; after ``kill("console")`` it comes back on the same URL."""
        self.spawn(
            "console",
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                "console.asgi:application",
            ],
        )
        if wait:
            self.wait_http("/readyz")

    def start_worker(self) -> None:
        self.spawn(
            "worker",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "console",
                "worker",
                "--beat",
                "-Q",
                "celery,jobs",
                "-l",
                "info",
                "--concurrency",
                "2",
                "--schedule",
                str(self.workdir / "beat-schedule"),
            ],
        )

    def start_node(
        self,
        name: str = "local",
        region: str = "hk",
        *,
        labels: dict[str, str] | None = None,
        join: bool = False,
        edge: bool = False,
        join_token: str = "",
        args: tuple[str, ...] = (),
    ) -> None:
        """Start the node agent ``name`` with its own data dir (``node_dir``). It gets a node token
        from ``create_node_token``, or with ``join`` a single-use join token it exchanges for its
        credential at start (stored in its data dir, so ``restart_node`` needs no token); ``edge``
        makes that an edge join token (the agent may then run its region's edge: ``--edge-port``).
        ``join_token`` joins with one made elsewhere (through the API, as an operator would)."""
        join = join or bool(join_token)
        if join:
            env = {"LANTAU_JOIN_TOKEN": join_token or self.join_token(region, labels or {}, edge=edge)}
        else:
            # Room for every deployment the end-to-end tests leave on the shared stack (tiny models, idle runners).
            token = (
                self.manage("create_node_token", "--name", name, "--region", region, "--max-replicas", "32")
                .strip()
                .splitlines()[-1]
            )
            env = {"LANTAU_NODE_TOKEN": token}
        # Secrets travel in the environment, as in production: nothing secret on the command line.
        env["LANTAU_REDIS_URL"] = self._agent_redis_url  # the agent's own user; runners get theirs
        command = [sys.executable, "-m", "inference.agent", "--console", self.url, "--region", region,
                   "--name", name, "--interval", "0.5", "--threads", "1", "--data-dir", str(self.node_dir(name)),
                   *(["--labels", ",".join(f"{k}={v}" for k, v in labels.items())] if labels else []), *args]  # fmt: skip
        self.nodes[name] = (command, env if not join else {"LANTAU_REDIS_URL": env["LANTAU_REDIS_URL"]})
        self.spawn(f"node-{name}", command, env=env)

    def node_dir(self, name: str) -> Path:
        return self.workdir / f"node-{name}"

    def _fleet_admin(self) -> None:
        """The install administrator the fleet helpers act as (``fleet-admin``), made once."""
        if not self._join_admin:
            self.user("fleet-admin", "fleet-ops", "owner")
            self.manage("install_admin", "--grant", "fleet-admin")
            self._join_admin = True

    def join_token(self, region: str, labels: dict[str, str], *, edge: bool = False) -> str:
        """A single-use join token made by an install administrator (``inference.services.node_join``), as an operator
        would; with ``edge`` its node may run the region's edge."""
        self._fleet_admin()
        code = (
            "from django.contrib.auth import get_user_model\n"
            "from inference.services.node_join import join_token_create\n"
            "actor = get_user_model().objects.get(username='fleet-admin')\n"
            f"print(join_token_create(actor=actor, region={region!r}, labels={labels!r}, edge={edge!r})[1])\n"
        )
        return self.manage("shell", "-c", code).strip().splitlines()[-1]

    def rotate_credential(self, name: str) -> None:
        """An operator asks node ``name`` to rotate its credential (``node_rotate_request``)."""
        self._fleet_admin()
        code = (
            "from django.contrib.auth import get_user_model\n"
            "from inference.models import Node\n"
            "from inference.services.nodes import node_rotate_request\n"
            "actor = get_user_model().objects.get(username='fleet-admin')\n"
            f"node_rotate_request(actor=actor, node=Node.objects.get(name={name!r}))\n"
        )
        self.manage("shell", "-c", code)

    def kill_node(self, name: str, *, runners: bool = True) -> list[int]:
        """SIGKILL the agent and, with ``runners``, every runner it started (their own process groups,
        as a machine that loses power); return the runners' pids."""
        self.kill(f"node-{name}", signal.SIGKILL)
        pids = runner_pids(self.node_dir(name))
        if runners:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)  # each runner leads its own group (start_new_session)
        return pids

    def agent_state(self, name: str) -> dict:
        """The agent's ``agent-state.json`` (its pid, last answered heartbeat, runners); {} before one."""
        path = self.node_dir(name) / "agent-state.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}

    def restart_node(self, name: str) -> None:
        """Start the agent ``name`` again with its first command line (its data dir is kept)."""
        command, env = self.nodes[name]
        self.spawn(f"node-{name}", command, env=env)

    def spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env={**self.env, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def kill(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def stop(self) -> None:
        for name in list(self.procs):
            self.kill(name)
        for name in self.nodes:  # runners and edges of agents that were killed and not restarted
            for pid in runner_pids(self.node_dir(name)) + edge_pids(self.node_dir(name)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        try:
            self._admin(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        except psycopg.Error:
            pass
        self._forget_redis()

    def _forget_redis(self) -> None:
        """Delete every key under this stack's Redis prefix (key entries, usage, routes, Celery's) and its
        Redis ACL users (``<prefix>-edge``, ``-agent``, ``-runner-*``)."""
        try:
            client = redis.Redis.from_url(self.env["REDIS_URL"], socket_timeout=5)
            prefix = self.env["LANTAU_REDIS_PREFIX"]
            stale = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            for start in range(0, len(stale), 500):
                client.delete(*stale[start : start + 500])
            users = [
                u.decode()
                for u in client.execute_command("ACL", "USERS")
                if u.decode().startswith(f"{prefix}-")
            ]
            if users:
                client.execute_command("ACL", "DELUSER", *users)
        except redis.RedisError:
            pass

    # -- helpers ---------------------------------------------------------------------------------
    def manage(self, *args: str, timeout: float = 300) -> str:
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise AssertionError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def wait_http(self, path: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise AssertionError(f"{name} exited early:\n{self.log_tail(name)}")
            try:
                if httpx.get(self.url + path, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"{path} not ready after {timeout}s\n{self.log_tail('console')}")

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.logs / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def user(self, username: str, team: str, role: str = "member") -> str:
        return (
            self.manage("create_user", "--username", username, "--team", team, "--role", role)
            .strip()
            .splitlines()[-1]
        )

    def owner_keys(self, username: str, team: str, *, install_admin: bool = False) -> dict[str, str]:
        """A new owner of a new ``team`` with a ``manage`` and an ``inference`` key, in one Django start
        (``user`` and ``api_key`` cost one each); ``install_admin`` makes them one (node actions)."""
        code = (
            "import json\n"
            "from django.contrib.auth import get_user_model\n"
            "from accounts.models import Membership, Team\n"
            "from accounts.services import api_key_create\n"
            f"user = get_user_model().objects.create_user(username={username!r}, password=None, "
            f"is_staff={install_admin!r})\n"
            f"team = Team.objects.create(name={team!r})\n"
            "Membership.objects.create(team=team, user=user, role='owner')\n"
            "print(json.dumps({s: api_key_create(team=team, actor=user, name=s, scopes=[s])[1] "
            "for s in ('manage', 'inference')}))\n"
        )
        keys: dict[str, str] = json.loads(self.manage("shell", "-c", code).strip().splitlines()[-1])
        return keys

    def api_key(self, username: str, *scopes: str) -> str:
        args = ["create_api_key", "--user", username, "--name", "test"]
        for scope in scopes:
            args += ["--scope", scope]
        return self.manage(*args).strip().splitlines()[-1]

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def wait_deployment(
        self, client: httpx.Client, name: str, status: str = "ready", timeout: float = 90
    ) -> dict:
        deadline = time.monotonic() + timeout
        body = {}
        while time.monotonic() < deadline:
            body = client.get(f"/api/v1/deployments/{name}").json()
            if body.get("status") == status:
                return body
            time.sleep(0.3)
        raise AssertionError(f"{name} not {status} after {timeout}s: {body}\n{self.log_tail('node-local')}")
