"""The parent side of the sandbox: a private folder, the child process, its limits and how it ended.

Layout of one box (a fresh folder under the system temp dir, removed on exit)::

    box/            root-owned, 0750 (group: the sandbox user's), so only root and the child enter it
      call.json     what to run (read-only to the child)
      output.log    the child's stdout and stderr (an fd the parent opened; the child cannot reopen it)
      in/           inputs the parent copies in, read-only to the child
      out/          the child's only writable place: HOME, TMPDIR, its outputs, progress and result

The child never gets a path it could use to change what the parent reads back: inputs are copies owned
by root, and outputs are opened with O_NOFOLLOW and O_NONBLOCK (a FIFO the child planted opens at once
instead of waiting for a writer) and must be regular files, checked on the open file before any read.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from inference.conversion.steps import Cancelled, JobCancelled, Progress
from inference.validation.formats import InvalidModel

log = logging.getLogger("lantau.sandbox")
PROJECT_ROOT = Path(__file__).resolve().parents[2]
POLL_S = 0.2
MAX_RESULT_BYTES = 16 * 1024 * 1024
LOG_TAIL_CHARS = 4000
SEGMENT = re.compile(r"^[A-Za-z0-9._-]+$")
# Parent variables whose values must never appear in a log line copied from the child.
SECRET_NAME = re.compile(r"SECRET|PASSWORD|TOKEN|KEY|CREDENTIAL|DATABASE_URL|REDIS_URL|DSN", re.I)
URL_PASSWORD = re.compile(r"(\w+://[^:/@\s]*:)[^@\s]*@")
PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclass(frozen=True)
class SandboxLimits:
    """What one child may use; ``user`` is the account it drops to when the worker runs as root."""

    memory_bytes: int = 4 * 1024**3
    cpu_seconds: int = 3600
    timeout_s: float = 3600.0
    file_bytes: int = 8 * 1024**3
    open_files: int = 4096
    user: str = "nobody"


class SandboxFailed(Exception):
    """The child ran out of a limit, crashed or was killed; the message says which, for the job's error."""


def gib(n: int) -> str:
    return f"{n / 1024**3:g} GiB" if n >= 1024**3 else f"{n / 1024**2:g} MiB"


def scrub(text: str) -> str:
    """Remove the worker's secrets and URL passwords from text the child wrote."""
    for name, value in os.environ.items():
        if len(value) >= 6 and SECRET_NAME.search(name):
            text = text.replace(value, "***")
    return URL_PASSWORD.sub(r"\1***@", text)


