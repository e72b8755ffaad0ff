"""Two installs sharing one Redis, told apart by their prefix: a runner honours only keys, counters and
metrics under the prefix its node agent gave it (``--redis-prefix``)."""

from __future__ import annotations

import io
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import redis
from PIL import Image

from contract.apikeys import entry_sign, key_generate, key_hash
from contract.redis_keys import RedisKeys
from contract.signing import public_key_text, signing_key_from_secret
from tests.support.runners import (
    REPO,
    image_manifest,
    launch_runner,
    redis_url_for_tests,
    runner_command,
    write_manifest,
)

TEAM = 11
INSTALL_A = RedisKeys(f"install-a-{secrets.token_hex(3)}")
INSTALL_B = RedisKeys(f"install-b-{secrets.token_hex(3)}")
CONSOLE = signing_key_from_secret("prefix-tests")  # both installs' consoles sign alike here: worst case


@pytest.fixture(scope="module")
def store():
    client = redis.Redis.from_url(redis_url_for_tests())
    yield client
    for names in (INSTALL_A, INSTALL_B):
        stale = list(client.scan_iter(match=f"{names.prefix}:*"))
        if stale:
            client.delete(*stale)
    client.close()


@pytest.fixture(scope="module")
def runners(colour_model_dir: Path, tmp_path_factory: pytest.TempPathFactory, store):
    """The same deployment served by one runner of each install, both on the shared Redis."""
    model_dir = tmp_path_factory.mktemp("prefixed")
    shutil.copy(colour_model_dir / "model.onnx", model_dir / "model.onnx")
    write_manifest(
        model_dir,
        image_manifest(deployment="prefixed", team_id=TEAM, key_verify_key=public_key_text(CONSOLE)),
    )
    logs = tmp_path_factory.mktemp("logs")
    started = {
        names.prefix: launch_runner(
            model_dir,
            logs / f"{names.prefix}.log",
            "--redis-url",
            redis_url_for_tests(),
            "--redis-prefix",
            names.prefix,
            "--replica",
            "r1",
        )  # fmt: skip
        for names in (INSTALL_A, INSTALL_B)
    }
    yield started
    for runner in started.values():
        runner.stop()


def predict(url: str, key: str) -> httpx.Response:
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (250, 0, 0)).save(buffer, "PNG")
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "image/png"}
    return httpx.post(
        f"{url}/v1/deployments/prefixed/predict", content=buffer.getvalue(), headers=headers, timeout=30
    )


def test_a_key_of_install_a_works_only_at_install_a_runners(runners, store) -> None:
    key, prefix = key_generate()
    entry = entry_sign(CONSOLE, INSTALL_A.prefix, prefix=prefix, digest=key_hash(key), key_id=501, team_id=TEAM,
                       scopes=["inference"])  # fmt: skip
    store.set(INSTALL_A.api_key(prefix), entry, ex=120)
    mine, theirs = runners[INSTALL_A.prefix], runners[INSTALL_B.prefix]
    assert predict(mine.url, key).status_code == 200
    refused = predict(theirs.url, key)
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "unauthorized"
    other, other_prefix = key_generate()  # a second key, never asked of B yet (B caches answers for 1 s)
    entry = entry_sign(CONSOLE, INSTALL_A.prefix, prefix=other_prefix, digest=key_hash(other), key_id=502,
                       team_id=TEAM, scopes=["inference"])  # fmt: skip
    store.set(INSTALL_B.api_key(other_prefix), entry, ex=120)  # A's entry copied into B's namespace
    copied = predict(theirs.url, other)  # the signature covers the install's prefix: refused
    assert copied.status_code == 401 and copied.json()["error"]["type"] == "unauthorized"
    store.set(INSTALL_A.api_key(other_prefix), entry, ex=120)
    assert predict(mine.url, other).status_code == 200  # the very same entry is good at A
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not store.hgetall(INSTALL_A.usage(501)):
        time.sleep(0.1)
    assert store.hgetall(INSTALL_A.usage(501))[b"requests"] == b"1"  # counted under its own install only
    assert not store.exists(INSTALL_B.usage(501)) and not store.exists(RedisKeys().usage(501))


def test_a_runner_refuses_a_prefix_that_would_break_scan_patterns(colour_model_dir: Path) -> None:
    result = subprocess.run(runner_command(colour_model_dir, "--redis-prefix", "lantau*"), cwd=REPO,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2 and "--redis-prefix" in result.stderr and "Traceback" not in result.stderr


def test_each_install_publishes_live_metrics_under_its_own_prefix(runners, store) -> None:
    deadline = time.monotonic() + 5
    found: dict[str, bool] = {}
    while time.monotonic() < deadline and not all(found.values() or [False]):
        found = {n.prefix: bool(store.get(n.metrics_last("prefixed", "r1"))) for n in (INSTALL_A, INSTALL_B)}
        time.sleep(0.2)
    assert found == {INSTALL_A.prefix: True, INSTALL_B.prefix: True}
    assert store.get(RedisKeys().metrics_last("prefixed", "r1")) is None
