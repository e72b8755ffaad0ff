"""onnxruntime sessions and the feeds each task's graphs expect (text inputs, empty KV caches)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnxruntime as ort  # untyped (no stubs): its classes are Any to mypy

_NP: dict[str, type[np.generic]] = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


def open_session(path: Path, threads: int = 0) -> ort.InferenceSession:
    """A CPU session; ``threads`` 0 lets onnxruntime use every core of the worker."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def input_dtype(session: ort.InferenceSession, name: str) -> type[np.generic]:
    spec = next(i for i in session.get_inputs() if i.name == name)
    return _NP.get(spec.type, np.float32)


def text_feeds(session: ort.InferenceSession, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's own text inputs from tokenized arrays; empty past key/values for cached decoders."""
    feeds: dict[str, np.ndarray] = {}
    batch, length = arrays["input_ids"].shape
    for spec in session.get_inputs():
        if spec.name in arrays:
            feeds[spec.name] = arrays[spec.name].astype(_NP.get(spec.type, np.int64), copy=False)
        elif spec.name == "position_ids":
            feeds[spec.name] = np.broadcast_to(np.arange(length, dtype=np.int64), (batch, length)).copy()
        elif spec.name.startswith("past"):
            feeds[spec.name] = _empty_past(spec, batch)
        else:
            raise ValueError(f"cannot feed model input {spec.name!r} from text")
    return feeds


def _empty_past(spec: ort.NodeArg, batch: int) -> np.ndarray:
    # [batch, heads, 0, head_dim]: a cache holding no tokens yet; fixed dims come from the graph.
    dims = [d if isinstance(d, int) else 0 for d in spec.shape]
    if len(dims) != 4 or dims[1] == 0 or dims[3] == 0:
        raise ValueError(f"cannot build an empty cache for {spec.name!r} of shape {spec.shape}")
    return np.zeros((batch, dims[1], 0, dims[3]), dtype=_NP.get(spec.type, np.float32))


def synthetic_feeds(
    session: ort.InferenceSession, batch: int, sequence_length: int = 32, seed: int = 0
) -> dict[str, np.ndarray]:
    """Inputs of the right shape and type for timing: normal noise for images, random ids for text."""
    rng = np.random.default_rng(seed)
    inputs = session.get_inputs()
    if "input_ids" not in {spec.name for spec in inputs}:
        spec = inputs[0]
        shape = [batch] + [d if isinstance(d, int) else 224 for d in spec.shape[1:]]
        return {spec.name: rng.standard_normal(shape).astype(_NP.get(spec.type, np.float32))}
    ids = rng.integers(3, 40, size=(batch, sequence_length), dtype=np.int64)  # valid in any vocabulary
    arrays = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    return text_feeds(session, arrays)
