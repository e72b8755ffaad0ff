"""One-command start for Lantau on one machine (`make run`).

Starts embedded PostgreSQL and Redis (unless DATABASE_URL / REDIS_URL point elsewhere), prepares the
database, then runs the console (daphne), the worker (celery with beat) and a local node agent until
Ctrl-C. Child output is shown prefixed with its name and also kept in var/log/<name>.log.

Once everything is up, a child that dies (the kernel's OOM killer, a crash) is started again after a
short back-off (``Keeper``), the others keep running: one process going down no longer takes the whole
quick start with it. A child that keeps dying (``CRASH_LOOP`` exits within ``CRASH_WINDOW_S``) stops the
quick start with its last lines, as a child that dies while starting does.
"""

from __future__ import annotations

import collections
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from console import embedded  # noqa: E402  (needs the repo on sys.path first)
from inference.runner.launch import runner_env  # noqa: E402

READY_TIMEOUT_S = 180
STOP_TIMEOUT_S = 10
TAIL_LINES = 25
RESTART_BACKOFF_S = (1, 2, 4, 8, 15, 30)  # after the 1st, 2nd, ... exit in a row
CRASH_LOOP, CRASH_WINDOW_S = 5, 60.0


class Stop(Exception):
    """Raised by the signal handler: Ctrl-C or SIGTERM asks for an orderly shutdown."""


class Failed(Exception):
    """A step or child failed; the message says which and why."""


def say(message: str) -> None:
    print(f"lantau: {message}", flush=True)


class Child:
    """A long-running child in its own session, its output prefixed on screen and kept in a log."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], log_dir: Path):
        self.name = name
        self.cmd, self.env = cmd, env
        self.log_path = log_dir / f"{name}.log"
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.start()

    def start(self) -> None:
        # Own session: Ctrl-C reaches only us, so we stop children in order and can SIGKILL the group.
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        self.pump = threading.Thread(target=self._pump, name=f"pump-{self.name}", daemon=True)
        self.pump.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None  # started with stdout=PIPE
        with open(self.log_path, "a", encoding="utf-8") as log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                line = line.rstrip()
                self.tail.append(line)
                print(f"{self.name:>7} | {line}", flush=True)

    def terminate(self) -> None:
        self._signal_leader(signal.SIGTERM)

    def kill_group(self) -> None:
        # Also sweeps grandchildren (celery pool processes, runners) that outlived their parent.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _signal_leader(self, signum: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)


def stop_children(children: list[Child]) -> None:
    """SIGTERM all, give them STOP_TIMEOUT_S together, then SIGKILL whatever is left."""
    for child in children:
        child.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for child in children:
        try:
            child.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"{child.name} did not stop within {STOP_TIMEOUT_S}s, killing it")
        child.kill_group()
        child.proc.wait()
        child.pump.join(timeout=2)


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as daphne does
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def console_port() -> int:
    raw = os.environ.get("PORT", "8000")
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise Failed(f"PORT must be a TCP port number, got {raw!r}")
    port = int(raw)
    if not port_is_free(port):
        spare = next((p for p in range(port + 1, min(port + 50, 65536)) if port_is_free(p)), port + 1)
        raise Failed(f"Port {port} is already in use: set PORT={spare} make run")
    return port


def secret_key(data_dir: Path) -> str:
    """The SECRET_KEY from the environment, else one generated once and kept in var/secret_key."""
    if os.environ.get("SECRET_KEY"):
        return os.environ["SECRET_KEY"]
    path = data_dir / "secret_key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(50))
    path.chmod(0o600)
    return path.read_text().strip()


def manage(env: dict[str, str], *args: str, capture: bool = False) -> str:
    """Run a manage.py command; captured output is shown only when it fails."""
    cmd = [sys.executable, "manage.py", *args]
    result = subprocess.run(
        cmd,
        cwd=REPO,
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.STDOUT if capture else None,
    )
    if result.returncode != 0:
        shown = f"\n{result.stdout.rstrip()}" if capture and result.stdout else ""
        raise Failed(f"'manage.py {' '.join(args[:1])}' failed with exit code {result.returncode}{shown}")
    return result.stdout or ""


def prepare(env: dict[str, str]) -> str:
    """Database schema, admin, demo models; returns a node token for the local node agent."""
    say("applying database migrations")
    manage(env, "migrate", "--noinput", capture=True)
    say("ensuring an admin user")
    manage(env, "ensure_admin")
    say("loading the demo models (the first run may take a minute)")
    manage(env, "seed_demo")
    say("creating a token for the local node agent")
    lines = [
        line
        for line in manage(
            env, "create_node_token", "--name", "local", "--region", "hk", capture=True
        ).splitlines()
        if line.strip()
    ]
    if not lines:
        raise Failed("'manage.py create_node_token' printed no token")
    return lines[-1].strip()


def redis_users(env: dict[str, str]) -> str:
    """The Redis ACL users of the edge, the agent and each deployment's runners (``manage.py redis_acl
    apply``); returns the agent's Redis URL. A server that refuses ``ACL SETUSER`` turns ACLs off
    (``LANTAU_REDIS_ACL=0`` for every child) and the agent gets the console's URL, as before."""
    if env["LANTAU_REDIS_ACL"].strip().lower() in ("0", "false", "no", "off", ""):
        return env["REDIS_URL"]
    say("creating the Redis users of the edge, the agent and the runners")
    try:
        manage(env, "redis_acl", "apply", "--drop-previous", capture=True)
    except Failed as exc:
        say(f"Redis refused its ACL users, every process uses the console's Redis user ({exc})")
        env["LANTAU_REDIS_ACL"] = "0"
        return env["REDIS_URL"]
    return manage(env, "redis_acl", "url", "agent", capture=True).strip()


