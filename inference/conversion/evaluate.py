"""Agreement between a parent model and a converted child on the same inputs.

Classifiers: top-1 agreement (all inputs, and where the parent is confident), parent's top-1 in the
child's top-5. Embeddings: cosine similarity of the pooled, normalised vectors the runner serves.
Generators: next-token agreement and the change in perplexity.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inference.conversion import datasets
from inference.conversion.sessions import open_session, text_feeds
from inference.conversion.steps import Cancelled, JobCancelled, Progress, Steps
from inference.runner.postprocess import l2_normalize, mean_pool, softmax

if TYPE_CHECKING:
    import onnxruntime as ort  # untyped (no stubs): its classes are Any to mypy

BATCH = 8
CONFIDENT = 0.5


def evaluate(
    parent_path: Path,
    child_path: Path,
    task: str,
    dataset: Path | None = None,
    *,
    preprocessing: dict[str, Any] | None = None,
    tokenizer: Path | None = None,
    limit: int = 256,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
) -> dict[str, Any]:
    """Run both models on the task's validation inputs (``dataset``: image folder or text file) and compare."""
    step = Steps(progress, cancelled)
    step(0, "loading the validation inputs")
    if task == "image-classification":
        if preprocessing is None:
            raise ValueError("evaluating an image model needs its preprocessing")
        images = (
            datasets.validation_images() if dataset is None else datasets.calibration_images(dataset, limit)
        )
        inputs: dict[str, np.ndarray] = {"pixels": datasets.image_arrays(images, preprocessing)}
    elif task in ("feature-extraction", "text-classification", "text-generation"):
        if tokenizer is None:
            raise ValueError(f"evaluating a {task} model needs its tokenizer.json")
        inputs = datasets.text_arrays(tokenizer, datasets.text_lines(dataset, limit))
    else:
        raise ValueError(f"unknown task {task!r}")
    step(10, "running the parent model")
    parent = _outputs(parent_path, inputs, step)
    step(55, "running the converted model")
    child = _outputs(child_path, inputs, step)
    step(95, "comparing")
    metrics: Mapping[str, float | None]
    if task in ("image-classification", "text-classification"):
        metrics = classifier_agreement(parent, child)
    elif task == "feature-extraction":
        mask = inputs["attention_mask"]
        metrics = embedding_similarity(_pooled(parent, mask), _pooled(child, mask))
    else:
        metrics = generator_agreement(parent, child, inputs["input_ids"], inputs["attention_mask"])
    step.progress(100, "done")
    return {
        "task": task,
        "count": int(parent.shape[0]),
        "dataset": str(dataset) if dataset else "built-in",
        **metrics,
    }


def _outputs(path: Path, inputs: dict[str, np.ndarray], step: Steps) -> np.ndarray:
    session = open_session(path)
    outputs: list[np.ndarray] = []
    for batch in datasets.batches(inputs, BATCH):
        if step.cancelled():
            raise JobCancelled("cancelled during evaluation")
        if "pixels" in batch:
            feeds = {session.get_inputs()[0].name: batch["pixels"].astype(_image_dtype(session), copy=False)}
        else:
            feeds = text_feeds(session, batch)
        outputs.append(session.run(None, feeds)[0].astype(np.float32))
    return np.concatenate(outputs)


def _image_dtype(session: ort.InferenceSession) -> type[np.floating[Any]]:
    return np.float16 if session.get_inputs()[0].type == "tensor(float16)" else np.float32


def _pooled(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    pooled = mean_pool(hidden, mask) if hidden.ndim == 3 else hidden.reshape(hidden.shape[0], -1)
    return l2_normalize(pooled)


def classifier_agreement(
    parent_logits: np.ndarray, child_logits: np.ndarray
) -> dict[str, float | int | None]:
    parent, child = softmax(parent_logits), softmax(child_logits)
    parent_top1, child_top1 = parent.argmax(axis=1), child.argmax(axis=1)
    agree = parent_top1 == child_top1
    confident = parent.max(axis=1) >= CONFIDENT
    k = min(5, child.shape[1])
    child_top5 = np.argpartition(-child, k - 1, axis=1)[:, :k]
    in_top5 = (child_top5 == parent_top1[:, None]).any(axis=1)
    return {
        "top1_agreement": float(agree.mean()),
        "confident_top1_agreement": float(agree[confident].mean()) if confident.any() else None,
        "confident_count": int(confident.sum()),
        "parent_top1_in_child_top5": float(in_top5.mean()),
        "max_probability_change": float(np.abs(parent - child).max()),
    }


def embedding_similarity(parent: np.ndarray, child: np.ndarray) -> dict[str, float]:
    cosine = (l2_normalize(parent) * l2_normalize(child)).sum(axis=1)
    return {
        "mean_cosine": float(cosine.mean()),
        "min_cosine": float(cosine.min()),
        "p05_cosine": float(np.percentile(cosine, 5)),
    }


def generator_agreement(
    parent: np.ndarray, child: np.ndarray, ids: np.ndarray, mask: np.ndarray
) -> dict[str, float]:
    """Logits [batch, tokens, vocab]: next-token argmax agreement and perplexity on the texts themselves."""
    valid = mask[:, 1:].astype(bool)  # position t predicts token t+1
    agree = parent[:, :-1].argmax(-1) == child[:, :-1].argmax(-1)
    parent_ppl, child_ppl = _perplexity(parent, ids, valid), _perplexity(child, ids, valid)
    return {
        "next_token_agreement": float(agree[valid].mean()),
        "parent_perplexity": parent_ppl,
        "child_perplexity": child_ppl,
        "perplexity_change": child_ppl / parent_ppl - 1.0,
    }


def _perplexity(logits: np.ndarray, ids: np.ndarray, valid: np.ndarray) -> float:
    shifted = logits[:, :-1] - logits[:, :-1].max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    target = np.take_along_axis(log_probs, ids[:, 1:, None], axis=-1)[..., 0]
    return float(np.exp(-target[valid].mean()))
