"""Task pipelines: how one task turns inputs into model feeds and model outputs into results.

``prepare`` runs in the pre-processing pool; ``run_batch`` runs in the single inference thread
and post-processes the whole batch at once (vectorised numpy) before splitting it per item.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .config import FEATURE_EXTRACTION, TEXT_CLASSIFICATION, Manifest
from .engine import Engine
from .errors import ConfigError
from .postprocess import cls_pool, l2_normalize, mean_pool, softmax
from .preprocess import MAX_PIXELS, Encoded, ImagePreprocessor, TextTokenizer

TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _fixed_batch(engine: Engine) -> int | None:
    dim = engine.inputs[0].shape[0] if engine.inputs[0].shape else None
    return dim if isinstance(dim, int) and dim > 0 else None


class ImageClassification:
    task = "image-classification"

    def __init__(self, manifest: Manifest, engine: Engine, max_pixels: int = MAX_PIXELS) -> None:
        assert manifest.preprocessing is not None
        if len(engine.inputs) != 1 or engine.inputs[0].dtype.kind != "f":
            raise ConfigError("image model must have exactly one float input")
        spec = engine.inputs[0]
        if len(spec.shape) != 4:
            raise ConfigError(
                f"image model input {spec.name!r} must be NCHW (rank 4), got rank {len(spec.shape)}"
            )
        expected = (3, *manifest.preprocessing.input_size)
        for axis, (dim, want) in enumerate(zip(spec.shape[1:], expected, strict=True), start=1):
            if isinstance(dim, int) and dim != want:
                raise ConfigError(f"model input dim {axis} is {dim} but the manifest implies {want} (NCHW)")
        self.engine = engine
        self.input_name = spec.name
        self.prepare = ImagePreprocessor(manifest.preprocessing, spec.dtype, max_pixels)
        self.apply_softmax = manifest.output == "logits"
        self.fixed_batch = _fixed_batch(engine)
        self.labels: tuple[str, ...] = manifest.labels

    def run_batch(self, items: list[np.ndarray]) -> list[np.ndarray]:
        output = self.engine.run({self.input_name: np.stack(items)})[0]
        output = output.reshape(len(items), -1)
        scores = softmax(output) if self.apply_softmax else output.astype(np.float32)
        return list(scores)

    def warmup(self, max_batch_size: int) -> None:
        height, width = self.prepare.height, self.prepare.width
        blank: np.ndarray = np.zeros((3, height, width), dtype=self.prepare.dtype)
        classes = self.run_batch([blank])[0].shape[0]
        self.run_batch([blank] * max_batch_size)
        if not self.labels:
            self.labels = tuple(f"class_{i}" for i in range(classes))
        elif len(self.labels) != classes:
            raise ConfigError(
                f"manifest has {len(self.labels)} labels but the model outputs {classes} classes"
            )


class FeatureExtraction:
    task = FEATURE_EXTRACTION

    def __init__(self, manifest: Manifest, engine: Engine) -> None:
        assert manifest.tokenizer_path is not None
        names = [spec.name for spec in engine.inputs]
        unknown = [name for name in names if name not in TEXT_INPUTS]
        if "input_ids" not in names or unknown:
            raise ConfigError(f"text model inputs must include input_ids and only {TEXT_INPUTS}; got {names}")
        self.engine = engine
        self.feeds = [(spec.name, spec.dtype) for spec in engine.inputs]
        self.prepare = TextTokenizer(str(manifest.tokenizer_path), manifest.max_length)
        self.pooling = manifest.pooling
        self.normalize = manifest.normalize
        self.fixed_batch = _fixed_batch(engine)
        self.dimensions = 0

    def forward(self, items: list[Encoded]) -> tuple[np.ndarray, np.ndarray]:
        """Pad the batch to its own longest input, run the graph; return (first output, attention mask)."""
        longest = max(len(item) for item in items)
        ids = np.full((len(items), longest), self.prepare.pad_id, dtype=np.int64)
        types = np.zeros((len(items), longest), dtype=np.int64)
        mask = np.zeros((len(items), longest), dtype=np.int64)
        for row, item in enumerate(items):
            ids[row, : len(item)] = item.ids
            types[row, : len(item)] = item.type_ids
            mask[row, : len(item)] = 1
        arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        output = self.engine.run(
            {name: arrays[name].astype(dtype, copy=False) for name, dtype in self.feeds}
        )[0]
        return output, mask

    def run_batch(self, items: list[Encoded]) -> list[np.ndarray]:
        output, mask = self.forward(items)
        if output.ndim == 3:
            pooled = mean_pool(output, mask) if self.pooling == "mean" else cls_pool(output)
        else:  # the graph already pools (e.g. a sentence_embedding output)
            pooled = output.reshape(len(items), -1).astype(np.float32, copy=False)
        if self.normalize:
            pooled = l2_normalize(pooled)
        return list(pooled)

    def warmup(self, max_batch_size: int) -> None:
        sample = self.prepare(["warm up"])[0]
        self.dimensions = self.run_batch([sample])[0].shape[0]
        self.run_batch([sample] * max_batch_size)


class TextClassification(FeatureExtraction):
    """Tokenize and batch like embeddings; the graph's first output is [batch, classes] logits."""

    task = TEXT_CLASSIFICATION

    def __init__(self, manifest: Manifest, engine: Engine) -> None:
        super().__init__(manifest, engine)
        self.labels = manifest.labels

    def run_batch(self, items: list[Encoded]) -> list[np.ndarray]:
        logits, _ = self.forward(items)
        return list(softmax(logits.reshape(len(items), -1)))

    def warmup(self, max_batch_size: int) -> None:
        sample = self.prepare(["warm up"])[0]
        classes = self.run_batch([sample])[0].shape[0]
        self.run_batch([sample] * max_batch_size)
        if not self.labels:
            self.labels = tuple(f"class_{i}" for i in range(classes))
        elif len(self.labels) != classes:
            raise ConfigError(
                f"manifest has {len(self.labels)} labels but the model outputs {classes} classes"
            )


Pipeline = ImageClassification | FeatureExtraction | TextClassification


def build_pipeline(manifest: Manifest, engine: Engine, max_image_pixels: int = MAX_PIXELS) -> Any:
    if manifest.task == FEATURE_EXTRACTION:
        return FeatureExtraction(manifest, engine)
    if manifest.task == TEXT_CLASSIFICATION:
        return TextClassification(manifest, engine)
    return ImageClassification(manifest, engine, max_image_pixels)
