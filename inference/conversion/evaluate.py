"""Agreement between a parent model and a converted child on the same inputs.

Classifiers: top-1 agreement (all inputs, and where the parent is confident), parent's top-1 in the
child's top-5. Embeddings: cosine similarity of the pooled, normalised vectors the runner serves.
Generators: next-token agreement and the change in perplexity. With a labelled set and the model's
label list, classifiers also report top-1/top-5 accuracy of both and the drop in points, and the
examples where the child's top-1 differs from the parent's (``disagreements``, capped).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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
DISAGREEMENTS_LISTED = 200  # examples a report lists; the counts cover them all
CLASSIFIERS = ("image-classification", "text-classification")


@dataclass
class Validation:
    """Model-ready inputs with an id per item (file name or text line) and its label, if the set has them."""

    inputs: dict[str, np.ndarray]
    ids: list[str]
    labels: list[str | None]


def evaluate(
    parent_path: Path,
    child_path: Path,
    task: str,
    dataset: Path | None = None,
    *,
    preprocessing: dict[str, Any] | None = None,
    tokenizer: Path | None = None,
    labels: list[str] | None = None,
    limit: int = 256,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
) -> dict[str, Any]:
    """Run both models on the task's validation inputs (``dataset``: image folder or text file) and compare.

    ``labels``: the model's label list; with a labelled set, accuracy is measured against it too.
    """
    step = Steps(progress, cancelled)
    step(0, "loading the validation inputs")
    valset = validation_set(task, dataset, preprocessing=preprocessing, tokenizer=tokenizer, limit=limit)
    step(10, "running the parent model")
    parent = model_outputs(parent_path, valset.inputs, step)
    step(55, "running the converted model")
    child = model_outputs(child_path, valset.inputs, step)
    step(95, "comparing")
    metrics = compare_outputs(task, parent, child, valset.inputs)
    step.progress(100, "done")
    found = {
        "task": task,
        "count": int(parent.shape[0]),
        "dataset": str(dataset) if dataset else "built-in",
        **metrics,
        **labelled_accuracy(task, parent, child, valset.labels, labels),
    }
    if task in CLASSIFIERS:
        found["disagreements"] = disagreements(parent, child, valset, labels)
    return found


def validation_inputs(
    task: str,
    dataset: Path | None = None,
    *,
    preprocessing: dict[str, Any] | None = None,
    tokenizer: Path | None = None,
    limit: int = 256,
) -> dict[str, np.ndarray]:
    """The task's validation inputs as model-ready arrays: ``dataset`` (image folder or text file) or built-in."""
    return validation_set(task, dataset, preprocessing=preprocessing, tokenizer=tokenizer, limit=limit).inputs


def validation_set(
    task: str,
    dataset: Path | None = None,
    *,
    preprocessing: dict[str, Any] | None = None,
    tokenizer: Path | None = None,
    limit: int = 256,
) -> Validation:
    """The task's validation inputs with their ids and labels: ``dataset`` (image folder or text file) or built-in."""
    if task == "image-classification":
        if preprocessing is None:
            raise ValueError("evaluating an image model needs its preprocessing")
        images = (
            datasets.builtin_validation() if dataset is None else datasets.load_image_folder(dataset, limit)
        )
        pixels = datasets.image_arrays(images.images, preprocessing)
        return Validation({"pixels": pixels}, images.ids, images.labels)
    if task in ("feature-extraction", "text-classification", "text-generation"):
        if tokenizer is None:
            raise ValueError(f"evaluating a {task} model needs its tokenizer.json")
        texts = datasets.text_set(dataset, limit)
        return Validation(datasets.text_arrays(tokenizer, texts.texts), texts.ids, texts.labels)
    raise ValueError(f"unknown task {task!r}")


def compare_outputs(
    task: str, parent: np.ndarray, child: np.ndarray, inputs: dict[str, np.ndarray]
) -> Mapping[str, float | int | None]:
    """The task's agreement figures between two models' outputs on the same ``inputs``."""
    if task in ("image-classification", "text-classification"):
        return classifier_agreement(parent, child)
    if task == "feature-extraction":
        mask = inputs["attention_mask"]
        return embedding_similarity(_pooled(parent, mask), _pooled(child, mask))
    return generator_agreement(parent, child, inputs["input_ids"], inputs["attention_mask"])


def model_outputs(path: Path, inputs: dict[str, np.ndarray], step: Steps) -> np.ndarray:
    """The first output of the model at ``path`` on ``inputs``, in batches of ``BATCH``."""
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


