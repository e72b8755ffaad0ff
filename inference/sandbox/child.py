"""The child side of the sandbox: confine this process, then run one task of ``tasks`` and write its result.

``python -m inference.sandbox.child BOX`` reads ``BOX/call.json``. Confinement happens before anything
of the model (or even numpy) is imported, while the process is still single-threaded: resource limits,
a private network namespace (nothing to connect to, loopback down), no new privileges, and, when started
as root, the unprivileged user the parent chose. The task then runs in a new PID namespace (where the
machine allows one): this process waits for the namespace's first process, a small init that runs nothing
of the task's, and when that init ends (the task finished, or the parent killed this process group) the
kernel kills every process left in the namespace, those that left the group with ``setsid()`` too.
``--probe`` reports what the machine allows.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import resource
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
# Signals whose default action does not end a process: an exit code 128 + one of them is passed on as is.
_NOT_FATAL = {signal.SIGCHLD, signal.SIGCONT, signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN,
              signal.SIGTTOU, signal.SIGURG, signal.SIGWINCH}  # fmt: skip
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
# Messages of allocators that failed under RLIMIT_AS (onnxruntime, torch, the C++ runtime).
OUT_OF_MEMORY = ("bad_alloc", "failed to allocate memory", "can't allocate memory", "cannot allocate memory")


def _unshare(flags: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.unshare(flags) == 0)


def isolate_network() -> str:
    """A new network namespace (as root), else a user+network namespace, else a Python-level block."""
    if os.geteuid() == 0 and _unshare(CLONE_NEWNET):
        return "namespace"
    if os.geteuid() != 0 and _unshare(CLONE_NEWUSER | CLONE_NEWNET):
        return "namespace"
    _block_sockets()
    return "python-block"


def isolate_pids() -> str:
    """A new PID namespace for the processes this one forks next (as root, or as root of the user
    namespace ``isolate_network`` made); "none" where the machine allows none."""
    return "namespace" if _unshare(CLONE_NEWPID) else "none"


def _exit_code(status: int) -> int:
    """A wait status as an exit code, a signal as 128 + its number (as shells report it)."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _become_init() -> None:
    """In the first process of the new namespace (its PID 1): fork the process that runs the task and
    return in it; here, reap every orphan until that one ends, then end with its exit code, which makes
    the kernel kill whatever the task left in the namespace. This init stays root and runs no task code,
    so the task's user can neither signal nor trace it; it dies with its parent (``PR_SET_PDEATHSIG``)."""
    code, worker = 1, -1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        worker = os.fork()
        if worker == 0:
            return
        while True:
            pid, status = os.wait()
            if pid == worker:
                code = _exit_code(status)
                break
    finally:
        if worker != 0:
            os._exit(code)


def contain() -> int | None:
    """After ``isolate_pids``: None in the process that is to run the task (under a fresh init in the new
    namespace); in this one, the task's exit code once it ended. A task ended by a signal ends this
    process by the same signal, so the parent's messages (CPU limit, killed) stay the same."""
    sys.stdout.flush()
    sys.stderr.flush()
    init = os.fork()
    if init == 0:
        _become_init()
        return None
    _, status = os.waitpid(init, 0)
    code = _exit_code(status)
    sig = code - 128
    if sig > 0 and sig in signal.valid_signals() and sig not in _NOT_FATAL:
        with contextlib.suppress(OSError, ValueError):  # SIGKILL keeps its default anyway
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return code


def _refuse(*args: object, **kwargs: object) -> None:
    raise PermissionError("network access is disabled in the Lantau sandbox")


def _block_sockets() -> None:
    # Weaker than a namespace (native code can still open sockets); the parent logs that it is in use.
    for name in ("connect", "connect_ex", "bind", "sendto"):
        setattr(socket.socket, name, _refuse)


