"""Command-line arguments and the model manifest (``lantau.json``), parsed into frozen dataclasses."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .generation.spec import parse_generation

MANIFEST_NAME = "lantau.json"
TOKEN_ENV = "LANTAU_RUNNER_TOKEN"
REDIS_ENV = "LANTAU_REDIS_URL"
REPLICA_ENV = "LANTAU_REPLICA_ID"
IMAGE_CLASSIFICATION = "image-classification"
FEATURE_EXTRACTION = "feature-extraction"
TEXT_CLASSIFICATION = "text-classification"
TEXT_GENERATION = "text-generation"
TASKS = (IMAGE_CLASSIFICATION, FEATURE_EXTRACTION, TEXT_CLASSIFICATION, TEXT_GENERATION)
POOLINGS = ("mean", "cls")
OUTPUTS = ("logits", "probabilities")


@dataclass(frozen=True)
class Preprocessing:
    input_size: tuple[int, int]  # (height, width) of the model input
    resize_shorter: int
    mean: tuple[float, float, float]  # on the 0..1 scale, RGB
    std: tuple[float, float, float]


@dataclass(frozen=True)
class Manifest:
    deployment: str
    model_version: str
    task: str
    model_path: Path
    labels: tuple[str, ...] = ()
    output: str = "logits"
    preprocessing: Preprocessing | None = None
    tokenizer_path: Path | None = None
    max_length: int = 256
    pooling: str = "mean"
    normalize: bool = True
    generation: Any = None  # generation.spec.GenerationSpec for text-generation
    team_id: int | None = None  # the owning team: API keys of other teams are refused


@dataclass(frozen=True)
class RunnerConfig:
    model_dir: Path
    host: str
    port: int
    max_batch_size: int
    max_queue_delay_ms: float
    max_queue: int
    threads: int
    max_body_bytes: int
    token: str | None
    max_queue_wait_ms: float = 2000.0
    redis_url: str | None = None  # enables API keys, rate limits, usage counters and live metrics
    replica: str = ""  # names this process in live metrics; host:port when empty
    preprocess_threads: int = 0  # 0 = sized from the cores
    spinning: bool = False  # let onnxruntime's threads busy-wait (lower latency on dedicated cores)


def preprocess_pool_size(requested: int = 0) -> int:
    """Threads for decoding: as asked, else half the cores (2 to 8); the rest is left to onnxruntime."""
    return requested or max(2, min(8, (os.cpu_count() or 2) // 2))


def _positive(kind: type, minimum: float) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m inference.runner", description="Serve one ONNX model.")
    parser.add_argument("--model-dir", required=True, type=Path, help=f"folder holding {MANIFEST_NAME}")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", default=0, type=_positive(int, 0), help="0 picks a free port")
    parser.add_argument("--max-batch-size", default=8, type=_positive(int, 1))
    parser.add_argument(
        "--max-queue-delay-ms",
        default=5.0,
        type=_positive(float, 0),
        help="how long a forming batch may wait for requests still being decoded (never when idle)",
    )
    parser.add_argument("--max-queue", default=256, type=_positive(int, 1), help="queued items before 429")
    parser.add_argument(
        "--threads", default=0, type=_positive(int, 0), help="intra-op threads; 0 = all cores"
    )
    parser.add_argument("--max-body-bytes", default=10 * 1024 * 1024, type=_positive(int, 1))
    parser.add_argument(
        "--max-queue-wait-ms",
        default=2000.0,
        type=_positive(float, 1),
        help="a request queued longer than this is dropped before inference and answered 503",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get(REDIS_ENV) or None,
        help=f"Redis for API keys, rate limits, usage and live metrics (env {REDIS_ENV})",
    )
    parser.add_argument(
        "--replica", default=os.environ.get(REPLICA_ENV, ""), help=f"replica name in metrics (env {REPLICA_ENV})"
    )
    parser.add_argument(
        "--preprocess-threads", default=0, type=_positive(int, 0), help="0 = sized from the cores"
    )
    parser.add_argument(
        "--spinning", action="store_true", help="let onnxruntime threads busy-wait (dedicated cores only)"
    )
    return parser


def parse_args(argv: list[str] | None = None) -> RunnerConfig:
    """Parse the command line; argparse itself exits with code 2 on a bad argument."""
    args = build_parser().parse_args(argv)
    if args.port > 65535:
        raise ConfigError(f"--port must be <= 65535, got {args.port}")
    return RunnerConfig(
        model_dir=args.model_dir,
        host=args.host,
        port=args.port,
        max_batch_size=args.max_batch_size,
        max_queue_delay_ms=args.max_queue_delay_ms,
        max_queue=max(args.max_queue, args.max_batch_size),
        threads=args.threads,
        max_body_bytes=args.max_body_bytes,
        token=os.environ.get(TOKEN_ENV) or None,
        max_queue_wait_ms=args.max_queue_wait_ms,
        redis_url=args.redis_url,
        replica=args.replica,
        preprocess_threads=args.preprocess_threads,
        spinning=args.spinning,
    )


def _require(data: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if key not in data:
        if default is ...:
            raise ConfigError(f"manifest: missing field {key!r}")
        return default
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"manifest: field {key!r} has the wrong type ({type(value).__name__})")
    return value


def _file_in(model_dir: Path, name: str, key: str) -> Path:
    path = (model_dir / name).resolve()
    if not path.is_relative_to(model_dir.resolve()):
        raise ConfigError(f"manifest: {key} {name!r} points outside the model directory")
    if not path.is_file():
        raise ConfigError(f"manifest: {key} {name!r} does not exist in {model_dir}")
    return path


def _numbers(value: Any, key: str, count: int) -> tuple[float, ...]:
    ok = isinstance(value, list) and len(value) == count
    if not ok or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        raise ConfigError(f"manifest: preprocessing.{key} must be a list of {count} numbers")
    return tuple(float(v) for v in value)


def _preprocessing(data: Any) -> Preprocessing:
    if not isinstance(data, dict):
        raise ConfigError("manifest: 'preprocessing' must be an object for image-classification")
    size = _numbers(data.get("input_size"), "input_size", 2)
    if not all(v == int(v) and v > 0 for v in size):
        raise ConfigError("manifest: preprocessing.input_size must be two positive integers")
    height, width = int(size[0]), int(size[1])
    shorter = data.get("resize_shorter", min(height, width))
    if not isinstance(shorter, int) or isinstance(shorter, bool) or shorter < 1:
        raise ConfigError("manifest: preprocessing.resize_shorter must be a positive integer")
    mean = _numbers(data.get("mean", [0.485, 0.456, 0.406]), "mean", 3)
    std = _numbers(data.get("std", [0.229, 0.224, 0.225]), "std", 3)
    if any(v <= 0 for v in std):
        raise ConfigError("manifest: preprocessing.std values must be > 0")
    return Preprocessing((height, width), shorter, mean, std)  # type: ignore[arg-type]


def load_manifest(model_dir: Path) -> Manifest:
    """Read and validate ``model_dir/lantau.json``; raise ConfigError with a one-line reason."""
    path = model_dir / MANIFEST_NAME
    if not model_dir.is_dir():
        raise ConfigError(f"model directory {model_dir} does not exist")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"manifest {path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"manifest {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError("manifest: top level must be an object")
    deployment = _require(data, "deployment", str)
    if not deployment.strip():
        raise ConfigError("manifest: 'deployment' must not be empty")
    task = _require(data, "task", str)
    if task not in TASKS:
        raise ConfigError(f"manifest: unsupported task {task!r} (expected one of {', '.join(TASKS)})")
    common = {
        "deployment": deployment,
        "model_version": _require(data, "model_version", str, deployment),
        "task": task,
        "model_path": _file_in(model_dir, _require(data, "model_file", str), "model_file"),
        "team_id": _require(data, "team_id", int, None),
    }
    if task == IMAGE_CLASSIFICATION:
        labels = _require(data, "labels", list, [])
        if not all(isinstance(label, str) for label in labels):
            raise ConfigError("manifest: 'labels' must be a list of strings")
        output = _require(data, "output", str, "logits")
        if output not in OUTPUTS:
            raise ConfigError(f"manifest: 'output' must be one of {', '.join(OUTPUTS)}")
        prep = _preprocessing(data.get("preprocessing"))
        return Manifest(**common, labels=tuple(labels), output=output, preprocessing=prep)
    if task == TEXT_GENERATION:
        tokenizer = _file_in(model_dir, _require(data, "tokenizer_file", str), "tokenizer_file")
        return Manifest(**common, tokenizer_path=tokenizer, generation=parse_generation(data.get("generation")))
    max_length = _require(data, "max_length", int, 256)
    if max_length < 2:
        raise ConfigError("manifest: 'max_length' must be >= 2")
    pooling = _require(data, "pooling", str, "mean")
    if pooling not in POOLINGS:
        raise ConfigError(f"manifest: 'pooling' must be one of {', '.join(POOLINGS)}")
    labels = _require(data, "labels", list, []) if task == TEXT_CLASSIFICATION else []
    if not all(isinstance(label, str) for label in labels):
        raise ConfigError("manifest: 'labels' must be a list of strings")
    return Manifest(
        **common,
        labels=tuple(labels),
        tokenizer_path=_file_in(model_dir, _require(data, "tokenizer_file", str), "tokenizer_file"),
        max_length=max_length,
        pooling=pooling,
        normalize=_require(data, "normalize", bool, True),
    )
