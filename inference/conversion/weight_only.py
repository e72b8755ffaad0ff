"""Weight-only INT4/INT8 quantization of causal language models, and their decode speed.

onnxruntime's MatMul n-bits quantizer replaces every MatMul whose second input is a constant weight
with a ``MatMulNBits`` node (com.microsoft) holding block-wise quantized weights: each run of
``block_size`` values along K gets its own scale (and zero point unless symmetric). Activations stay
in float, so no calibration data is needed. The embedding table (a Gather) stays in float.

A block longer than a weight's K would be padded with zeros, so the block is halved (down to 16)
until it fits the smallest K: tiny test models are quantized for real, and the report gives both the
requested and the block size used. It counts the nodes converted; a model with none is refused.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inference.conversion.graph import model_report
from inference.conversion.sessions import open_session
from inference.conversion.steps import Cancelled, JobCancelled, Progress, Steps, job_steps

if TYPE_CHECKING:
    import onnxruntime as ort  # untyped (no stubs): its classes are Any to mypy

BITS = (4, 8)
BLOCK_SIZES = (16, 32, 64, 128, 256)
QUANTIZED_OP = "MatMulNBits"


def quantize_weight_only(
    src: Path,
    dst: Path,
    *,
    bits: int = 4,
    block_size: int = 32,
    symmetric: bool = True,
    accuracy_level: int | None = None,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
) -> dict[str, Any]:
    """Write ``dst``: ``src`` with its constant MatMul weights in ``bits`` bits, blocks of ``block_size``."""
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}")
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"block_size must be one of {BLOCK_SIZES}")
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    # The quantizer logs every node at INFO through a root handler it installs; keep the job log readable.
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    with job_steps(dst, progress, cancelled) as step:
        step(5, "loading the model")
        model = onnx.load(str(src))
        weights = matmul_weights(model)
        block = effective_block_size(model, block_size)
        step(20, f"quantizing {len(weights)} MatMul weights to {bits} bits in blocks of {block}")
        quantizer = MatMulNBitsQuantizer(
            model, bits=bits, block_size=block, is_symmetric=symmetric, accuracy_level=accuracy_level
        )
        quantizer.process()
        quantized = quantizer.model.model
        converted = sum(1 for node in quantized.graph.node if node.op_type == QUANTIZED_OP)
        if converted == 0:
            raise ValueError("the model has no MatMul with a constant weight to quantize")
        step(80, "saving")
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        onnx.save_model(quantized, str(dst))
        options = {
            "bits": bits,
            "block_size": block,
            "requested_block_size": block_size,
            "symmetric": symmetric,
            "accuracy_level": accuracy_level,
            "quantized_nodes": converted,
            "float_matmuls": len(weights) - converted,
        }
        report = model_report(Path(dst), precision=f"int{bits}", options=options)
    return report | {"weight_only": True}


def quantize_and_compare(
    src: Path,
    dst: Path,
    *,
    tokenizer: Path,
    texts: Path | None = None,
    limit: int = 64,
    options: dict[str, Any],
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
) -> dict[str, Any]:
    """Quantize ``src`` to ``dst``, then compare them: size, decode tokens per second and perplexity.

    ``texts`` is a file of one text per line (a team's dataset); unset: the built-in sentences.
    """
    from inference.conversion.evaluate import evaluate

    def part(low: float, high: float) -> Progress:
        report = progress or (lambda percent, message: None)
        return lambda percent, message: report(low + (high - low) * percent / 100, message)

    conversion = quantize_weight_only(src, dst, **options, progress=part(0, 40), cancelled=cancelled)
    before, after = _size(Path(src)), int(conversion["size_bytes"])
    agreement = evaluate(
        Path(src),
        Path(dst),
        "text-generation",
        texts,
        tokenizer=tokenizer,
        limit=limit,
        progress=part(40, 70),
        cancelled=cancelled,
    )
    speed = compare_decode_speed(Path(src), Path(dst), progress=part(70, 100), cancelled=cancelled)
    size = {"before_bytes": before, "after_bytes": after, "ratio": after / before}
    return {"conversion": conversion, "size": size, "agreement": agreement, "speed": speed}


def _size(path: Path) -> int:
    return path.stat().st_size + sum(p.stat().st_size for p in path.parent.glob(path.name + ".*data"))


def effective_block_size(model: Any, block_size: int) -> int:
    """``block_size``, or less when a weight's K is smaller: a block longer than K is padded with zeros,
    which costs space and gains nothing (tiny models; real language models have K in the thousands)."""
    initializers = {t.name: t for t in model.graph.initializer}
    ks = [
        int(initializers[n.input[1]].dims[0])
        for n in model.graph.node
        if n.op_type == "MatMul" and n.input[1] in initializers and len(initializers[n.input[1]].dims) == 2
    ]
    block = block_size
    while ks and block > BLOCK_SIZES[0] and block > min(ks):
        block //= 2
    return block


def matmul_weights(model: Any) -> list[str]:
    """Names of MatMul nodes whose second input is an initializer (what the quantizer converts)."""
    initializers = {t.name for t in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in initializers]


def count_ops(path: Path, op_type: str) -> int:
    """How many nodes of ``op_type`` the graph holds (tests and reports check MatMulNBits exist)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return sum(1 for node in graph.node if node.op_type == op_type)


def compare_decode_speed(
    parent: Path,
    child: Path,
    *,
    prompt_tokens: int = 16,
    new_tokens: int = 32,
    rounds: int = 3,
    threads: int = 0,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
) -> dict[str, Any]:
    """Greedy decode of ``new_tokens`` after a ``prompt_tokens`` prefill, both models in alternating rounds.

    Tokens per second is the best round's (the least disturbed on a shared CPU); batch 1, as one chat.
    """
    step = Steps(progress, cancelled)
    decoders = [_CachedDecoder(open_session(path, threads)) for path in (parent, child)]
    best = [0.0, 0.0]
    for index in range(rounds):
        step(100 * index / rounds, f"decoding round {index + 1} of {rounds}")
        for which, decoder in enumerate(decoders):
            if step.cancelled():
                raise JobCancelled("cancelled while timing generation")
            best[which] = max(best[which], decoder.tokens_per_second(prompt_tokens, new_tokens))
    step.progress(100, "done")
    return {
        "prompt_tokens": prompt_tokens,
        "new_tokens": new_tokens,
        "batch": 1,
        "parent_tokens_per_s": best[0],
        "child_tokens_per_s": best[1],
        "speedup": best[1] / best[0] if best[0] else None,
    }


class _CachedDecoder:
    """Drives the project's cached decoder graph (``inference.export.causal_lm``) greedily."""

    def __init__(self, session: ort.InferenceSession) -> None:
        self.session = session
        self.inputs = {spec.name: spec for spec in session.get_inputs()}
        self.past = [name for name in self.inputs if name.startswith("past_key_values.")]
        outputs = [spec.name for spec in session.get_outputs()]
        if "logits" not in outputs or not self.past:
            raise ValueError("not a cached decoder graph (needs logits and past_key_values.N inputs)")
        self.present = ["present." + name.removeprefix("past_key_values.") for name in self.past]
        self.outputs = ["logits", *self.present]

    def _empty(self, name: str) -> np.ndarray:
        dims = [d if isinstance(d, int) else 0 for d in self.inputs[name].shape]
        dtype = np.float16 if self.inputs[name].type == "tensor(float16)" else np.float32
        return np.zeros((1, dims[1], 0, dims[3]), dtype=dtype)

    def _step(self, ids: np.ndarray, start: int, cache: list[np.ndarray]) -> tuple[int, list[np.ndarray]]:
        length = ids.shape[1]
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones((1, start + length), dtype=np.int64),
            **dict(zip(self.past, cache, strict=True)),
        }
        if "position_ids" in self.inputs:
            feeds["position_ids"] = np.arange(start, start + length, dtype=np.int64)[None, :]
        logits, *present = self.session.run(self.outputs, feeds)
        return int(logits[0, -1].argmax()), present

    def tokens_per_second(self, prompt_tokens: int, new_tokens: int) -> float:
        prompt = np.random.default_rng(0).integers(3, 40, size=(1, prompt_tokens), dtype=np.int64)
        token, cache = self._step(prompt, 0, [self._empty(name) for name in self.past])
        started = time.perf_counter()
        for position in range(prompt_tokens, prompt_tokens + new_tokens):
            token, cache = self._step(np.array([[token]], dtype=np.int64), position, cache)
        return new_tokens / (time.perf_counter() - started)
