"""Tiny real models and images for tests, built in a second or less."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

COLOURS = ["red", "green", "blue"]


def colour_classifier(path: Path, size: int = 16) -> Path:
    """Mean colour -> logits: a pure-red image scores 'red' highest (weights = 10 * I)."""
    weights = numpy_helper.from_array(np.eye(3, dtype=np.float32) * 10.0, "weights")
    bias = numpy_helper.from_array(np.zeros(3, dtype=np.float32), "bias")
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["pixel_values"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["flat"]),
            helper.make_node("Gemm", ["flat", "weights", "bias"], ["logits"]),
        ],
        "colour",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        initializer=[weights, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def image_bytes(colour=(255, 0, 0), size=(64, 48), fmt="JPEG") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format=fmt)
    return buf.getvalue()
