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


def tiny_vit_folder(folder: Path) -> Path:
    """A real Hugging Face image classifier folder (safetensors, preprocessor config, 3 labels)."""
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=64, num_labels=3, id2label={0: "cat", 1: "dog", 2: "fox"},
                       label2id={"cat": 0, "dog": 1, "fox": 2})
    ViTForImageClassification(config).save_pretrained(folder, safe_serialization=True)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def zip_folder(folder: Path, archive: Path) -> Path:
    import zipfile

    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(folder))
    return archive
