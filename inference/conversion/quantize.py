"""INT8 quantization: dynamic (weights only, no data needed) and static (calibrated activations)."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inference.conversion import datasets
from inference.conversion.graph import model_report
from inference.conversion.sensitivity import edge_nodes, sensitive_nodes
from inference.conversion.steps import Cancelled, JobCancelled, Progress, Steps, job_steps, scratch_dir

METHODS = ("MinMax", "Entropy", "Percentile")
FORMATS = ("QDQ", "QOperator")
TYPES = ("QInt8", "QUInt8")
HISTOGRAM_BATCH = 4  # histogram collectors need equal-shaped batches: ragged tails are dropped

# Chosen on the demo models (see docs/quantization.md for the figures behind them).
RECOMMENDED: dict[str, dict[str, Any]] = {
    "image-classification": {
        "mode": "static",
        "method": "MinMax",
        "per_channel": True,
        "quant_format": "QDQ",
        "activation_type": "QUInt8",
        "weight_type": "QInt8",
        "exclude_nodes": [],
        "exclude_op_types": [],
        # The stem conv and the classifier in float: the only MinMax setting that met both 99 % bars on
        # the whole built-in set (docs/quantization.md); the tuning loop varies the rest from here.
        "keep_float_edges": True,
    },
    "feature-extraction": {
        "mode": "dynamic",
        "per_channel": True,
        "weight_type": "QInt8",
        "reduce_range": False,
        "exclude_nodes": [],
        "exclude_op_types": ["Gather"],
    },
}
RECOMMENDED["text-classification"] = RECOMMENDED["feature-extraction"]


def recommended_options(task: str) -> dict[str, Any]:
    """The quantization settings that met our accuracy and speed targets for ``task`` (a fresh copy)."""
    if task not in RECOMMENDED:
        raise ValueError(f"no recommended quantization for task {task!r}")
    return {
        key: list(value) if isinstance(value, list) else value for key, value in RECOMMENDED[task].items()
    }


def excluded_nodes(model_path: Path, nodes: Sequence[str] = (), op_types: Sequence[str] = ()) -> list[str]:
    """Node names matching ``nodes`` (exact names or fnmatch patterns), plus nodes of ``op_types`` that
    carry weights (an initializer input of rank >= 2: embedding tables, not shape lookups)."""
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    weights = {t.name for t in graph.initializer if len(t.dims) >= 2}
    return [
        node.name
        for node in graph.node
        if any(fnmatch.fnmatchcase(node.name, pattern) for pattern in nodes)
        or (node.op_type in op_types and any(name in weights for name in node.input))
    ]


def quantize_dynamic_int8(
    src: Path,
    dst: Path,
    *,
    per_channel: bool = True,
    reduce_range: bool = False,
    weight_type: str = "QInt8",
    exclude_nodes: Sequence[str] = (),
    exclude_op_types: Sequence[str] = (),
    keep_float_edges: bool = False,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
) -> dict[str, Any]:
    """Weights to INT8 ahead of time, activations quantized on the fly; no calibration data needed."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    _check_choice("weight_type", weight_type, TYPES)
    options = {
        "mode": "dynamic",
        "per_channel": per_channel,
        "reduce_range": reduce_range,
        "weight_type": weight_type,
        "exclude_nodes": list(exclude_nodes),
        "exclude_op_types": list(exclude_op_types),
        "keep_float_edges": keep_float_edges,
    }
    with job_steps(dst, progress, cancelled) as step, scratch_dir(dst) as tmp:
        prepared = _pre_process(src, tmp, step)
        skipped = _float_nodes(prepared, exclude_nodes, exclude_op_types, keep_float_edges)
        step(40, f"quantizing weights to INT8 ({len(skipped)} nodes left in float)")
        quantize_dynamic(
            str(prepared),
            str(dst),
            per_channel=per_channel,
            reduce_range=reduce_range,
            weight_type=getattr(QuantType, weight_type),
            nodes_to_exclude=skipped,
        )
        step(90, "checking the quantized model")
        report = model_report(dst, precision="int8", options=options | {"excluded": skipped})
    return report


