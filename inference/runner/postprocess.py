"""Vectorised post-processing: softmax and top-k for classifiers, pooling for embeddings."""

from __future__ import annotations

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise, numerically stable softmax in float32."""
    logits = logits.astype(np.float32, copy=False)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    probabilities: np.ndarray = exp / exp.sum(axis=-1, keepdims=True)
    return probabilities


def top_k(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k best (index, score) pairs of one row, best first."""
    k = min(k, scores.shape[-1])
    if k < scores.shape[-1]:
        best = np.argpartition(scores, -k)[-k:]
    else:
        best = np.arange(scores.shape[-1])
    best = best[np.argsort(-scores[best], kind="stable")]
    return [(int(i), float(scores[i])) for i in best]


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Average the token vectors where the attention mask is 1: [b, s, h] x [b, s] -> [b, h]."""
    weights = mask.astype(np.float32)[:, :, None]
    summed = (hidden.astype(np.float32, copy=False) * weights).sum(axis=1)
    counts = np.clip(weights.sum(axis=1), 1e-9, None)
    pooled: np.ndarray = summed / counts
    return pooled


def cls_pool(hidden: np.ndarray) -> np.ndarray:
    return hidden[:, 0, :].astype(np.float32, copy=False)


def l2_normalize(vectors: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    normalized: np.ndarray = vectors / np.maximum(norms, eps)
    return normalized
