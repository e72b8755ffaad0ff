"""A real Lantau on 127.0.0.1 for end-to-end tests: console (daphne), Celery worker with beat, node agent.

It gets its own PostgreSQL database and Redis database index, derived from DATABASE_URL/REDIS_URL,
so it never touches the in-process test database. Everything is reached over HTTP as a client would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]


def _with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


class Stack:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        base_db = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
        self.db_name = f"lantau_e2e_{os.getpid()}"
        self.admin_url = base_db
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        redis = urlsplit(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
        self.env = {
            **os.environ,
            "DATABASE_URL": _with_db(base_db, self.db_name),
            "REDIS_URL": urlunsplit(redis._replace(path="/13")),
            "SECRET_KEY": "e2e-" + os.urandom(16).hex(),
            "LANTAU_DEBUG": "0",
            "LANTAU_DATA_DIR": str(workdir / "data"),
            "LANTAU_NODE_OFFLINE_AFTER_S": "6",
            "LANTAU_JOB_HEARTBEAT_STALE_S": "8",
            "LANTAU_REDIS_PREFIX": f"e2e{os.getpid()}",  # parallel test sessions must not steal each other's tasks
            "PYTHONUNBUFFERED": "1",
        }
        self.procs: dict[str, subprocess.Popen] = {}

    # -- lifecycle -------------------------------------------------------------------------------
    def _admin(self, sql: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql)

    def start(self) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        self._admin(f'CREATE DATABASE "{self.db_name}"')
        self.manage("migrate", "--noinput")
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
        self.start_worker()
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

    def start_node(self, name: str = "local", region: str = "hk") -> None:
        # Room for every deployment the end-to-end tests leave on the shared stack (tiny models, idle runners).
        token = (
            self.manage("create_node_token", "--name", name, "--region", region, "--max-replicas", "32")
            .strip()
            .splitlines()[-1]
        )
        # Secrets travel in the environment, as in production: nothing secret on the command line.
        self.spawn(
            f"node-{name}",
            [sys.executable, "-m", "inference.agent", "--console", self.url, "--region", region, "--name", name,
             "--interval", "0.5", "--threads", "1", "--data-dir", str(self.workdir / f"node-{name}")],
            env={"LANTAU_NODE_TOKEN": token, "LANTAU_REDIS_URL": self.env["REDIS_URL"]},
        )  # fmt: skip

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
        try:
            self._admin(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        except psycopg.Error:
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
