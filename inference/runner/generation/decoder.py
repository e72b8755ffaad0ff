"""One ONNX decoder graph with a key/value cache, driven for prefill and for decode steps.

The graph contract is the one ``inference.export.causal_lm`` writes: inputs ``input_ids``,
``attention_mask``, optional ``position_ids`` and ``past_key_values.N.key|value``; outputs
``logits`` and ``present.N.key|value``.
"""

from __future__ import annotations

import numpy as np

from ..engine import Engine, TensorSpec
from ..errors import ConfigError
from .kv_batch import KVBatch
from .spec import GenerationSpec

PAD_ID = 0  # any id works: padded positions are masked out


def cache_names(layers: int, prefix: str) -> list[str]:
    return [f"{prefix}.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]


class Decoder:
    """Turns token ids into next-token logits; ``run`` happens on the inference thread only."""

    def __init__(self, engine: Engine, spec: GenerationSpec) -> None:
        self.engine = engine
        self.spec = spec
        inputs = {s.name: s for s in engine.inputs}
        self.past_names = cache_names(spec.num_layers, "past_key_values")
        self.present_names = cache_names(spec.num_layers, "present")
        self._check_graph(inputs, [s.name for s in engine.outputs])
        self.uses_positions = "position_ids" in inputs
        self.cache_dtype = inputs[self.past_names[0]].dtype
        names = ("input_ids", "attention_mask", "position_ids")
        self._ints: dict[str, np.dtype] = {name: inputs[name].dtype for name in names if name in inputs}
        self._outputs = ["logits", *self.present_names]

    def _check_graph(self, inputs: dict[str, TensorSpec], outputs: list[str]) -> None:
        allowed = {"input_ids", "attention_mask", "position_ids", *self.past_names}
        missing = [n for n in ("input_ids", "attention_mask", *self.past_names) if n not in inputs]
        unknown = sorted(set(inputs) - allowed)
        if missing or unknown:
            raise ConfigError(
                f"text-generation graph inputs do not match the manifest: missing {missing}, unexpected "
                f"{unknown} (expected input_ids, attention_mask, position_ids, past_key_values.N.key|value)"
            )
        absent = [n for n in ("logits", *self.present_names) if n not in outputs]
        if absent:
            raise ConfigError(f"text-generation graph lacks outputs {absent}")
        shape = inputs[self.past_names[0]].shape
        want = (self.spec.num_kv_heads, self.spec.head_dim)
        for got, expected, what in zip((shape[1], shape[3]), want, ("kv heads", "head_dim"), strict=True):
            if isinstance(got, int) and got != expected:
                raise ConfigError(f"the graph's cache has {got} {what}; the manifest says {expected}")

    def _run(
        self, ids: np.ndarray, mask: np.ndarray, positions: np.ndarray, cache: list[np.ndarray]
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        feeds: dict[str, np.ndarray] = {"input_ids": ids, "attention_mask": mask}
        if self.uses_positions:
            feeds["position_ids"] = positions
        feeds = {name: value.astype(self._ints[name], copy=False) for name, value in feeds.items()}
        feeds.update(zip(self.past_names, cache, strict=True))
        logits, *present = self.engine.session.run(self._outputs, feeds)
        return logits[:, -1, :], present

    def empty_cache(self, rows: int) -> list[np.ndarray]:
        shape = (rows, self.spec.num_kv_heads, 0, self.spec.head_dim)
        return [np.zeros(shape, dtype=self.cache_dtype) for _ in self.past_names]

    def prefill(self, prompts: list[list[int]]) -> tuple[np.ndarray, KVBatch]:
        """Run the prompts left-padded in one call; return each one's last logits and its cache."""
        width = max(len(p) for p in prompts)
        ids = np.full((len(prompts), width), PAD_ID, dtype=np.int64)
        mask = np.zeros((len(prompts), width), dtype=np.int64)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt) :] = prompt
            mask[row, width - len(prompt) :] = 1
        positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
        logits, present = self._run(ids, mask, positions, self.empty_cache(len(prompts)))
        lengths = np.array([len(p) for p in prompts], dtype=np.int64)
        return logits, KVBatch(present, mask, lengths)

    def decode(self, batch: KVBatch, tokens: list[int]) -> tuple[np.ndarray, KVBatch]:
        """One step for every row: feed each row's latest token, return logits and the grown cache."""
        ids = np.asarray(tokens, dtype=np.int64)[:, None]
        mask = np.concatenate([batch.mask, np.ones((batch.rows, 1), dtype=np.int64)], axis=1)
        logits, present = self._run(ids, mask, batch.positions[:, None], batch.cache)
        return logits, batch.appended(present)
