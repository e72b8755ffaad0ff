"""Tenant isolation on a node: each runner under an unprivileged uid of its own (review M-D).

Runners execute models that teams uploaded, through decoders and onnxruntime, so one bad ONNX file can
run code. Under the agent's uid every runner could read every other runner's ``/proc/<pid>/environ``
(runner tokens, Redis passwords), the node token, other teams' models, and rewrite cached models and
TensorRT engines that other teams' runners load next. An agent running as root starts each runner
under a uid (with the gid of the same number and no supplementary groups) taken from a range
(``--runner-uid-base``, ``--runner-uid-count``), so the kernel keeps them apart.

**One uid per replica**, not per team or deployment: the agent learns no team from the console, a
deployment's name is not a stable tenant identity, and two replicas of one deployment on one node are
rare enough that a uid each costs nothing; it is also the strictest split. A replica keeps its uid over
its restarts (and in its record, so a restarted agent adopts it with it); a uid is handed out again only
once no process runs under it, and before that the folders it was given are taken back.

What a runner can reach, with isolation:

* ``<data-dir>`` root 0711, ``cache/`` and ``cache/replicas/`` root 0711: traversed, not listed.
* its model folder ``cache/replicas/r<id>`` root:<its gid> 0750: read, never written (the agent writes
  its manifest there as root, so a runner must not plant a link in it), other runners kept out. The
  model files are hard links to the cache's files, root 0644: readable through this folder only, since
  ``cache/v<id>`` is root 0700; nobody but the agent can change them (a chmod or chown of a hard link
  changes the cache's file: the agent only ever makes them root 0644, never a runner's).
* its TensorRT engine cache ``trt-cache/<version>/gpu<i>`` owned by its uid, 0700 (parents root 0711):
  a folder owned by another uid is removed and made again, and at each hand-out of a uid the folders it
  owned for other versions are taken back (root, 0700), so engines are written only by runners of
  their version. A replica of the version is given that folder's uid when it is free (engines kept).
* nothing else: the node token, ``agent-state.json``, ``runners/`` (records and logs: a runner writes
  its log through the file it inherits, root 0600), the edge's files are root 0600/0700, and the
  agent runs with umask 077, runners too.

Without root (or with ``--runner-uid-count 0``, or a data dir or a Python other uids cannot reach)
runners share the agent's uid as before; the agent warns once at start and reports
``runner_isolation: shared-uid`` in its inventory, which the console's node page shows.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

UID_PER_REPLICA = "uid-per-replica"
SHARED_UID = "shared-uid"
DEFAULT_UID_BASE = 61000
DEFAULT_UID_COUNT = 1000
SHARED_WARNING = "runners share the agent's uid: run the agent as root to isolate tenants"


@dataclass(frozen=True)
class Isolation:
    """How this agent starts runners: ``mode`` is UID_PER_REPLICA or SHARED_UID; ``reason`` says why
    runners share the agent's uid (empty when isolated)."""

    mode: str = SHARED_UID
    uid_base: int = DEFAULT_UID_BASE
    uid_count: int = 0
    reason: str = ""

    @property
    def isolated(self) -> bool:
        return self.mode == UID_PER_REPLICA

    def warning(self) -> str:
        return f"{SHARED_WARNING} ({self.reason})" if not self.isolated else ""


def blocked_ancestor(path: Path) -> Path | None:
    """The first folder above ``path`` (or itself) that a uid other than its owner cannot traverse
    (no execute bit for others), else None: runners must reach their model folder by its path."""
    path = path.resolve()
    for folder in [*reversed(path.parents), path]:
        try:
            mode = folder.stat().st_mode
        except OSError:
            return folder
        if not mode & stat.S_IXOTH:
            return folder
    return None


def decide(euid: int, uid_base: int, uid_count: int, data_dir: Path, python: Path | None = None) -> Isolation:
    """Whether runners get their own uids: only an agent running as root can start them so, with a
    range of unprivileged uids, a data dir and an interpreter (``python``, default this one) that
    other uids can reach; else they share the agent's uid, with the reason."""
    if uid_count <= 0:
        return Isolation(SHARED_UID, uid_base, 0, "--runner-uid-count is 0")
    if euid != 0:
        return Isolation(SHARED_UID, uid_base, 0, f"the agent runs as uid {euid}, not root")
    if uid_base <= 0 or uid_base + uid_count > 2**31:
        return Isolation(SHARED_UID, uid_base, 0, f"--runner-uid-base {uid_base} is not an unprivileged uid")
    blocked = blocked_ancestor(data_dir)
    if blocked is not None and blocked != data_dir.resolve():  # the data dir itself is made 0711
        why = f"{blocked}, above the data dir, cannot be traversed by other uids: chmod o+x it"
        return Isolation(SHARED_UID, uid_base, 0, why)
    blocked = blocked_ancestor(Path(python or sys.executable))
    if blocked is not None:
        why = (
            f"other uids cannot run the runners' interpreter {python or sys.executable}: {blocked} is not o+x"
        )
        return Isolation(SHARED_UID, uid_base, 0, why)
    return Isolation(UID_PER_REPLICA, uid_base, uid_count, "")


