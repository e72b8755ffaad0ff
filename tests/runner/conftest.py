"""Fixtures for the runner: tiny ONNX models built once per session, and real runner processes.

The runner tests need no database; they start ``python -m inference.runner`` exactly as the node
agent does and talk to it over HTTP.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from tests.support.runners import RUNNER_TOKEN, Runner, image_manifest, launch_runner, write_manifest
from tests.support.tiny_models import colour_classifier, minilm_tokenizer, slow_classifier, tiny_bert_onnx


@pytest.fixture(scope="session")
def colour_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model_dir = tmp_path_factory.mktemp("colours")
    colour_classifier(model_dir / "model.onnx")
    return write_manifest(model_dir, image_manifest())


@pytest.fixture(scope="session")
def slow_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model_dir = tmp_path_factory.mktemp("slow")
    slow_classifier(model_dir / "model.onnx")
    prep = {"input_size": [128, 128], "resize_shorter": 128, "mean": [0.5] * 3, "std": [0.5] * 3}
    return write_manifest(model_dir, image_manifest(deployment="slow", preprocessing=prep))


@pytest.fixture(scope="session")
def minibert_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model_dir = tmp_path_factory.mktemp("minibert")
    tiny_bert_onnx(model_dir)
    shutil.copy(minilm_tokenizer(), model_dir / "tokenizer.json")
    manifest = {
        "deployment": "minibert",
        "model_version": "minibert:1",
        "task": "feature-extraction",
        "model_file": "model.onnx",
        "tokenizer_file": "tokenizer.json",
        "max_length": 32,
        "pooling": "mean",
        "normalize": True,
    }
    return write_manifest(model_dir, manifest)


@pytest.fixture(scope="session")
def colour_runner(colour_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The colour classifier behind a runner token, with room for batches of 8 after 20 ms."""
    log_path = tmp_path_factory.mktemp("logs") / "colour.log"
    runner = launch_runner(
        colour_model_dir, log_path, "--max-batch-size", "8", "--max-queue-delay-ms", "20",
        "--max-body-bytes", "200000", token=RUNNER_TOKEN,
    )  # fmt: skip
    yield runner
    runner.stop()


@pytest.fixture(scope="session")
def minibert_runner(minibert_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    log_path = tmp_path_factory.mktemp("logs") / "minibert.log"
    runner = launch_runner(
        minibert_model_dir, log_path, "--max-batch-size", "4", "--max-queue-delay-ms", "10"
    )
    yield runner
    runner.stop()


@pytest.fixture
def runner_token() -> str:
    return RUNNER_TOKEN


@pytest.fixture
def colour_client(colour_runner: Runner):
    with httpx.Client(base_url=colour_runner.url, headers={"X-Lantau-Runner-Token": RUNNER_TOKEN}) as client:
        yield client


@pytest.fixture
def minibert_client(minibert_runner: Runner):
    with httpx.Client(base_url=minibert_runner.url) as client:
        yield client
