"""Fetch a version's files from the console into a local cache, verifying each SHA-256.

The cache holds one folder per model version (``v<id>``) and one folder of hard links per replica
(``replicas/r<id>``). Cached files are the agent's, 0644, in a 0700 folder: a runner reads its own
version's through its replica folder (``inference.agent.isolation``) and writes none. It is bounded
(``--cache-max-bytes``): ``evict`` removes the least recently used versions that no replica on this
node runs, and the folders of replicas that are gone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from contract.manifest import MANIFEST_NAME, ModelManifest

CACHED_MODE = 0o644  # root's, read-only: runners read models through their replica folder's hard links
LAST_USED = ".last-used"  # its mtime: when a replica last used the version (least recently used first)
log = logging.getLogger("lantau.agent")


class ArtifactError(Exception):
    pass


def wire_id(value: object) -> int | None:
    """An id from a heartbeat answer as an int, or None unless it is a non-negative int (not a bool): it
    names folders (``v<id>``, ``r<id>``) and files (``runners/<id>.log``), so ``"/../../x"`` must not."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def desired_problem(desired: object) -> str | None:
    """Why a desired replica from the console cannot be used (ids that are not ints, artifacts that are
    not plain file names); None when it can. Checked before anything turns its fields into paths."""
    if not isinstance(desired, dict):
        return f"a desired replica is not an object: {str(desired)[:100]!r}"
    if wire_id(desired.get("id")) is None:
        return f"replica id {str(desired.get('id'))[:100]!r} is not a non-negative integer"
    if wire_id(desired.get("version_id")) is None:
        return f"version_id {str(desired.get('version_id'))[:100]!r} is not a non-negative integer"
    artifacts = desired.get("artifacts", [])
    if not isinstance(artifacts, list) or not all(isinstance(a, dict) for a in artifacts):
        return "artifacts is not a list of objects"
    for artifact in artifacts:
        filename = artifact.get("filename")
        name = Path(filename).name if isinstance(filename, str) else ""
        own = name == LAST_USED or name.startswith(".part-") or (name[:1] == "." and name.endswith(".sha256"))
        if name in ("", ".", "..") or own:  # the cache's own bookkeeping files are not the console's
            return f"artifact file name {str(filename)[:100]!r} is not a plain file name"
    return None


def _inside(base: Path, path: Path) -> Path:
    """``path`` resolved, when it stays inside ``base`` (resolved too); ArtifactError otherwise."""
    resolved, root = path.resolve(), base.resolve()
    if resolved == root or not resolved.is_relative_to(root):
        log.error("refusing to write %s: it resolves to %s, outside %s", path, resolved, root)
        raise ArtifactError(f"refusing {path.name!r}: it resolves outside the cache ({root})")
    return resolved


def _relative(url: object) -> str:
    """The URL if it is a path on the console; the client's base URL is prepended and the node token
    sent with it, so an absolute URL (``http://evil/``, ``//evil/``) would hand the token elsewhere."""
    if not isinstance(url, str) or not url.startswith("/") or url.startswith("//") or "\\" in url:
        raise ArtifactError(
            f"refusing artifact URL {str(url)[:100]!r}: only paths on the console are fetched"
        )
    parts = urlsplit(url)
    if parts.scheme or parts.netloc:
        raise ArtifactError(f"refusing artifact URL {url[:100]!r}: only paths on the console are fetched")
    return url