def quantize_static_int8(
    src: Path,
    dst: Path,
    *,
    task: str,
    preprocessing: dict[str, Any] | None = None,
    tokenizer: Path | None = None,
    calibration: Path | None = None,
    calibration_limit: int = 64,
    method: str = "MinMax",
    per_channel: bool = True,
    activation_type: str = "QUInt8",
    weight_type: str = "QInt8",
    quant_format: str = "QDQ",
    reduce_range: bool = False,
    exclude_nodes: Sequence[str] = (),
    exclude_op_types: Sequence[str] = (),
    keep_float_edges: bool = False,
    float_nodes: int = 0,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
) -> dict[str, Any]:
    """Weights and activations to INT8, activation ranges calibrated on images or text lines.

    ``calibration`` is a folder of images or a text file (one input per line); by default the bundled
    scikit-image photos or built-in sentences. Images need ``preprocessing``, text needs ``tokenizer``.
    ``keep_float_edges`` leaves the first and last weighted nodes in float; ``float_nodes`` also the
    nodes adding the most error in a trial quantization (``sensitivity.sensitive_nodes``).
    """
    for name, value, allowed in (
        ("method", method, METHODS),
        ("quant_format", quant_format, FORMATS),
        ("activation_type", activation_type, TYPES),
        ("weight_type", weight_type, TYPES),
    ):
        _check_choice(name, value, allowed)
    options = {
        "mode": "static",
        "method": method,
        "per_channel": per_channel,
        "quant_format": quant_format,
        "activation_type": activation_type,
        "weight_type": weight_type,
        "reduce_range": reduce_range,
        "exclude_nodes": list(exclude_nodes),
        "exclude_op_types": list(exclude_op_types),
        "keep_float_edges": keep_float_edges,
        "float_nodes": float_nodes,
        "calibration": str(calibration) if calibration else "built-in",
    }
    with job_steps(dst, progress, cancelled) as step, scratch_dir(dst) as tmp:
        prepared = _pre_process(src, tmp, step)
        step(20, "loading calibration data")
        feeds = calibration_feeds(prepared, task, calibration, calibration_limit, preprocessing, tokenizer)
        skipped = _float_nodes(prepared, exclude_nodes, exclude_op_types, keep_float_edges)
        sensitivity: list[dict[str, Any]] = []
        if float_nodes > 0:
            step(25, f"per-node error analysis: the {float_nodes} nodes adding the most error stay float")
            probe = tmp / "probe.onnx"
            _run_static(prepared, probe, feeds, options | {"quant_format": "QDQ"}, skipped, step)
            sensitivity = sensitive_nodes(prepared, probe, feeds, float_nodes, tmp, skip=skipped)
            skipped += [item["node"] for item in sensitivity]
        step(30, f"calibrating ({method}) on {_count(feeds)} inputs, {len(skipped)} nodes left in float")
        _run_static(prepared, dst, feeds, options, skipped, step)
        step(90, "checking the quantized model")
        found = {"excluded": skipped, "calibration_inputs": _count(feeds), "sensitivity": sensitivity}
        report = model_report(dst, precision="int8", options=options | found)
    return report


def _run_static(
    prepared: Path,
    dst: Path,
    feeds: dict[str, np.ndarray],
    options: dict[str, Any],
    skipped: list[str],
    step: Steps,
) -> None:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    histogram = options["method"] != "MinMax"
    quantize_static(
        str(prepared),
        str(dst),
        _Reader(feeds, HISTOGRAM_BATCH if histogram else 8, histogram, step),
        quant_format=getattr(QuantFormat, options["quant_format"]),
        per_channel=options["per_channel"],
        calibrate_method=getattr(CalibrationMethod, options["method"]),
        reduce_range=options["reduce_range"],
        activation_type=getattr(QuantType, options["activation_type"]),
        weight_type=getattr(QuantType, options["weight_type"]),
        nodes_to_exclude=skipped,
    )


class _Reader:
    """Feeds calibration batches to ORT and checks for cancellation between them."""

    def __init__(self, feeds: dict[str, np.ndarray], batch: int, drop_ragged: bool, step: Steps) -> None:
        count = _count(feeds)
        if drop_ragged and count >= batch:
            feeds = {name: value[: count - count % batch] for name, value in feeds.items()}
        self._batches = iter(list(datasets.batches(feeds, batch)))
        self._step = step

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._step.cancelled():
            raise JobCancelled("cancelled during calibration")
        return next(self._batches, None)

    def rewind(self) -> None:  # part of ORT's CalibrationDataReader protocol; one pass is all we use
        return None


def calibration_feeds(
    model_path: Path,
    task: str,
    source: Path | None,
    limit: int,
    preprocessing: dict[str, Any] | None,
    tokenizer: Path | None,
) -> dict[str, np.ndarray]:
    """Model feeds for calibration, named after the model's own inputs."""
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}
    names = [v.name for v in graph.input if v.name not in initializers]
    if task == "image-classification":
        if preprocessing is None:
            raise ValueError("static quantization of an image model needs its preprocessing")
        return {names[0]: datasets.image_arrays(datasets.calibration_images(source, limit), preprocessing)}
    if tokenizer is None:
        raise ValueError("static quantization of a text model needs its tokenizer.json")
    arrays = datasets.text_arrays(tokenizer, datasets.text_lines(source, limit))
    return {name: arrays[name] for name in names}


def _float_nodes(
    prepared: Path, nodes: Sequence[str], op_types: Sequence[str], keep_float_edges: bool
) -> list[str]:
    skipped = excluded_nodes(prepared, nodes, op_types)
    if keep_float_edges:
        skipped += [name for name in edge_nodes(prepared) if name not in skipped]
    return skipped


def _pre_process(src: Path, tmp: Path, step: Steps) -> Path:
    from onnxruntime.quantization.shape_inference import quant_pre_process

    step(5, "pre-processing the graph (shape inference, folding)")
    prepared = tmp / "prepared.onnx"
    # ORT's symbolic shape inference gives up on exported transformers and then leaves temp copies of
    # the model in the working directory; ONNX's own shape inference (still run) is enough here.
    quant_pre_process(str(src), str(prepared), skip_symbolic_shape=True)
    return prepared


def _check_choice(name: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(allowed)}")


def _count(feeds: dict[str, np.ndarray]) -> int:
    return int(next(iter(feeds.values())).shape[0])
