"""Graph-level conversions: onnxruntime offline optimisation and FP16 with float32 inputs/outputs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from inference.conversion.steps import Cancelled, Progress, job_steps

if TYPE_CHECKING:
    import onnx

# ORT_ENABLE_ALL adds layout transforms tied to the machine that ran them; saved models should stay portable.
LEVELS = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED"}


def optimize_graph(
    src: Path,
    dst: Path,
    *,
    level: str = "extended",
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
) -> dict[str, Any]:
    """Let onnxruntime fuse and fold the graph once, offline, and save the result to ``dst``."""
    import onnxruntime as ort

    if level not in LEVELS:
        raise ValueError(f"unknown optimisation level {level!r}; choose one of {', '.join(LEVELS)}")
    with job_steps(dst, progress, cancelled) as step:
        step(10, f"optimising the graph ({level})")
        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
        options.optimized_model_filepath = str(dst)
        ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
        step(90, "checking the optimised model")
        report = model_report(dst, precision="fp32", options={"level": level})
    return report


def convert_fp16(
    src: Path,
    dst: Path,
    *,
    keep_io_types: bool = True,
    op_block_list: list[str] | None = None,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
) -> dict[str, Any]:
    """Store weights and compute in float16; inputs and outputs stay float32 by default.

    Uses onnxconverter-common when installed, else the same converter shipped in onnxruntime.
    """
    import onnx

    try:
        from onnxconverter_common.float16 import convert_float_to_float16
    except ImportError:
        from onnxruntime.transformers.float16 import convert_float_to_float16

    with job_steps(dst, progress, cancelled) as step:
        step(10, "loading the model")
        model = onnx.load(str(src))
        step(30, "converting weights and ops to float16")
        converted = convert_float_to_float16(model, keep_io_types=keep_io_types, op_block_list=op_block_list)
        step(80, "saving the float16 model")
        save_model(converted, dst)
        options = {"keep_io_types": keep_io_types, "op_block_list": op_block_list or []}
        report = model_report(dst, precision="fp16", options=options)
    return report


def save_model(model: onnx.ModelProto, dst: Path) -> None:
    """Save, spilling weights to ``<name>.data`` only when the protobuf would pass its 2 GiB limit."""
    import onnx

    large = model.ByteSize() > 1_800_000_000
    onnx.save_model(model, str(dst), save_as_external_data=large, location=Path(dst).name + ".data")


def model_report(path: Path, *, precision: str, options: dict[str, Any]) -> dict[str, Any]:
    """Size on disk (with external data), inputs/outputs and what produced it."""
    import onnx

    path = Path(path)
    model = onnx.load(str(path), load_external_data=False)
    initializers = {t.name for t in model.graph.initializer}
    extra = sum(p.stat().st_size for p in path.parent.glob(path.name + ".*data"))
    return {
        "path": str(path),
        "precision": precision,
        "options": options,
        "size_bytes": path.stat().st_size + extra,
        "inputs": [_describe(v) for v in model.graph.input if v.name not in initializers],
        "outputs": [_describe(v) for v in model.graph.output],
    }


def _describe(value_info: onnx.ValueInfoProto) -> dict[str, Any]:
    import onnx

    tensor = value_info.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim]
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type else "unknown"
    return {"name": value_info.name, "dtype": dtype, "shape": dims}