def _trusted(path: Path) -> bool:
    """A cached file reused without a download: a regular file of the agent's own uid that no group
    or other may write (review M-D: a runner must not have rewritten another version's model). Its
    content is trusted on its marker: re-hashing every model at every start costs too much."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022


def _fetch(client: httpx.Client, url: str, sha256: str, dest: Path) -> None:
    url = _relative(url)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out, client.stream("GET", url) as response:
            if response.status_code != 200:
                raise ArtifactError(f"download of {dest.name} failed with HTTP {response.status_code}")
            for chunk in response.iter_bytes(1024 * 1024):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != sha256:
            raise ArtifactError(f"{dest.name}: sha256 mismatch, refusing the file")
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)


def prepare(client: httpx.Client, cache_dir: Path, desired: dict[str, Any]) -> Path:
    """Cache the version's artifacts (verified) and lay out the replica's model folder; return that folder.

    Files are cached once per version; each replica gets its own folder of hard links plus its manifest,
    since two deployments of one version differ in name and settings. Raises ManifestError when the
    desired manifest breaks the contract.
    """
    problem = desired_problem(desired)
    if problem is not None:
        log.error("refusing a desired replica from the console: %s; nothing written", problem)
        raise ArtifactError(f"refusing the console's answer: {problem}")
    folder = _inside(cache_dir, cache_dir / f"v{desired['version_id']}")
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)  # other versions' runners must not read this one's models (review M-D)
    for artifact in desired["artifacts"]:
        name = Path(artifact["filename"]).name  # never trust a path from the wire
        dest = folder / name
        marker = folder / f".{name}.sha256"
        if _trusted(dest) and _trusted(marker) and marker.read_text() == artifact["sha256"]:
            os.chmod(dest, CACHED_MODE)  # an older agent's cache held them 0600 (mkstemp)
            continue
        _fetch(client, artifact["url"], artifact["sha256"], dest)
        os.chmod(dest, CACHED_MODE)
        marker.write_text(artifact["sha256"])
    (folder / LAST_USED).touch()
    replica_dir = _inside(cache_dir / "replicas", cache_dir / "replicas" / f"r{desired['id']}")
    replica_dir.mkdir(parents=True, exist_ok=True)
    for artifact in desired["artifacts"]:
        name = Path(artifact["filename"]).name
        link = replica_dir / name
        link.unlink(missing_ok=True)
        os.link(folder / name, link)
    manifest = ModelManifest.from_dict(desired["manifest"])  # ManifestError: refused before any runner starts
    labels = replica_dir / "labels.json"
    if (
        not manifest.labels and labels.exists()
    ):  # the console leaves a version's labels file out of heartbeats
        manifest = dataclasses.replace(manifest, labels=tuple(json.loads(labels.read_text())))
    (replica_dir / MANIFEST_NAME).write_text(manifest.to_json())
    return replica_dir


def _version_id(folder: Path) -> int | None:
    name = folder.name
    return int(name[1:]) if name.startswith("v") and name[1:].isdigit() else None


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))


def cache_bytes(cache_dir: Path) -> int:
    """Bytes held by cached versions (replica folders are hard links to them and add nothing)."""
    return sum(_folder_bytes(f) for f in cache_dir.iterdir() if f.is_dir() and _version_id(f) is not None)


def _last_used(folder: Path) -> float:
    try:
        return (folder / LAST_USED).stat().st_mtime
    except OSError:
        return 0.0


def evict(
    cache_dir: Path, max_bytes: int, *, versions_in_use: set[int], replicas_alive: set[int]
) -> list[int]:
    """Keep the cache under ``max_bytes``: remove the folders of replicas not alive, then versions no
    replica uses, least recently used first; a version in use is never removed (the cache may then stay
    above the bound). Return the removed version ids."""
    replicas = cache_dir / "replicas"
    if replicas.is_dir():
        for folder in replicas.iterdir():
            rid = folder.name[1:]
            if folder.is_dir() and rid.isdigit() and int(rid) not in replicas_alive:
                shutil.rmtree(folder, ignore_errors=True)
    for part in cache_dir.glob("v*/.part-*"):  # downloads cut short by a killed agent
        if time.time() - part.stat().st_mtime > 3600:
            part.unlink(missing_ok=True)
    folders = [f for f in cache_dir.iterdir() if f.is_dir() and _version_id(f) is not None]
    total = sum(_folder_bytes(f) for f in folders)
    evicted: list[int] = []
    for folder in sorted(folders, key=_last_used):
        if total <= max_bytes:
            break
        version = _version_id(folder)
        if version is None or version in versions_in_use:
            continue
        total -= _folder_bytes(folder)
        shutil.rmtree(folder, ignore_errors=True)
        evicted.append(version)
    return evicted
