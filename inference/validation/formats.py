"""Sniff what an uploaded file or folder is, without executing or unpickling anything it contains.

Accepted: ONNX (one file, or a folder with external data that stays inside it), TorchScript
archives, and Hugging Face folders with safetensors weights and no remote code. Everything
else is refused with one exception type, ``InvalidModel``, whose message says why.
"""

from __future__ import annotations

import json
import re
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path

MAX_JSON_BYTES = 16 * 1024 * 1024
# One segment of an external data location: no separators, no marker such as ORT's */_ORT_MEM_ADDR_/*.
SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9._-]+$")
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer.model", "vocab.json")
TASK_SUFFIXES = (
    ("ForImageClassification", "image-classification"),
    ("ForSequenceClassification", "text-classification"),
    ("ForCausalLM", "text-generation"),
    ("Model", "feature-extraction"),
)
PICKLE_MESSAGE = (
    "pickled PyTorch checkpoints are refused: unpickling can run arbitrary code. "
    "Upload ONNX, a TorchScript archive (torch.jit.save) or a Hugging Face folder with safetensors"
)


class InvalidModel(Exception):
    """The upload cannot be accepted; the message says why (mapped to HTTP 422)."""


def sniff(path: Path) -> dict:
    """Describe ``path``: {"format": "onnx"|"torchscript"|"huggingface", "path", ...}. Refuse the rest."""
    path = Path(path)
    if path.is_symlink():
        raise InvalidModel(f"{path.name} is a symbolic link")
    if path.is_dir():
        return _sniff_folder(path)
    if not path.is_file():
        raise InvalidModel(f"{path.name} does not exist")
    return _sniff_file(path)


def _sniff_folder(folder: Path) -> dict:
    if (folder / "config.json").is_file():
        return sniff_huggingface(folder)
    onnx_files = sorted(folder.glob("*.onnx"))
    if len(onnx_files) == 1:
        return sniff_onnx(onnx_files[0])
    if len(onnx_files) > 1:
        raise InvalidModel(f"the folder holds {len(onnx_files)} .onnx files; upload one model at a time")
    candidates = [p for p in sorted(folder.iterdir()) if p.is_file() and p.suffix in (".pt", ".pth", ".zip")]
    if len(candidates) == 1:
        return _sniff_file(candidates[0])
    raise InvalidModel("the folder holds no model: expected config.json (Hugging Face), one .onnx or one .pt")


def _sniff_file(path: Path) -> dict:
    with open(path, "rb") as handle:
        head = handle.read(8)
    if head.startswith(b"PK\x03\x04"):
        return sniff_torch_zip(path)
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:  # pickle protocol 2-5 (legacy torch.save)
        raise InvalidModel(PICKLE_MESSAGE)
    return sniff_onnx(path)


def sniff_torch_zip(path: Path) -> dict:
    """A zip written by torch: TorchScript (has code/ and constants.pkl) or a pickled checkpoint."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except zipfile.BadZipFile:
        raise InvalidModel(f"{path.name} looks like a zip but cannot be read") from None
    has_code = any("/code/" in f"/{name}" for name in names)
    has_constants = any(name.endswith("constants.pkl") for name in names)
    if has_code and has_constants:
        return {"format": "torchscript", "path": path}
    if any(name.endswith("data.pkl") for name in names):
        raise InvalidModel(PICKLE_MESSAGE)
    raise InvalidModel(f"{path.name} is a zip archive but not a TorchScript model")


def sniff_onnx(path: Path) -> dict:
    """Parse an ONNX protobuf (external data not loaded) and check that its external files stay in its folder."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises several unrelated types for garbage input
        raise InvalidModel(f"{path.name} is not a valid ONNX model ({type(exc).__name__})") from None
    if not model.HasField("graph") or not model.graph.node:
        raise InvalidModel(f"{path.name} is not a valid ONNX model: it has no graph")
    external = check_external_data(model, path.parent)
    return {
        "format": "onnx",
        "path": path,
        "external_data": external,
        "opset": max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0),
    }


