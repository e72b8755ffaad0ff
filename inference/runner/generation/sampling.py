"""Next-token choice: greedy at temperature 0, else temperature, top-k and top-p (nucleus) sampling."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 keeps every token
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def rng(self) -> np.random.Generator:
        """Each sequence owns its generator, so a seed reproduces whatever else is batched with it."""
        return np.random.default_rng(self.seed)


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    if 0 < k < scores.size:
        kth = np.partition(scores, -k)[-k]
        scores = np.where(scores < kth, -np.inf, scores)
    return scores


def _top_p(probs: np.ndarray, p: float) -> np.ndarray:
    """Keep the smallest set of most likely tokens whose mass reaches ``p`` (at least one)."""
    if p >= 1.0:
        return probs
    order = np.argsort(-probs, kind="stable")
    sorted_probs = probs[order]
    before = np.cumsum(sorted_probs) - sorted_probs  # mass of the tokens ranked above each one
    kept = np.zeros_like(probs)
    keep = order[before < p]
    kept[keep] = probs[keep]
    return kept


def sample(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """Pick one token id from one row of logits."""
    if params.temperature == 0:
        return int(np.argmax(logits))
    scores = _top_k(logits.astype(np.float64) / params.temperature, params.top_k)
    probs = np.exp(scores - np.max(scores))
    probs = _top_p(probs / probs.sum(), params.top_p)
    cumulative = np.cumsum(probs)
    choice = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return min(choice, probs.size - 1)