def child_environment(out: Path) -> dict[str, str]:
    """An environment built from an allowlist: nothing of the worker's secrets or settings."""
    env = {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}
    env.setdefault("PATH", "/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    return env | {
        "HOME": str(out),
        "TMPDIR": str(out / "tmp"),
        "XDG_CACHE_HOME": str(out / "cache"),
        "HF_HOME": str(out / "hf"),
        "TORCH_HOME": str(out / "torch"),
        "MPLCONFIGDIR": str(out / "cache"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


@cache
def isolation() -> dict[str, Any]:
    """What this machine allows, probed once per process and logged: network namespace, user drop."""
    probe = subprocess.run(
        [sys.executable, "-E", "-s", "-B", "-m", "inference.sandbox.child", "--probe"],
        cwd=PROJECT_ROOT,
        env=child_environment(Path(tempfile.gettempdir())),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    try:
        found: dict[str, Any] = json.loads(probe.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        found = {"network": "unknown", "root": os.geteuid() == 0}
    if found.get("network") != "namespace":
        log.warning(
            "sandbox: no network namespace here (%s); model code is kept off the network only by a "
            "Python-level block. Run the worker as root or allow unprivileged user namespaces.",
            found.get("network"),
        )
    if found.get("pids") != "namespace":
        log.warning(
            "sandbox: no PID namespace here (%s); a process the model code starts with setsid() can "
            "outlive its job. Run the worker as root or allow unprivileged user namespaces.",
            found.get("pids"),
        )
    if os.geteuid() != 0:
        log.warning("sandbox: the worker is not root, so model code runs as the worker's own user")
    return found


UNSAFE_HINT = (
    "run the worker as root with CAP_SETUID/CAP_SETGID (and CAP_SYS_ADMIN in a container, for the network "
    'namespace; docs/deployment.md, "The sandbox"), or set LANTAU_SANDBOX_UNSAFE=1 to accept the risk'
)


def isolation_gaps(found: dict[str, Any]) -> list[str]:
    """What the probe says the sandbox cannot do here: drop to another uid, isolate the network."""
    gaps = []
    if not found.get("root"):
        gaps.append("it cannot drop to another uid (the worker is not root), so model code could read the "
                    "worker's /proc/<pid>/environ and files")  # fmt: skip
    if found.get("network") != "namespace":
        gaps.append(f"it has no network namespace ({found.get('network')}), so native code could connect out")
    return gaps


def isolation_refusal(found: dict[str, Any]) -> str | None:
    """The job error when model code may not run here (fail closed), or None when the sandbox isolates."""
    gaps = isolation_gaps(found)
    if not gaps:
        return None
    return f"the sandbox cannot isolate here: {'; '.join(gaps)}. Refused: {UNSAFE_HINT}"


class Sandbox:
    """``with Sandbox(limits) as box``: ``put`` inputs, ``call`` a task, ``take`` outputs."""

    def __init__(self, limits: SandboxLimits, *, note: Callable[[str], None] | None = None) -> None:
        self.limits = limits
        self.note = note or (lambda line: None)
        self.ids = self._drop_ids()
        self.root = self.inbox = self.out = Path()

    def _drop_ids(self) -> tuple[int, int] | None:
        if os.geteuid() != 0 or not self.limits.user:
            return None
        entry = pwd.getpwnam(self.limits.user)
        return entry.pw_uid, entry.pw_gid

    def __enter__(self) -> Sandbox:
        self.root = Path(tempfile.mkdtemp(prefix="lantau-sandbox-"))
        self.inbox, self.out = self.root / "in", self.root / "out"
        self.inbox.mkdir(mode=0o700)
        self.out.mkdir(mode=0o700)
        for sub in ("tmp", "cache"):
            (self.out / sub).mkdir(mode=0o700)
        if self.ids:
            uid, gid = self.ids
            for folder in (self.root, self.inbox):
                os.chown(folder, 0, gid)
                os.chmod(folder, 0o750)
            for folder in (self.out, self.out / "tmp", self.out / "cache"):
                os.chown(folder, uid, gid)
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def put(self, name: str, source: Path) -> Path:
        """Copy a file or a folder (regular files only, links skipped) into in/<name>; read-only to the child."""
        if not SEGMENT.match(name):
            raise ValueError(f"bad sandbox input name {name!r}")
        target = self.inbox / name
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True, ignore=_links)
        else:
            shutil.copyfile(source, target)
        self.seal()
        return target

    def seal(self) -> None:
        """Make everything under in/ readable (not writable) by the child only."""
        gid = self.ids[1] if self.ids else -1
        for path in [self.inbox, *self.inbox.rglob("*")]:
            if path.is_symlink():
                path.unlink()
                continue
            if gid >= 0:
                os.chown(path, 0, gid, follow_symlinks=False)
            os.chmod(path, (0o750 if self.ids else 0o700) if path.is_dir() else 0o440)

    def take(self, name: str, dest: Path) -> Path:
        """Copy out/<name> to ``dest``: a regular file the child wrote, never a link it planted."""
        parts = name.split("/")
        if not all(SEGMENT.match(part) and part not in (".", "..") for part in parts):
            raise ValueError(f"bad sandbox output name {name!r}")
        try:
            fd = _open_beneath(self.out, parts)
        except OSError as exc:
            raise SandboxFailed(f"the sandbox did not write {name} ({exc.strerror})") from None
        with os.fdopen(fd, "rb") as src:
            size = _regular_size(src.fileno(), name)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "wb") as dst:  # the size it had when opened: a file still growing is cut there
                while size > 0 and (chunk := src.read(min(size, 1024 * 1024))):
                    dst.write(chunk)
                    size -= len(chunk)
        return dest

    def call(
        self,
        task: str,
        args: dict[str, Any],
        *,
        progress: Progress | None = None,
        cancelled: Cancelled | None = None,
    ) -> dict[str, Any]:
        """Run ``tasks.TASKS[task](args)`` in the child; its JSON result, or InvalidModel/SandboxFailed."""
        call = {
            "task": task,
            "args": args,
            "out": str(self.out),
            "limits": asdict(self.limits),
            "drop": list(self.ids) if self.ids else None,
        }
        call_file = self.root / "call.json"
        call_file.write_text(json.dumps(call, default=str))
        self.seal_file(call_file)
        for leftover in ("result.json", "progress.jsonl"):
            path = self.out / leftover
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            path.unlink(missing_ok=True)
        ended, last = self._run(progress, cancelled)
        return self._result(task, ended, last)

    def seal_file(self, path: Path) -> None:
        if self.ids:
            os.chown(path, 0, self.ids[1])
        os.chmod(path, 0o440)

    def _run(self, progress: Progress | None, cancelled: Cancelled | None) -> tuple[int | str, str]:
        command = [sys.executable, "-E", "-s", "-B", "-m", "inference.sandbox.child", str(self.root)]
        with open(self.root / "output.log", "wb") as output:
            child = subprocess.Popen(
                command,
                cwd=PROJECT_ROOT,
                env=child_environment(self.out),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed whole, grandchildren included
            )
            try:
                return self._wait(child, progress, cancelled)
            finally:
                _kill_group(child)
                self._copy_log()

    def _wait(
        self, child: subprocess.Popen[bytes], progress: Progress | None, cancelled: Cancelled | None
    ) -> tuple[int | str, str]:
        deadline = time.monotonic() + self.limits.timeout_s
        reader = _ProgressReader(self.out / "progress.jsonl", progress)
        while (code := child.poll()) is None:
            if cancelled is not None and cancelled():
                _kill_group(child)
                raise JobCancelled("cancelled while the sandbox was running")
            if time.monotonic() > deadline:
                _kill_group(child)
                return "timeout", reader.last
            reader.read()
            time.sleep(POLL_S)
        reader.read()
        return code, reader.last

    def _copy_log(self) -> None:
        try:
            fd = os.open(self.root / "output.log", _READ_FLAGS)
        except OSError:
            return
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                return
            handle.seek(max(0, info.st_size - LOG_TAIL_CHARS))
            tail = handle.read(LOG_TAIL_CHARS).decode("utf-8", "replace")
        for line in scrub(tail).splitlines()[-20:]:
            if line.strip():
                self.note(f"sandbox: {line.strip()[:400]}")

    def _result(self, task: str, ended: int | str, last: str) -> dict[str, Any]:
        doing = f" while {last}" if last else ""
        if ended == "timeout":
            raise SandboxFailed(f"{task} took longer than {self.limits.timeout_s:g} s{doing} and was stopped")
        result = _read_result(self.out / "result.json")
        if result is None:
            raise SandboxFailed(_exit_message(task, int(ended), self.limits) + doing)
        if result.get("ok"):
            value = result.get("value")
            return value if isinstance(value, dict) else {}
        kind, message = str(result.get("type", "")), scrub(str(result.get("message", "")))[:1500]
        if kind == "InvalidModel":
            raise InvalidModel(message)
        if kind == "MemoryError":
            raise SandboxFailed(
                f"the model exhausted the {gib(self.limits.memory_bytes)} memory limit{doing}"
            )
        raise SandboxFailed(f"{task} failed{doing}: {kind}: {message}")


# How the parent opens what the child may have written: no link followed, and no wait (a FIFO opened
# for reading without O_NONBLOCK blocks until a writer comes, which a hostile child never sends).
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _regular_size(fd: int, name: str) -> int:
    """The size of the open file; SandboxFailed unless it is a regular file (a FIFO, a device, a socket
    or a folder planted in out/ is refused before any read)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "not a regular file"
        log.warning("sandbox: refusing out/%s: %s (mode %o)", name, kind, info.st_mode)
        raise SandboxFailed(f"the sandbox's {name} is not a regular file ({kind}); refused")
    return info.st_size


def _open_beneath(root: Path, parts: list[str]) -> int:
    """Open root/parts... following no link on the way (a folder the child made could be a link)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            inner = os.open(part, _READ_FLAGS | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        return os.open(parts[-1], _READ_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)


def _links(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if os.path.islink(os.path.join(folder, n))]


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()


def _read_result(path: Path) -> dict[str, Any] | None:
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        _regular_size(handle.fileno(), path.name)
        raw = handle.read(MAX_RESULT_BYTES + 1)
    if len(raw) > MAX_RESULT_BYTES:
        return {"ok": False, "type": "SandboxFailed", "message": "the result is larger than 16 MiB"}
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _exit_message(task: str, code: int, limits: SandboxLimits) -> str:
    if code >= 0:
        return f"{task} exited with status {code} without a result"
    sig = signal.Signals(-code) if -code in signal.valid_signals() else None
    if sig == signal.SIGXCPU:
        return f"{task} used more than its {limits.cpu_seconds} CPU seconds"
    if sig == signal.SIGXFSZ:
        return f"{task} tried to write a file larger than the {gib(limits.file_bytes)} limit"
    if sig == signal.SIGKILL:
        return f"{task} was killed (out of memory, or by the system)"
    name = sig.name if sig else f"signal {-code}"
    return f"{task} crashed ({name})"


class _ProgressReader:
    """Follows the child's progress.jsonl; malformed lines (the child is untrusted) are skipped."""

    def __init__(self, path: Path, progress: Progress | None) -> None:
        self.path, self.progress, self.offset, self.last = path, progress, 0, ""

    def read(self) -> None:
        try:
            fd = os.open(self.path, _READ_FLAGS)
        except OSError:
            return
        with os.fdopen(fd, "rb") as handle:
            _regular_size(handle.fileno(), self.path.name)
            handle.seek(self.offset)
            chunk = handle.read(1024 * 1024)
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        for line in complete.splitlines():
            try:
                percent, message = json.loads(line)
                percent, message = min(100.0, max(0.0, float(percent))), scrub(str(message))[:300]
            except (ValueError, TypeError):
                continue
            self.last = message
            if self.progress is not None:
                self.progress(percent, message)