def label_indices(truth: list[str | None], classes: list[str]) -> np.ndarray:
    """Each item's class index in ``classes`` (matched case-insensitively); -1 where unlabelled or unknown."""
    index: dict[str, int] = {}
    for number, name in enumerate(classes):
        index.setdefault(name.casefold(), number)
    return np.array([-1 if t is None else index.get(t.casefold(), -1) for t in truth], dtype=np.int64)


def labelled_accuracy(
    task: str,
    parent_logits: np.ndarray,
    child_logits: np.ndarray,
    truth: list[str | None],
    classes: list[str] | None,
) -> dict[str, Any]:
    """Top-1/top-5 accuracy of both models on the labelled items, and the drop in points; {} without labels.

    ValueError when the set is labelled but none of its labels is one of the model's.
    """
    if task not in CLASSIFIERS or not classes or not any(t is not None for t in truth):
        return {}
    target = label_indices(truth, classes)
    known = target >= 0
    if not known.any():
        named = sorted({t for t in truth if t is not None})
        raise ValueError(
            f"none of the dataset's labels ({_few(named)}) is one of the model's {len(classes)} labels "
            f"({_few(classes)}); labels are matched case-insensitively"
        )
    figures = {side: _top_k_accuracy(logits[known], target[known]) for side, logits in
               (("parent", parent_logits), ("child", child_logits))}  # fmt: skip
    drop = (figures["parent"]["top1_accuracy"] - figures["child"]["top1_accuracy"]) * 100
    return {
        "accuracy": {
            **figures,
            "labelled_count": int(known.sum()),
            "unknown_label_count": int(sum(t is not None for t in truth) - known.sum()),
        },
        "accuracy_drop": round(float(drop), 4),
    }


def _top_k_accuracy(logits: np.ndarray, target: np.ndarray) -> dict[str, float]:
    k = min(5, logits.shape[1])
    top = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    return {
        "top1_accuracy": float((logits.argmax(axis=1) == target).mean()),
        "top5_accuracy": float((top == target[:, None]).any(axis=1).mean()),
    }


def _few(names: list[str], shown: int = 5) -> str:
    more = f", ... {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(repr(n) for n in names[:shown]) + more


def disagreements(
    parent_logits: np.ndarray, child_logits: np.ndarray, valset: Validation, classes: list[str] | None
) -> dict[str, Any]:
    """Items where the child's top-1 differs from the parent's (the first ``DISAGREEMENTS_LISTED``), and
    per-class counts when the set is labelled."""
    parent, child = softmax(parent_logits), softmax(child_logits)
    parent_top1, child_top1 = parent.argmax(axis=1), child.argmax(axis=1)
    differ = np.flatnonzero(parent_top1 != child_top1)
    names = list(classes or [])

    def name(index: int) -> str:
        return names[index] if index < len(names) else str(index)

    items = [
        {
            "id": valset.ids[i],
            "parent": {"label": name(int(parent_top1[i])), "probability": round(float(parent[i].max()), 4)},
            "child": {"label": name(int(child_top1[i])), "probability": round(float(child[i].max()), 4)},
            "true_label": valset.labels[i],
        }
        for i in differ[:DISAGREEMENTS_LISTED]
    ]
    found: dict[str, Any] = {"count": int(differ.size), "of": int(parent.shape[0]), "items": items}
    if any(label is not None for label in valset.labels):
        found["per_class"] = _per_class(
            valset.labels, parent_top1, child_top1, label_indices(valset.labels, names)
        )
    return found


def _per_class(
    truth: list[str | None], parent_top1: np.ndarray, child_top1: np.ndarray, target: np.ndarray
) -> dict[str, dict[str, int]]:
    """Per true label: items, items where the two disagree and, when the model's labels are known, how many
    each answered right (0 for a label the model lacks)."""
    scored = bool((target >= 0).any())
    counts: dict[str, dict[str, int]] = {}
    for i, label in enumerate(truth):
        if label is None:
            continue
        row = counts.setdefault(label, {"count": 0, "disagreements": 0})
        row["count"] += 1
        row["disagreements"] += int(parent_top1[i] != child_top1[i])
        if scored:
            row["parent_correct"] = row.get("parent_correct", 0) + int(parent_top1[i] == target[i])
            row["child_correct"] = row.get("child_correct", 0) + int(child_top1[i] == target[i])
    return dict(sorted(counts.items()))
