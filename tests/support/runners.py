"""Real runner subprocesses for tests (no database), started by the shared launcher ``inference.runner.launch``.

The models they serve are built by ``tests.support.tiny_models``; here are the manifests beside them.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from contract.manifest import MANIFEST_NAME
from inference.runner import launch
from tests.support.tiny_models import COLOURS

REPO = Path(__file__).resolve().parents[2]
RUNNER_TOKEN = "s3cret-runner-token"


def image_manifest(**overrides: object) -> dict:
    manifest = {
        "deployment": "colours",
        "model_version": "colours:1",
        "task": "image-classification",
        "model_file": "model.onnx",
        "labels": COLOURS,
        "preprocessing": {"input_size": [16, 16], "resize_shorter": 18, "mean": [0.5] * 3, "std": [0.5] * 3},
    }
    manifest.update(overrides)
    return manifest


def redis_url_for_tests(db: int = 12) -> str:
    """The suite's Redis (REDIS_URL) with its own database index, so runners' keys never collide."""
    parts = urlsplit(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    return urlunsplit(parts._replace(path=f"/{db}"))


def write_manifest(model_dir: Path, manifest: dict) -> Path:
    """Write ``manifest`` exactly as given: tests also write broken ones to see the runner refuse them."""
    (model_dir / MANIFEST_NAME).write_text(json.dumps(manifest))
    return model_dir


class Runner:
    """A runner subprocess started by the shared launcher (``inference.runner.launch``)."""

    def __init__(self, handle: launch.RunnerProcess, log_path: Path) -> None:
        assert handle.port is not None
        self.handle, self.port, self.log_path = handle, handle.port, log_path

    @property
    def process(self) -> subprocess.Popen:
        return self.handle.process

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        return self.handle.stop(15)


def runner_command(model_dir: Path, *args: str) -> list[str]:
    return launch.runner_command(model_dir, *args, threads=1)


def launch_runner(model_dir: Path, log_path: Path, *args: str, token: str | None = None) -> Runner:
    """Start a runner subprocess and return once it printed its listening line and is ready."""
    log_path.write_bytes(b"")
    handle = launch.start(runner_command(model_dir, *args), env=launch.runner_env(token=token), cwd=REPO,
                          log_path=log_path)  # fmt: skip
    try:
        handle.wait_ready(60)
    except launch.LaunchError as exc:
        raise AssertionError(str(exc)) from None
    return Runner(handle, log_path)