def tensors(graph) -> Iterator:
    """Every tensor of a graph, its subgraphs included: initializers, sparse parts, attribute tensors."""
    return _tensors(graph)


def _tensors(graph) -> Iterator:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _tensors(attr.g)
            for sub in attr.graphs:
                yield from _tensors(sub)


def location_safe(location: str) -> bool:
    """Plain relative segments only: no absolute path, no ``..``, no ``*`` (ORT's in-memory address marker)."""
    parts = location.split("/")
    return bool(location) and all(SAFE_SEGMENT.match(p) and p not in (".", "..") for p in parts)


def check_external_data(model, folder: Path) -> list[str]:
    """Every external ``location`` must be plain relative segments naming a regular file inside ``folder``."""
    import onnx

    root = folder.resolve()
    locations = []
    for tensor in _tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        target = (root / location).resolve()
        if not location_safe(location) or not target.is_relative_to(root):
            raise InvalidModel(
                f"external data location {location!r} of tensor {tensor.name!r} is outside the model's folder"
            )
        if (root / location).is_symlink() or not target.is_file():
            raise InvalidModel(f"external data file {location!r} of tensor {tensor.name!r} is missing")
        try:
            offset, length = int(info.get("offset", 0) or 0), int(info.get("length", 0) or 0)
        except ValueError:
            raise InvalidModel(
                f"external data of tensor {tensor.name!r} has a non-numeric offset or length"
            ) from None
        if offset < 0 or length < 0 or offset + length > target.stat().st_size:
            raise InvalidModel(f"external data of tensor {tensor.name!r} runs past the end of {location!r}")
        locations.append(location)
    return sorted(set(locations))


def read_json(path: Path) -> dict:
    if path.stat().st_size > MAX_JSON_BYTES:
        raise InvalidModel(f"{path.name} is larger than {MAX_JSON_BYTES // 1024**2} MiB")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InvalidModel(f"{path.name} is not valid JSON") from None
    if not isinstance(data, dict):
        raise InvalidModel(f"{path.name} must hold a JSON object")
    return data


def sniff_huggingface(folder: Path) -> dict:
    """A Hugging Face folder: config, safetensors weights, no remote code; task, labels and preprocessing."""
    config = read_json(folder / "config.json")
    _refuse_remote_code(folder, config)
    weights = _safetensors_weights(folder)
    task = task_from_config(config)
    info = {
        "format": "huggingface",
        "path": folder,
        "task": task,
        "weights": weights,
        "architecture": config["architectures"][0],
        "labels": labels_from_config(config),
    }
    if task == "image-classification":
        pre = folder / "preprocessor_config.json"
        info["preprocessing"] = preprocessing_from_config(read_json(pre)) if pre.is_file() else None
    else:
        found = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
        if not found:
            raise InvalidModel(
                f"a {task} model needs its tokenizer files (one of {', '.join(TOKENIZER_FILES)})"
            )
        info["tokenizer"] = found
    return info


def _refuse_remote_code(folder: Path, config: dict) -> None:
    for name in ("config.json", "tokenizer_config.json", "preprocessor_config.json"):
        data = (
            config
            if name == "config.json"
            else (read_json(folder / name) if (folder / name).is_file() else {})
        )
        if "auto_map" in data or data.get("trust_remote_code"):
            raise InvalidModel(
                f"{name} asks for custom code (auto_map/trust_remote_code); "
                "models that need remote code are refused"
            )
    scripts = sorted(p.name for p in folder.rglob("*.py"))
    if scripts:
        raise InvalidModel(
            f"the folder contains Python code ({', '.join(scripts[:3])}); remote code is refused"
        )


def _safetensors_weights(folder: Path) -> list[str]:
    weights = sorted(p.name for p in folder.glob("*.safetensors"))
    if not weights:
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise InvalidModel(f"{pickles[0]}: {PICKLE_MESSAGE}")
        raise InvalidModel("the Hugging Face folder has no *.safetensors weights")
    for name in weights:
        if (folder / name).is_symlink():
            raise InvalidModel(f"{name} is a symbolic link; links are not allowed")
        check_safetensors(folder / name)
    return weights


