"""Faults on purpose: a `Stack` on its own PostgreSQL and Redis that tests may restart, and bounded load.

The shared servers (DATABASE_URL, REDIS_URL) serve every other test and helper, so the fault tests
start private ones with `console.embedded` (the same code as the quick start) under their temporary
folder and restart them at will. `Load` runs a few client threads for a bounded time, each request
with a client timeout, and records what every client saw.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from console import embedded
from tests.support.stack import Stack

CLIENT_TIMEOUT_S = 20.0  # a request without an answer by then counts as a hang


class PrivateServices:
    """Embedded PostgreSQL and Redis under ``data_dir``, owned by this test process."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self.urls: dict[str, str] = {}

    def start(self, *names: str) -> None:
        # console.embedded keeps one data folder per process; the fault stack is the only user here.
        embedded._data_dir = self.data_dir
        with embedded._locked(self.data_dir), embedded._State(self.data_dir) as state:
            if "postgres" in names:
                self.urls["DATABASE_URL"] = embedded._ensure_postgres(self.data_dir, state)
            if "redis" in names:
                self.urls["REDIS_URL"] = embedded._ensure_redis(self.data_dir, state)

    def stop(self, name: str) -> None:
        pid, proc = embedded._owned.pop(name)
        # SIGINT is PostgreSQL's fast shutdown (clients are cut at once); Redis saves on SIGTERM.
        embedded._stop_process(pid, proc, signal.SIGINT if name == "postgres" else signal.SIGTERM)

    def restart(self, name: str, down_s: float = 2.0) -> None:
        """Stop one server, leave it down for ``down_s`` while the load runs, start it on the same port."""
        before = dict(self.urls)
        self.stop(name)
        time.sleep(down_s)
        self.start(name)
        assert self.urls == before, "the server came back on another port: clients could not reconnect"

    def stop_all(self) -> None:
        for name in list(embedded._owned):
            self.stop(name)


def private_stack(workdir: Path, services: PrivateServices) -> Stack:
    """A `Stack` whose console, worker and node agent use ``services`` instead of the shared servers."""
    stack = Stack(workdir)
    database = urlsplit(services.urls["DATABASE_URL"])
    stack.admin_url = urlunsplit(database._replace(path="/postgres"))
    stack.env["DATABASE_URL"] = urlunsplit(database._replace(path="/" + stack.db_name))
    stack.env["REDIS_URL"] = services.urls["REDIS_URL"]
    return stack


@dataclass
class Outcome:
    status: int | None  # None: no HTTP answer (the error says why)
    retry_after: str | None = None
    error: str | None = None


@dataclass
class Load:
    """``clients`` threads calling ``request(client)`` until stopped or ``max_s`` passed."""

    request: Callable[[httpx.Client], httpx.Response]
    base_url: str
    headers: dict[str, str]
    clients: int = 3
    max_s: float = 60.0
    pause_s: float = 0.05
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_s
        with httpx.Client(base_url=self.base_url, headers=self.headers, timeout=CLIENT_TIMEOUT_S) as client:
            while not self._stop.is_set() and time.monotonic() < deadline:
                try:
                    r = self.request(client)
                    self.outcomes.append(Outcome(r.status_code, r.headers.get("retry-after")))
                except httpx.HTTPError as exc:
                    self.outcomes.append(Outcome(None, error=f"{type(exc).__name__}: {exc}"))
                time.sleep(self.pause_s)

    def __enter__(self) -> Load:
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(self.clients)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=CLIENT_TIMEOUT_S + 5)

    def unclean(self) -> list[Outcome]:
        """Answers a client must never see: anything but 200 or a 503 that says when to retry."""
        return [o for o in self.outcomes if not (o.status == 200 or (o.status == 503 and o.retry_after))]
