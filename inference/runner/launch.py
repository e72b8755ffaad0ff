"""Start, watch and stop runner processes, without Django: one launcher for the node agent
(``inference.agent.supervisor``), the benchmark (``bench.processes``) and the tests (``tests.support.runners``).

A reader thread follows the process's stdout: it finds the listening line (``contract.listening``),
keeps the last lines for error reports and copies each line to an optional sink (the agent's log).
Callers that block until the runner is up use ``wait_listening`` and ``wait_ready``; the agent polls.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

import httpx

from contract.listening import parse_listening

# The only variables a runner inherits (M3 of the security review): what Python, onnxruntime, CUDA and
# the locale need. Anything else of the launcher's (SECRET_KEY, DATABASE_URL, REDIS_URL, the node token)
# stays behind, so a bug in a decoder or a model's graph cannot read it from the runner's memory.
INHERITED_ENV = frozenset({
    "PATH", "HOME", "USER", "LANG", "LANGUAGE", "TZ", "TMPDIR", "PYTHONPATH", "PYTHONHASHSEED",
    "VIRTUAL_ENV", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS", "ORT_LOGGING_LEVEL",
})  # fmt: skip
INHERITED_PREFIXES = ("LC_",)
TAIL_LINES = 40


class LaunchError(RuntimeError):
    """The runner exited or stayed silent before it was up; the message ends with its last output."""


def runner_command(
    model_dir: Path, *args: str, host: str = "127.0.0.1", port: int = 0, **options: object
) -> list[str]:
    """``python -m inference.runner`` with ``--model-dir``; ``max_batch_size=8`` becomes ``--max-batch-size 8``
    (None is left out, True is a bare flag); ``args`` come last, so they win over the options."""
    command = [sys.executable, "-m", "inference.runner", "--model-dir", str(model_dir), "--host", host,
               "--port", str(port)]  # fmt: skip
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            command.append(flag)
        elif value is not None and value is not False:
            command += [flag, str(value)]
    return [*command, *args]


def inherited(name: str) -> bool:
    return name in INHERITED_ENV or name.startswith(INHERITED_PREFIXES)


def runner_env(
    *,
    token: str | None = None,
    redis_url: str | None = None,
    replica: str | None = None,
    base: Mapping[str, str] | None = None,
    visible_gpus: str | None = None,
) -> dict[str, str]:
    """The allowlisted part of the launching process's environment (``INHERITED_ENV``), plus the runner
    settings given; secrets travel here, never on the command line, where ``ps`` shows them.

    ``visible_gpus`` pins the runner to GPUs (``CUDA_VISIBLE_DEVICES``: a GPU's UUID or NVML index, ""
    for none), overriding what the launcher inherited; indexes are then counted in PCI bus order, as NVML
    counts them, not CUDA's default fastest-first order."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if inherited(k)}
    given = {"LANTAU_RUNNER_TOKEN": token, "LANTAU_REDIS_URL": redis_url, "LANTAU_REPLICA_ID": replica}
    env.update({k: v for k, v in given.items() if v})
    if visible_gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_gpus
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["PYTHONUNBUFFERED"] = "1"
    return env


class RunnerProcess:
    """A started runner: its process, its port once announced, and the tail of its output."""

    def __init__(
        self, process: subprocess.Popen[str], *, log_path: Path | None, sink: Callable[[str], None] | None,
        group: bool,
    ) -> None:  # fmt: skip
        self.process = process
        self.port: int | None = None
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.log_path = log_path
        self._group = group
        self._sink = sink
        self._listening = threading.Event()
        self._eof = False
        self._reader = threading.Thread(target=self._follow, name=f"runner-{process.pid}-output", daemon=True)
        self._reader.start()

    def _follow(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.rstrip("\n")
            port = parse_listening(line)
            if port is not None and self.port is None:
                self.port = port
                self._listening.set()
            self.tail.append(line)
            if self._sink is not None:
                self._sink(line)
        self._eof = True
        self._listening.set()  # end of output: whoever waits learns the process is gone

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}" if self.port else ""

    def last_output(self, chars: int = 2000) -> str:
        """The end of what the process wrote: its log file when it has one, else its stdout tail."""
        text = "\n".join(self.tail)
        if self.log_path is not None and self.log_path.exists():
            text = self.log_path.read_text(errors="replace")
        return text[-chars:]

    def wait_listening(self, timeout: float = 60.0) -> int:
        """The port from the listening line; LaunchError if the process exits or stays silent first."""
        self._listening.wait(timeout)
        if self.port is not None:
            return self.port
        if self._eof:  # its output ended: it is exiting, though perhaps not reaped yet
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(5)
        if self.process.poll() is None:
            self.stop()
            problem = f"printed no listening line within {timeout:.0f} s"
        else:
            self._reader.join(1.0)
            problem = f"exited with code {self.process.returncode} before listening"
        raise LaunchError(f"runner {problem}; its last output:\n{self.last_output()}")

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until ``/readyz`` answers 200; LaunchError (after stopping it) if it exits or times out."""
        port = self.wait_listening(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise LaunchError(f"runner never became ready (exit {self.process.returncode}); its last output:\n"
                          f"{self.last_output()}")  # fmt: skip

    def _signal(self, signum: int) -> None:
        try:
            if self._group:
                os.killpg(self.process.pid, signum)
            else:
                self.process.send_signal(signum)
        except ProcessLookupError:
            pass

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (the runner drains its queue), then SIGKILL after ``timeout`` s; the exit code."""
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait(5)
        return self.process.returncode


def start_detached(
    command: list[str], *, env: Mapping[str, str], log_path: Path, uid: int | None = None
) -> subprocess.Popen[bytes]:
    """Start ``command`` in its own session with all its output appended to ``log_path``: it outlives
    the launcher (the node agent adopts it after a restart) and never writes into a pipe nobody reads.
    Its listening line is found in that file (``listening_port``).

    With ``uid`` (a launcher running as root) it runs under that uid, the gid of the same number and
    no supplementary groups, with umask 077; it writes its log through the file it inherits, which
    stays the launcher's (0600)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    as_user: dict[str, object] = {}
    if uid is not None:
        as_user = {"user": uid, "group": uid, "extra_groups": [], "umask": 0o077}
    with log_path.open("ab") as log_file:
        if uid is not None:
            os.fchmod(log_file.fileno(), 0o600)
        return subprocess.Popen(  # type: ignore[call-overload,no-any-return]
            command, env=dict(env), stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True, **as_user,
        )  # fmt: skip


def listening_port(lines: list[str]) -> int | None:
    """The port of the last listening line among ``lines`` (a detached runner's log)."""
    ports = [port for port in map(parse_listening, lines) if port is not None]
    return ports[-1] if ports else None


def start(
    command: list[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    log_path: Path | None = None,
    sink: Callable[[str], None] | None = None,
    group: bool = False,
) -> RunnerProcess:
    """Start ``command``. With ``log_path`` its stderr goes to that file, else it joins stdout (and the
    sink); ``group`` gives it its own process group, so ``stop`` also ends anything it started."""
    stderr: int | IO[bytes] = subprocess.STDOUT
    log_file = log_path.open("ab") if log_path is not None else None
    try:
        process = subprocess.Popen(
            command, cwd=cwd, env=dict(env), stdout=subprocess.PIPE, stderr=log_file or stderr, text=True,
            errors="replace", start_new_session=group,
        )  # fmt: skip
    finally:
        if log_file is not None:
            log_file.close()
    return RunnerProcess(process, log_path=log_path, sink=sink, group=group)
