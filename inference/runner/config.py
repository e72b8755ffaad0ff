"""Command-line arguments and the model manifest (``lantau.json``), parsed into frozen dataclasses."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.generation import GenerationSpec
from contract.manifest import MANIFEST_NAME, ManifestError, ModelManifest, Preprocessing, Task
from contract.node_protocol import RUNNER_LIMITS
from contract.redis_keys import DEFAULT_PREFIX, PREFIX_ENV, RedisKeys

from .errors import ConfigError

# The runner's --device (engine.providers_for); the agent always names one.
DEVICES = ("auto", "cpu", "cuda", "tensorrt")

__all__ = [
    "MANIFEST_NAME",
    "Manifest",
    "Preprocessing",
    "RequestLimits",
    "RunnerConfig",
    "load_manifest",
    "parse_args",
]

TOKEN_ENV = "LANTAU_RUNNER_TOKEN"
REDIS_ENV = "LANTAU_REDIS_URL"
REPLICA_ENV = "LANTAU_REPLICA_ID"
IMAGE_CLASSIFICATION = Task.IMAGE_CLASSIFICATION
FEATURE_EXTRACTION = Task.FEATURE_EXTRACTION
TEXT_CLASSIFICATION = Task.TEXT_CLASSIFICATION
TEXT_GENERATION = Task.TEXT_GENERATION


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
    generation: GenerationSpec | None = None  # for text-generation
    team_id: int | None = None  # the owning team: API keys of other teams are refused
    key_verify_key: str | None = None  # the console's public key for API-key entries (contract.signing)


@dataclass(frozen=True)
class RequestLimits:
    """What one request may hold beyond its byte size; each is a ``--max-*`` flag, refused with 4xx."""

    json_depth: int = 32  # nesting of arrays and objects: 400 above
    prompt_bytes: int = 1024 * 1024  # a completion's prompt or a chat's messages, UTF-8: 413 above
    messages: int = 256  # chat messages: 422 above
    stop_strings: int = 4  # 'stop' strings: 422 above
    inputs: int = 256  # texts in one predict or embeddings request: 422 above
    image_pixels: int = 40_000_000  # width x height read from the header, before decoding: 422 above


# flag -> (RequestLimits field, help): the limits listed once in contract.node_protocol (the console sets
# them through desired replicas); ``--max-body-bytes`` is RunnerConfig's own.
LIMIT_FLAGS = {
    limit.flag: (limit.field, limit.help) for limit in RUNNER_LIMITS if limit.key != "max_body_bytes"
}


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
    redis_prefix: str = DEFAULT_PREFIX  # the install's namespace in Redis (contract.redis_keys)
    limits: RequestLimits = RequestLimits()
    device: str = "auto"  # cpu, cuda or tensorrt: the execution providers (engine.providers_for)
    trt_cache_dir: Path | None = None  # TensorRT engine cache, one per model version and GPU

    @property
    def redis_keys(self) -> RedisKeys:
        return RedisKeys(self.redis_prefix)


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
        "--redis-prefix",
        default=os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX,
        help=f"the install's Redis key prefix, as the console's (env {PREFIX_ENV}, default {DEFAULT_PREFIX})",
    )
    parser.add_argument(
        "--replica",
        default=os.environ.get(REPLICA_ENV, ""),
        help=f"replica name in metrics (env {REPLICA_ENV})",
    )
    parser.add_argument(
        "--preprocess-threads", default=0, type=_positive(int, 0), help="0 = sized from the cores"
    )
    parser.add_argument(
        "--spinning", action="store_true", help="let onnxruntime threads busy-wait (dedicated cores only)"
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=DEVICES,
        help="cpu, cuda (then CPU for missing operators) or tensorrt (then CUDA, then CPU); a GPU device "
        "this onnxruntime lacks is an error, never a silent CPU run; auto = the best available",
    )
    parser.add_argument(
        "--trt-cache-dir", type=Path, default=None, help="TensorRT engine cache folder (--device tensorrt)"
    )
    defaults = RequestLimits()
    for flag, (name, text) in LIMIT_FLAGS.items():
        parser.add_argument(
            flag, dest=name, default=getattr(defaults, name), type=_positive(int, 1), help=text
        )
    return parser


def parse_args(argv: list[str] | None = None) -> RunnerConfig:
    """Parse the command line; argparse itself exits with code 2 on a bad argument."""
    args = build_parser().parse_args(argv)
    if args.port > 65535:
        raise ConfigError(f"--port must be <= 65535, got {args.port}")
    try:
        RedisKeys(args.redis_prefix)
    except ValueError as exc:
        raise ConfigError(f"--redis-prefix: {exc}") from None
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
        redis_prefix=args.redis_prefix,
        limits=RequestLimits(**{name: getattr(args, name) for name, _ in LIMIT_FLAGS.values()}),
        device=args.device,
        trt_cache_dir=args.trt_cache_dir,
    )


def _file_in(model_dir: Path, name: str, key: str) -> Path:
    path = (model_dir / name).resolve()
    if not path.is_relative_to(model_dir.resolve()):
        raise ConfigError(f"manifest: {key} {name!r} points outside the model directory")
    if not path.is_file():
        raise ConfigError(f"manifest: {key} {name!r} does not exist in {model_dir}")
    return path


def load_manifest(model_dir: Path) -> Manifest:
    """Read and validate ``model_dir/lantau.json`` (``contract.manifest``); raise ConfigError with a one-line reason."""
    path = model_dir / MANIFEST_NAME
    if not model_dir.is_dir():
        raise ConfigError(f"model directory {model_dir} does not exist")
    try:
        wire = ModelManifest.from_json(path.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"manifest {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"manifest {path} cannot be read: {exc}") from None
    except ManifestError as exc:
        raise ConfigError(str(exc).replace("manifest is", f"manifest {path} is", 1)) from None
    tokenizer = wire.tokenizer_file
    return Manifest(
        deployment=wire.deployment,
        model_version=wire.model_version,
        task=wire.task,
        model_path=_file_in(model_dir, wire.model_file, "model_file"),
        labels=wire.labels,
        output=wire.output,
        preprocessing=wire.preprocessing,
        tokenizer_path=_file_in(model_dir, tokenizer, "tokenizer_file") if tokenizer is not None else None,
        max_length=wire.max_length,
        pooling=wire.pooling,
        normalize=wire.normalize,
        generation=wire.generation,
        team_id=wire.team_id,
        key_verify_key=wire.key_verify_key,
    )