def account_exists(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def uids_in_use() -> set[int]:
    """The real, effective, saved and filesystem uids of every process on this machine (/proc)."""
    used: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("Uid:"):
                    used.update(int(part) for part in line.split()[1:])
                    break
    return used


def process_uid(pid: int) -> int | None:
    """The real uid of process ``pid`` (/proc/<pid>/status), None when it is gone."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    return None


def allocate(isolation: Isolation, taken: set[int], prefer: int | None = None) -> int | None:
    """A uid of the range held by no replica of this agent (``taken``), no process and no account;
    ``prefer`` when it is such a uid (the owner of the version's engine cache). None when all are used."""
    busy = taken | uids_in_use()
    candidates = range(isolation.uid_base, isolation.uid_base + isolation.uid_count)
    if prefer is not None and prefer in candidates and prefer not in busy and not account_exists(prefer):
        return prefer
    for uid in candidates:
        if uid not in busy and not account_exists(uid):
            return uid
    return None


def _chmod(path: Path, mode: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        if not path.is_symlink():
            os.chmod(path, mode)


def _own(path: Path, uid: int, gid: int, mode: int) -> None:
    """``path`` (a folder the agent made, never a link) owned by uid:gid with ``mode``."""
    os.chown(path, uid, gid, follow_symlinks=False)
    os.chmod(path, mode)


def lock_data_dir(data_dir: Path, cache_dir: Path) -> None:
    """The agent's own files out of runners' reach: the data dir and the cache traversable only
    (0711), every other entry of the data dir (node token, state, records and logs, the edge's
    files) root 0600/0700, cached versions, model folders and engine caches left by an agent that
    did not isolate root 0700. Run once at start, before any runner."""
    os.umask(0o077)
    for folder in (data_dir, cache_dir, cache_dir / "replicas", data_dir / "trt-cache"):
        folder.mkdir(parents=True, exist_ok=True)
        _own(folder, 0, 0, 0o711)
    for entry in data_dir.iterdir():
        if entry in (cache_dir, data_dir / "trt-cache") or entry.is_symlink():
            continue
        _chmod(entry, 0o700 if entry.is_dir() else 0o600)
    for entry in cache_dir.iterdir():
        if entry.is_dir() and not entry.is_symlink() and entry.name.startswith("v"):
            _chmod(entry, 0o700)
    for entry in (cache_dir / "replicas").iterdir():  # a shared-uid agent's folders were 0755
        if entry.is_dir() and not entry.is_symlink() and entry.lstat().st_gid == 0:
            _chmod(entry, 0o700)  # given to its runner's gid again when it starts (or left root's)
    for version in (data_dir / "trt-cache").iterdir():
        if version.is_dir() and not version.is_symlink():
            _chmod(version, 0o711)
            for gpu in version.iterdir():
                if gpu.is_dir() and not gpu.is_symlink() and gpu.lstat().st_uid == 0:
                    _chmod(gpu, 0o700)  # a shared-uid agent's engines: for the next runner of the version


def give_model_dir(model_dir: Path, uid: int) -> None:
    """The replica's model folder readable by its runner only (root:<gid> 0750), its files too."""
    _own(model_dir, 0, uid, 0o750)
    for entry in model_dir.iterdir():
        if entry.is_file() and not entry.is_symlink():
            os.chmod(entry, 0o644)  # root's: a hard link to a cached file, or the manifest the agent wrote


def give_trt_cache(folder: Path, uid: int) -> None:
    """The version's engine cache on one GPU writable by this runner's uid alone: a folder another
    uid owned is removed (its engines are not this uid's to trust) and made again."""
    for parent in (folder.parent.parent, folder.parent):
        parent.mkdir(exist_ok=True)
        _own(parent, 0, 0, 0o711)
    if folder.is_symlink() or (folder.exists() and folder.lstat().st_uid != uid):
        if folder.is_symlink() or not folder.is_dir():
            folder.unlink()
        else:
            shutil.rmtree(folder)
    folder.mkdir(exist_ok=True)
    _own(folder, uid, uid, 0o700)


def take_back(uid: int, *, replicas_dir: Path, trt_dir: Path, keep: set[Path]) -> None:
    """Before ``uid`` serves another replica: the model folders given to it and the engine caches it
    owned, but those in ``keep``, made root's (0700), so a uid handed out again reaches nothing of
    its previous replica."""
    folders: list[Path] = []
    if replicas_dir.is_dir():
        folders += [p for p in replicas_dir.iterdir() if p.is_dir() and not p.is_symlink()]
    if trt_dir.is_dir():
        for version in trt_dir.iterdir():
            if version.is_dir() and not version.is_symlink():
                folders += [p for p in version.iterdir() if p.is_dir() and not p.is_symlink()]
    for folder in folders:
        info = folder.lstat()
        if folder not in keep and (info.st_uid == uid or info.st_gid == uid):
            _own(folder, 0, 0, 0o700)