def child_commands(port: int, data_dir: Path) -> dict[str, list[str]]:
    """Each child's command line: no secret on any of them (they come through the environment)."""
    py = sys.executable
    return {
        "console": [py, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"],
        # Beat's schedule file goes under var/ instead of littering the repository root.
        "worker": [
            py,
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
            "--schedule",
            str(data_dir / "celerybeat-schedule"),
        ],
        # The Django-free agent: it needs neither SECRET_KEY nor DATABASE_URL, so it does not get them.
        "node": [
            py,
            "-m",
            "inference.agent",
            "--console",
            f"http://127.0.0.1:{port}",
            "--region",
            "hk",
            "--name",
            "local",
            "--data-dir",
            str(data_dir / "node"),
        ],
    }


def start_children(
    env: dict[str, str], port: int, token: str, data_dir: Path, agent_redis: str | None = None
) -> list[Child]:
    log_dir = data_dir / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    say(f"starting console, worker and node (logs in {log_dir})")
    envs = {"node": node_env(env, token, agent_redis)}
    return [
        Child(name, cmd, envs.get(name, env), log_dir) for name, cmd in child_commands(port, data_dir).items()
    ]


def node_env(env: dict[str, str], token: str, agent_redis: str | None = None) -> dict[str, str]:
    """The node agent's environment: the runner allowlist plus its token and its own Redis URL (its
    ACL user; runners get their deployment's from the console). Secrets go in the environment, never on
    the command line, where `ps` shows them to every local user."""
    return {
        **runner_env(base=env),
        "LANTAU_NODE_TOKEN": token,
        "LANTAU_REDIS_URL": agent_redis or env["REDIS_URL"],
    }


class Keeper:
    """Starts again each child that died once the quick start is up, after a back-off; a child that died
    ``CRASH_LOOP`` times within ``CRASH_WINDOW_S`` stops everything (``Failed``, with its last lines)."""

    def __init__(self, children: list[Child]) -> None:
        self.children = children
        self.exits: dict[str, list[float]] = collections.defaultdict(list)
        self.due: dict[str, float] = {}  # child name -> when to start it again

    def tick(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for child in self.children:
            code = child.proc.poll()
            if code is None:
                continue
            if child.name not in self.due:
                self._died(child, code, now)
            elif now >= self.due[child.name]:
                del self.due[child.name]
                child.kill_group()  # what it left behind (a dead agent's runners) goes first
                child.pump.join(timeout=2)
                child.start()
                say(f"{child.name} started again (pid {child.proc.pid})")

    def _died(self, child: Child, code: int, now: float) -> None:
        child.pump.join(timeout=2)
        recent = [t for t in self.exits[child.name] if now - t < CRASH_WINDOW_S] + [now]
        self.exits[child.name] = recent
        if len(recent) >= CRASH_LOOP:
            last = "\n".join(f"  {line}" for line in child.tail) or "  (no output)"
            raise Failed(f"{child.name} exited {len(recent)} times within {CRASH_WINDOW_S:.0f}s (last code "
                         f"{code}); giving up. Last lines of {child.log_path}:\n{last}")  # fmt: skip
        wait = RESTART_BACKOFF_S[min(len(recent), len(RESTART_BACKOFF_S)) - 1]
        self.due[child.name] = now + wait
        say(f"{child.name} exited (code {code}); starting it again in {wait}s (see {child.log_path})")


def check_alive(children: list[Child]) -> None:
    for child in children:
        code = child.proc.poll()
        if code is not None:
            child.pump.join(timeout=2)  # collect its last words before reporting
            last = "\n".join(f"  {line}" for line in child.tail) or "  (no output)"
            raise Failed(
                f"{child.name} exited unexpectedly (code {code}); last lines of {child.log_path}:\n{last}"
            )


def wait_ready(port: int, children: list[Child]) -> None:
    url = f"http://127.0.0.1:{port}/readyz"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        check_alive(children)
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass  # not listening yet, or not ready (503)
        time.sleep(0.5)
    raise Failed(f"{url} did not answer 200 within {READY_TIMEOUT_S}s")


def run(port: int, data_dir: Path, children: list[Child]) -> None:
    say(f"starting PostgreSQL and Redis (data in {data_dir})")
    urls = embedded.ensure_services(data_dir)
    key = secret_key(data_dir)
    env = {
        **os.environ,
        **urls,
        "SECRET_KEY": key,
        "LANTAU_DATA_DIR": str(data_dir),
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "PYTHONUNBUFFERED": "1",
        "LANTAU_REDIS_ACL": os.environ.get("LANTAU_REDIS_ACL", "1"),  # on unless the server refuses
    }
    token = prepare(env)
    agent_redis = redis_users(env)
    children.extend(start_children(env, port, token, data_dir, agent_redis))
    wait_ready(port, children)
    say("waiting for the demo deployments to load")
    manage(env, "wait_deployments", "--timeout", "300")
    print(f"Lantau is running at http://127.0.0.1:{port} (Ctrl-C to stop)", flush=True)
    keeper = Keeper(children)
    while True:
        keeper.tick()
        time.sleep(0.5)


def _raise_stop(signum: int, frame: object) -> None:
    raise Stop()


def main() -> int:
    os.chdir(REPO)
    children: list[Child] = []
    signal.signal(signal.SIGINT, _raise_stop)
    signal.signal(signal.SIGTERM, _raise_stop)
    code = 0
    try:
        port = console_port()  # before anything heavy: a busy port should cost the user no wait
        data_dir = embedded.default_data_dir()
        data_dir.mkdir(parents=True, exist_ok=True)
        run(port, data_dir, children)
    except Stop:
        print(flush=True)
        say("stopping")
    except Failed as exc:
        say(str(exc))
        code = 1
    except Exception as exc:  # services failing to start etc.: one clear line, no traceback
        say(f"{type(exc).__name__}: {exc}")
        code = 1
    finally:
        # A second Ctrl-C must not interrupt the shutdown half way; it is bounded by STOP_TIMEOUT_S.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop_children(children)
        embedded.stop_services()
    if code == 0:
        say("stopped")
    return code


if __name__ == "__main__":
    sys.exit(main())
