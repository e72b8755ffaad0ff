"""The node's model cache is bounded: least recently used versions go first, never one a replica runs,
and the folders of replicas that are gone are removed. Files already cached (sha256 marker) are reused
without a download, so these tests need no console."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import httpx

from inference.agent import artifacts
from tests.support.runners import image_manifest


def cached_version(cache: Path, version: int, size: int) -> dict:
    """A version whose model file is in the cache already, and a desired replica of it."""
    data = os.urandom(size)
    sha = hashlib.sha256(data).hexdigest()
    folder = cache / f"v{version}"
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(data)
    (folder / ".model.onnx.sha256").write_text(sha)
    artifact = {"filename": "model.onnx", "sha256": sha, "url": f"/api/v1/nodes/artifacts/{sha}"}
    return {"id": version, "version_id": version, "artifacts": [artifact], "manifest": image_manifest()}


def test_the_cache_evicts_least_recently_used_versions_no_replica_runs(tmp_path) -> None:
    cache = tmp_path / "cache"
    specs = {v: cached_version(cache, v, size) for v, size in ((1, 3000), (2, 2000), (3, 1000))}
    offline = httpx.Client(base_url="http://127.0.0.1:9")  # nothing listens: a download would fail
    for version, spec in specs.items():
        replica_dir = artifacts.prepare(offline, cache, spec)
        assert (replica_dir / "model.onnx").stat().st_ino == (
            cache / f"v{version}" / "model.onnx"
        ).stat().st_ino
        os.utime(cache / f"v{version}" / artifacts.LAST_USED, (version * 100, version * 100))
    artifacts.prepare(offline, cache, specs[1])  # used again just now: no longer the least recent
    assert artifacts.cache_bytes(cache) == 6000

    # Over the bound: version 3 (least recently used of those no replica runs) goes, version 1 stays.
    assert artifacts.evict(cache, 5000, versions_in_use={2}, replicas_alive={1, 2}) == [3]
    assert sorted(p.name for p in cache.iterdir()) == ["replicas", "v1", "v2"]
    assert sorted(p.name for p in (cache / "replicas").iterdir()) == ["r1", "r2"]  # r3's replica is gone
    # Far over the bound: every version not in use goes, the one in use stays even above the bound.
    assert artifacts.evict(cache, 0, versions_in_use={2}, replicas_alive={2}) == [1]
    assert artifacts.cache_bytes(cache) == 2000 and (cache / "replicas" / "r2" / "model.onnx").exists()
    assert artifacts.evict(cache, 0, versions_in_use={2}, replicas_alive={2}) == []


def test_a_download_that_does_not_match_its_sha256_is_refused_and_leaves_nothing(tmp_path) -> None:
    """A real HTTP server (127.0.0.1) answers the artifact URL: first with tampered bytes, then right."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import pytest

    good = os.urandom(4096)
    sha = hashlib.sha256(good).hexdigest()
    served = {"body": good[:-1] + bytes([good[-1] ^ 1])}  # one bit flipped on the way

    class Artifact(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = served["body"]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Artifact)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cache = tmp_path / "cache"
    spec = {"id": 5, "version_id": 5, "manifest": image_manifest(),
            "artifacts": [{"filename": "model.onnx", "sha256": sha, "url": f"/api/v1/nodes/artifacts/{sha}"}]}  # fmt: skip
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_address[1]}") as client:
            with pytest.raises(artifacts.ArtifactError, match="sha256 mismatch"):
                artifacts.prepare(client, cache, spec)
            assert sorted(p.name for p in (cache / "v5").iterdir()) == []  # no file, no marker, no .part-
            served["body"] = good
            replica_dir = artifacts.prepare(client, cache, spec)
        assert (replica_dir / "model.onnx").read_bytes() == good
        assert (cache / "v5" / ".model.onnx.sha256").read_text() == sha
    finally:
        server.shutdown()
        server.server_close()
