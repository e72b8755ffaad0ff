"""Inspect and check an uploaded ONNX file without trusting it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inference.validation.formats import InvalidModel, location_safe, tensors

_DTYPES = {
    1: "float32",
    10: "float16",
    11: "float64",
    6: "int32",
    7: "int64",
    9: "bool",
    2: "uint8",
    3: "int8",
}


def _dims(value_info: Any) -> list[int | str | None]:
    dims: list[int | str | None] = []
    for d in value_info.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or None)
    return dims


def _describe(value_info: Any) -> dict[str, Any]:
    elem = value_info.type.tensor_type.elem_type
    return {"name": value_info.name, "dtype": _DTYPES.get(elem, f"onnx:{elem}"), "shape": _dims(value_info)}


def inspect_onnx(path: Path, *, allow_external: bool = False) -> dict:
    """Parse and check the graph; return its inputs, outputs and opset. Raise InvalidModel otherwise.

    External data is refused unless `allow_external` (imports, whose data locations were checked to stay
    inside the upload's folder by `inference.validation.formats`).
    """
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises several unrelated types for garbage input
        raise InvalidModel(f"not a valid ONNX model: {type(exc).__name__}") from None
    if not model.graph.node:
        raise InvalidModel("not a valid ONNX model: the graph has no nodes")
    for tensor in tensors(model.graph):  # subgraphs, sparse and attribute tensors too, not just initializers
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        if not allow_external:
            raise InvalidModel(
                "this ONNX model keeps its weights in external data files: upload the .onnx "
                "file together with them (several files, or one zip)"
            )
        location = {entry.key: entry.value for entry in tensor.external_data}.get("location", "")
        if not location_safe(location):
            raise InvalidModel(
                f"external data location {location[:100]!r} of tensor {tensor.name!r} is refused"
            )
    try:
        # With external data the checker must see the file's folder to find the weights it names.
        onnx.checker.check_model(str(path) if allow_external else model)
    except Exception as exc:
        raise InvalidModel(f"ONNX model check failed: {str(exc).splitlines()[0][:300]}") from None
    initializers = {t.name for t in model.graph.initializer}
    inputs = [_describe(v) for v in model.graph.input if v.name not in initializers]
    outputs = [_describe(v) for v in model.graph.output]
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return {"inputs": inputs, "outputs": outputs, "opset": opset}


def check_task(task: str, info: dict, *, labels: list[str]) -> None:
    """Refuse a model whose inputs and outputs cannot serve the declared task."""
    inputs, outputs = info["inputs"], info["outputs"]
    if task == "image-classification":
        floats = [i for i in inputs if i["dtype"] in ("float32", "float16")]
        if len(inputs) != 1 or len(floats) != 1 or len(inputs[0]["shape"]) != 4:
            raise InvalidModel(
                "an image classifier needs exactly one float input of shape [batch, 3, height, width]"
            )
        channels = inputs[0]["shape"][1]
        if isinstance(channels, int) and channels != 3:
            raise InvalidModel(
                f"an image classifier's input must have 3 channels (RGB), this one has {channels}"
            )
        if not outputs or len(outputs[0]["shape"]) != 2:
            raise InvalidModel("an image classifier's first output must be [batch, classes] scores")
        classes = outputs[0]["shape"][1]
        if labels and isinstance(classes, int) and classes != len(labels):
            raise InvalidModel(f"the model has {classes} classes but {len(labels)} labels were given")
    elif task in ("feature-extraction", "text-classification", "text-generation"):
        names = {i["name"] for i in inputs}
        what = {
            "feature-extraction": "an embedding model",
            "text-classification": "a text classifier",
            "text-generation": "a text generator",
        }[task]
        if "input_ids" not in names:
            raise InvalidModel(f"{what} needs an `input_ids` input")
        rank = 2 if task == "text-classification" else 3
        shape = {2: "[batch, classes]", 3: "[batch, tokens, hidden or vocabulary]"}[rank]
        if not outputs or len(outputs[0]["shape"]) != rank:
            raise InvalidModel(f"{what}'s first output must be {shape}")
    else:
        raise InvalidModel(f"unknown task {task!r}")


def image_preprocessing(info: dict, overrides: dict | None) -> dict:
    """Preprocessing recorded for the runner: resize shorter side, centre crop, normalise (0..1 scale)."""
    shape = info["inputs"][0]["shape"]
    height = shape[2] if isinstance(shape[2], int) else 224
    width = shape[3] if isinstance(shape[3], int) else 224
    pre: dict[str, Any] = {
        "input_size": [height, width],
        "resize_shorter": round(min(height, width) / 0.875),
        "mean": [0.485, 0.456, 0.406],
        "std": [0.229, 0.224, 0.225],
    }
    for key, value in (overrides or {}).items():
        if key not in pre:
            raise InvalidModel(f"unknown preprocessing key {key!r} (known: {', '.join(pre)})")
        pre[key] = value
    for key in ("mean", "std"):
        vals = pre[key]
        if not (isinstance(vals, list) and len(vals) == 3 and all(isinstance(v, int | float) for v in vals)):
            raise InvalidModel(f"preprocessing {key} must be a list of 3 numbers")
    if any(v <= 0 for v in pre["std"]):
        raise InvalidModel("preprocessing std values must be positive")
    return pre