def check_safetensors(path: Path) -> None:
    """Header length and JSON are sane and every tensor's byte range lies inside the file."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        raw = handle.read(8)
        if len(raw) < 8:
            raise InvalidModel(f"{path.name} is not a safetensors file (too short)")
        (length,) = struct.unpack("<Q", raw)
        if length > min(MAX_SAFETENSORS_HEADER, size - 8):
            raise InvalidModel(f"{path.name} has an impossible safetensors header length")
        try:
            header = json.loads(handle.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise InvalidModel(f"{path.name} has a corrupt safetensors header") from None
    if not isinstance(header, dict):
        raise InvalidModel(f"{path.name} has a corrupt safetensors header")
    body = size - 8 - length
    ranges = []
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        offsets = meta.get("data_offsets") if isinstance(meta, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
            raise InvalidModel(f"{path.name}: tensor {name!r} has no valid data_offsets")
        start, end = offsets
        if not (0 <= start <= end <= body):
            raise InvalidModel(f"{path.name}: tensor {name!r} lies outside the file")
        ranges.append((start, end, name))
    ranges.sort()
    for (_, end, first), (start, _, second) in zip(ranges, ranges[1:], strict=False):
        if start < end:
            raise InvalidModel(f"{path.name}: tensors {first!r} and {second!r} overlap")


def task_from_config(config: dict) -> str:
    architectures = config.get("architectures") or []
    if not architectures or not isinstance(architectures[0], str):
        raise InvalidModel("config.json names no architectures; cannot tell the task")
    for suffix, task in TASK_SUFFIXES:
        if architectures[0].endswith(suffix):
            return task
    raise InvalidModel(
        f"unsupported architecture {architectures[0]!r}: expected *ForImageClassification, "
        "*ForSequenceClassification, *ForCausalLM or a plain *Model"
    )


def labels_from_config(config: dict) -> list[str]:
    id2label = config.get("id2label") or {}
    try:
        pairs = sorted((int(key), str(value)) for key, value in id2label.items())
    except (TypeError, ValueError, AttributeError):
        raise InvalidModel("config.json id2label must map integer ids to names") from None
    if [index for index, _ in pairs] != list(range(len(pairs))):
        raise InvalidModel("config.json id2label ids must be 0..n-1")
    return [label for _, label in pairs]


def preprocessing_from_config(pre: dict) -> dict:
    """Map an HF image processor config to the runner's {input_size, resize_shorter, mean, std}."""
    size, crop = pre.get("size", 224), pre.get("crop_size")
    if isinstance(size, int):
        size = {"shortest_edge": size}
    if not isinstance(size, dict):
        raise InvalidModel("preprocessor_config.json size must be a number or an object")
    crop = {"height": crop, "width": crop} if isinstance(crop, int) else crop
    if crop and pre.get("do_center_crop", True):
        input_size = [int(crop["height"]), int(crop["width"])]
        resize = int(
            size.get("shortest_edge") or min(size.get("height", 0), size.get("width", 0)) or max(input_size)
        )
    elif "shortest_edge" in size:
        edge = int(size["shortest_edge"])
        input_size = [edge, edge]
        resize = round(edge / float(pre.get("crop_pct", 1.0) or 1.0))
    else:
        input_size = [int(size["height"]), int(size["width"])]
        resize = max(input_size)
    mean = pre.get("image_mean", [0.5, 0.5, 0.5]) if pre.get("do_normalize", True) else [0.0, 0.0, 0.0]
    std = pre.get("image_std", [0.5, 0.5, 0.5]) if pre.get("do_normalize", True) else [1.0, 1.0, 1.0]
    if len(mean) != 3 or len(std) != 3 or any(float(s) <= 0 for s in std):
        raise InvalidModel("preprocessor_config.json image_mean/image_std must be 3 numbers (std > 0)")
    return {
        "input_size": input_size,
        "resize_shorter": max(resize, *input_size),
        "mean": [float(m) for m in mean],
        "std": [float(s) for s in std],
    }