def apply_limits(limits: dict[str, Any]) -> None:
    for which, value in (
        (resource.RLIMIT_AS, limits["memory_bytes"]),
        (resource.RLIMIT_CPU, limits["cpu_seconds"]),
        (resource.RLIMIT_FSIZE, limits["file_bytes"]),
        (resource.RLIMIT_NOFILE, limits["open_files"]),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(which, (int(value), int(value)))


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    enc = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    if libc.mount(enc[0], enc[1], enc[2], flags, enc[3]) != 0:
        raise OSError(ctypes.get_errno(), f"mount {target} failed")


def _closed_ancestor(path: Path) -> Path | None:
    """The first folder on the way to ``path`` that others may not traverse (e.g. a 0700 /root)."""
    for folder in [*reversed(path.parents), path]:
        if not os.stat(folder).st_mode & 0o001:
            return folder
    return None


def expose_runtime(box: Path) -> None:
    """Keep the interpreter reachable for the unprivileged user when it lives in a closed folder.

    Python may be installed under root's 0700 home: in a private mount namespace, the closed folder is
    covered by an empty tmpfs (hiding the rest of it) and only the runtime's folders are bound back.
    """
    needed = sorted({Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), Path.cwd().resolve()})
    closed = {p: a for p in needed if (a := _closed_ancestor(p)) is not None}
    if not closed:
        return
    if not _unshare(CLONE_NEWNS):
        raise SystemExit("the sandbox needs a mount namespace to reach the interpreter")
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    staged = {}
    for index, path in enumerate(closed):
        staged[path] = box / f".runtime-{index}"
        staged[path].mkdir(mode=0o700)
        _mount(str(path), str(staged[path]), None, MS_BIND | MS_REC)
    for ancestor in sorted(set(closed.values())):
        _mount("tmpfs", str(ancestor), "tmpfs", 0, "mode=0755,size=1m")
    for path, stage in staged.items():
        path.mkdir(parents=True, exist_ok=True)
        _mount(str(stage), str(path), None, MS_BIND | MS_REC)


def drop_privileges(drop: list[int] | None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if not drop:
        return
    uid, gid = drop
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise SystemExit("the sandbox could not drop its privileges")


class ProgressFile:
    """Progress lines the parent follows: one JSON [percent, message] per line."""

    def __init__(self, path: Path) -> None:
        self.handle = open(path, "a", encoding="utf-8")  # noqa: SIM115  # open for the whole run

    def __call__(self, percent: float, message: str) -> None:
        self.handle.write(json.dumps([float(percent), str(message)[:300]]) + "\n")
        self.handle.flush()


def classify(exc: BaseException) -> dict[str, Any]:
    text = str(exc)
    kind = type(exc).__name__
    if isinstance(exc, MemoryError) or any(marker in text.lower() for marker in OUT_OF_MEMORY):
        kind = "MemoryError"
    return {"ok": False, "type": kind, "message": text.strip()[:2000]}


def run(call: dict[str, Any], out: Path) -> dict[str, Any]:
    progress = ProgressFile(out / "progress.jsonl")
    try:
        # Imported only now, after confinement: the tasks pull in onnx, onnxruntime and torch.
        tasks = importlib.import_module("inference.sandbox.tasks")
        function = tasks.TASKS[call["task"]]
        return {"ok": True, "value": function(call["args"], progress)}
    except BaseException as exc:  # everything becomes a result the parent maps; nothing escapes
        if type(exc).__name__ not in ("InvalidModel",):
            traceback.print_exc(limit=5)
        return classify(exc)


def main(argv: list[str]) -> int:
    if argv[1:] == ["--probe"]:
        network = isolate_network()
        print(json.dumps({"network": network, "pids": isolate_pids(), "root": os.geteuid() == 0}))
        return 0
    box = Path(argv[1])
    call = json.loads((box / "call.json").read_text())
    out = Path(call["out"])
    apply_limits(call["limits"])
    network = isolate_network()
    if call.get("drop"):
        expose_runtime(box)
    pids = isolate_pids()
    if pids == "namespace" and (code := contain()) is not None:
        return code  # the task ran in the namespace, and everything it started ended with it
    drop_privileges(call.get("drop"))
    os.chdir(out)
    print(f"confined: network={network} pids={pids} uid={os.getuid()}", flush=True)
    result = run(call, out)
    (out / "result.json").write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
