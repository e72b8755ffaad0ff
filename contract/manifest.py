"""The model manifest, ``lantau.json``: what a runner loads from its model folder.

Producers build a ``ModelManifest`` and write ``to_json()``: the console (``inference.services.nodes``,
sent to node agents in each desired replica), the node agent (adds labels, writes the file), the
causal-LM exporter (``inference.export.causal_lm``) and the benchmark (``bench.assets``). The runner
reads it with ``from_json()`` (``inference.runner.config.load_manifest``), then resolves the file names
inside its folder. Both directions validate and raise ``ManifestError`` with a one-line reason.

Fields: ``deployment``, ``task``, ``model_file`` (required), ``model_version`` (default: the deployment),
``team_id`` (API keys of other teams are refused), ``key_verify_key`` (the console's Ed25519 public key
that API-key cache entries must be signed with, ``contract.signing``; without it keys are refused); image classifiers add ``labels``, ``output``
(logits|probabilities), ``preprocessing``; text models add ``tokenizer_file`` and ``max_length``,
``pooling`` (mean|cls), ``normalize`` (and ``labels`` for text-classification); generators add
``tokenizer_file`` and ``generation`` (see ``contract.generation``). Unknown fields are ignored on read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from contract.generation import GenerationSpec, ManifestError

__all__ = ["MANIFEST_NAME", "ManifestError", "ModelManifest", "Preprocessing", "Task"]

MANIFEST_NAME = "lantau.json"
POOLINGS = ("mean", "cls")
OUTPUTS = ("logits", "probabilities")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_MISSING: Any = object()


class Task(StrEnum):
    IMAGE_CLASSIFICATION = "image-classification"
    FEATURE_EXTRACTION = "feature-extraction"
    TEXT_CLASSIFICATION = "text-classification"
    TEXT_GENERATION = "text-generation"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers(value: Any, key: str, count: int) -> tuple[float, ...]:
    ok = isinstance(value, list | tuple) and len(value) == count
    if not ok or not all(_is_number(v) for v in value):
        raise ManifestError(f"manifest: preprocessing.{key} must be a list of {count} numbers")
    return tuple(float(v) for v in value)


@dataclass(frozen=True)
class Preprocessing:
    """Resize the shorter side, centre-crop to ``input_size`` (height, width), normalise on the 0..1 scale."""

    input_size: tuple[int, int]
    resize_shorter: int
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    def __post_init__(self) -> None:
        size = _numbers(self.input_size, "input_size", 2)
        if not all(v == int(v) and v > 0 for v in size):
            raise ManifestError("manifest: preprocessing.input_size must be two positive integers")
        shorter = self.resize_shorter
        if not isinstance(shorter, int) or isinstance(shorter, bool) or shorter < 1:
            raise ManifestError("manifest: preprocessing.resize_shorter must be a positive integer")
        if any(v <= 0 for v in _numbers(self.std, "std", 3)):
            raise ManifestError("manifest: preprocessing.std values must be > 0")
        object.__setattr__(self, "input_size", (int(size[0]), int(size[1])))
        object.__setattr__(self, "mean", _numbers(self.mean, "mean", 3))
        object.__setattr__(self, "std", _numbers(self.std, "std", 3))

    def to_dict(self) -> dict[str, Any]:
        return {"input_size": list(self.input_size), "resize_shorter": self.resize_shorter,
                "mean": list(self.mean), "std": list(self.std)}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Any) -> Preprocessing:
        if not isinstance(data, dict):
            raise ManifestError("manifest: 'preprocessing' must be an object for image-classification")
        size = _numbers(data.get("input_size"), "input_size", 2)
        if not all(v == int(v) and v > 0 for v in size):
            raise ManifestError("manifest: preprocessing.input_size must be two positive integers")
        return cls(
            input_size=(int(size[0]), int(size[1])),
            resize_shorter=data.get("resize_shorter", int(min(size))),
            mean=data.get("mean", list(IMAGENET_MEAN)),
            std=data.get("std", list(IMAGENET_STD)),
        )


def _field(data: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = _MISSING) -> Any:
    if key not in data:
        if default is _MISSING:
            raise ManifestError(f"manifest: missing field {key!r}")
        return default
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ManifestError(f"manifest: field {key!r} has the wrong type ({type(value).__name__})")
    return value


def _strings(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ManifestError(f"manifest: {key!r} must be a list of strings")
    return tuple(value)


@dataclass(frozen=True)
class ModelManifest:
    deployment: str
    task: str
    model_file: str = "model.onnx"
    model_version: str = ""  # empty: the deployment name
    team_id: int | None = None
    key_verify_key: str | None = None  # contract.signing.public_key_text of the console's signing key
    labels: tuple[str, ...] = ()
    output: str = "logits"
    preprocessing: Preprocessing | None = None
    tokenizer_file: str | None = None
    max_length: int = 256
    pooling: str = "mean"
    normalize: bool = True
    generation: GenerationSpec | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.deployment, str) or not self.deployment.strip():
            raise ManifestError("manifest: 'deployment' must not be empty")
        if self.task not in tuple(Task):
            raise ManifestError(
                f"manifest: unsupported task {self.task!r} (expected one of {', '.join(Task)})"
            )
        if not isinstance(self.model_file, str) or not self.model_file:
            raise ManifestError("manifest: 'model_file' must name a file")
        if not isinstance(self.model_version, str):
            raise ManifestError("manifest: 'model_version' must be a string")
        if self.team_id is not None and (not isinstance(self.team_id, int) or isinstance(self.team_id, bool)):
            raise ManifestError("manifest: 'team_id' must be an integer")
        if self.key_verify_key is not None and not isinstance(self.key_verify_key, str):
            raise ManifestError("manifest: 'key_verify_key' must be a string")
        object.__setattr__(self, "task", Task(self.task))
        object.__setattr__(self, "model_version", self.model_version or self.deployment)
        object.__setattr__(self, "labels", _strings(self.labels, "labels"))
        self._check_task_fields()

    def _check_task_fields(self) -> None:
        if self.task == Task.IMAGE_CLASSIFICATION:
            if self.output not in OUTPUTS:
                raise ManifestError(f"manifest: 'output' must be one of {', '.join(OUTPUTS)}")
            if not isinstance(self.preprocessing, Preprocessing):
                raise ManifestError("manifest: 'preprocessing' must be an object for image-classification")
            return
        if not isinstance(self.tokenizer_file, str) or not self.tokenizer_file:
            raise ManifestError(f"manifest: 'tokenizer_file' is required for {self.task}")
        if self.task == Task.TEXT_GENERATION:
            if not isinstance(self.generation, GenerationSpec):
                raise ManifestError("manifest: 'generation' must be an object for text-generation")
            return
        if not isinstance(self.max_length, int) or isinstance(self.max_length, bool) or self.max_length < 2:
            raise ManifestError("manifest: 'max_length' must be >= 2")
        if self.pooling not in POOLINGS:
            raise ManifestError(f"manifest: 'pooling' must be one of {', '.join(POOLINGS)}")
        if not isinstance(self.normalize, bool):
            raise ManifestError("manifest: 'normalize' must be true or false")

    def to_dict(self) -> dict[str, Any]:
        """The JSON object; only the fields this task uses."""
        out: dict[str, Any] = {"deployment": self.deployment, "model_version": self.model_version,
                               "task": str(self.task), "model_file": self.model_file}  # fmt: skip
        if self.team_id is not None:
            out["team_id"] = self.team_id
        if self.key_verify_key is not None:
            out["key_verify_key"] = self.key_verify_key
        if self.task == Task.IMAGE_CLASSIFICATION:
            assert self.preprocessing is not None
            if (
                self.labels
            ):  # absent: the agent adds the version's labels file, else the runner numbers classes
                out["labels"] = list(self.labels)
            return out | {"output": self.output, "preprocessing": self.preprocessing.to_dict()}
        out["tokenizer_file"] = self.tokenizer_file
        if self.task == Task.TEXT_GENERATION:
            assert self.generation is not None
            return out | {"generation": self.generation.to_dict()}
        out |= {"max_length": self.max_length, "pooling": self.pooling, "normalize": self.normalize}
        if self.task == Task.TEXT_CLASSIFICATION and self.labels:
            out["labels"] = list(self.labels)
        return out

    def to_json(self, *, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Any) -> ModelManifest:
        """Validate a decoded manifest; raise ManifestError with a one-line reason."""
        if not isinstance(data, dict):
            raise ManifestError("manifest: top level must be an object")
        deployment = _field(data, "deployment", str)
        task = _field(data, "task", str)
        common = {"deployment": deployment, "task": task, "model_file": _field(data, "model_file", str),
                  "model_version": _field(data, "model_version", str, deployment),
                  "team_id": _field(data, "team_id", int, None),
                  "key_verify_key": _field(data, "key_verify_key", str, None)}  # fmt: skip
        if task not in tuple(Task):
            return cls(**common)  # refused by the constructor with the usual message
        if task == Task.IMAGE_CLASSIFICATION:
            return cls(**common, labels=_field(data, "labels", list, []), output=_field(data, "output", str, "logits"),
                       preprocessing=Preprocessing.from_dict(data.get("preprocessing")))  # fmt: skip
        tokenizer = _field(data, "tokenizer_file", str)
        if task == Task.TEXT_GENERATION:
            return cls(
                **common,
                tokenizer_file=tokenizer,
                generation=GenerationSpec.from_dict(data.get("generation")),
            )
        labels: Any = _field(data, "labels", list, []) if task == Task.TEXT_CLASSIFICATION else ()
        return cls(**common, tokenizer_file=tokenizer, labels=labels, max_length=_field(data, "max_length", int, 256),
                   pooling=_field(data, "pooling", str, "mean"), normalize=_field(data, "normalize", bool, True))  # fmt: skip

    @classmethod
    def from_json(cls, text: str | bytes) -> ModelManifest:
        try:
            data = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ManifestError(f"manifest is not valid JSON: {exc}") from None
        return cls.from_dict(data)
