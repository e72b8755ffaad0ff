"""Sniffing uploads: what is accepted, and each refusal with its message."""

from __future__ import annotations

import json
import struct

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from inference.validation.formats import InvalidModel, sniff


def _safetensors(path, tensors: dict[str, int] | None = None):
    tensors = tensors or {"w": 4}
    header, offset = {}, 0
    for name, count in tensors.items():
        header[name] = {"dtype": "F32", "shape": [count], "data_offsets": [offset, offset + 4 * count]}
        offset += 4 * count
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\x00" * offset)
    return path


def _hf_folder(folder, config: dict, *, weights=True, tokenizer=True, extra: dict | None = None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if weights:
        _safetensors(folder / "model.safetensors")
    if tokenizer:
        (folder / "tokenizer.json").write_text("{}")
    for name, text in (extra or {}).items():
        (folder / name).write_text(text)
    return folder


def _onnx_with_external(folder, location: str):
    folder.mkdir(parents=True, exist_ok=True)
    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "64")):
        weight.external_data.add(key=key, value=value)
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [weight],
    )
    path = folder / "model.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    return path


def test_an_onnx_file_is_recognised(tmp_path):
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    onnx.save(helper.make_model(graph), tmp_path / "m.onnx")
    assert sniff(tmp_path / "m.onnx")["format"] == "onnx"


def test_garbage_is_not_onnx(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"\x12\xff\xff\xff garbage")
    with pytest.raises(InvalidModel, match="not a valid ONNX model"):
        sniff(tmp_path / "m.onnx")


def test_external_data_inside_the_folder_is_accepted(tmp_path):
    _onnx_with_external(tmp_path / "m", "weights.bin")
    (tmp_path / "m/weights.bin").write_bytes(b"\x00" * 64)
    assert sniff(tmp_path / "m")["external_data"] == ["weights.bin"]


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../secret.bin"])
def test_external_data_outside_the_folder_is_refused(tmp_path, location):
    (tmp_path / "secret.bin").write_bytes(b"\x00" * 64)
    path = _onnx_with_external(tmp_path / "m", location)
    with pytest.raises(InvalidModel, match="outside the model's folder"):
        sniff(path)


def test_external_data_pointing_past_its_file_is_refused(tmp_path):
    path = _onnx_with_external(tmp_path / "m", "weights.bin")
    (tmp_path / "m/weights.bin").write_bytes(b"\x00" * 10)
    with pytest.raises(InvalidModel, match="runs past the end"):
        sniff(path)


def test_torchscript_is_accepted(tmp_path):
    scripted = torch.jit.script(torch.nn.Linear(4, 2))
    torch.jit.save(scripted, str(tmp_path / "m.pt"))
    assert sniff(tmp_path / "m.pt")["format"] == "torchscript"


def test_a_pickled_checkpoint_is_refused(tmp_path):
    torch.save(torch.nn.Linear(4, 2).state_dict(), tmp_path / "m.pt")
    with pytest.raises(InvalidModel, match="pickled PyTorch checkpoints are refused"):
        sniff(tmp_path / "m.pt")


def test_a_legacy_pickle_is_refused(tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "m.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(InvalidModel, match="pickled PyTorch checkpoints are refused"):
        sniff(tmp_path / "m.pt")


def test_hf_image_classifier_gives_task_labels_and_preprocessing(tmp_path):
    config = {"architectures": ["ViTForImageClassification"], "id2label": {"1": "dog", "0": "cat"}}
    pre = {"size": {"height": 384, "width": 384}, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
    folder = _hf_folder(
        tmp_path / "hf", config, tokenizer=False, extra={"preprocessor_config.json": json.dumps(pre)}
    )
    info = sniff(folder)
    assert (info["format"], info["task"], info["labels"]) == (
        "huggingface",
        "image-classification",
        ["cat", "dog"],
    )
    assert info["preprocessing"] == {
        "input_size": [384, 384],
        "resize_shorter": 384,
        "mean": [0.5, 0.5, 0.5],
        "std": [0.5, 0.5, 0.5],
    }


def test_hf_crop_configs_resize_then_crop(tmp_path):
    pre = {
        "size": {"shortest_edge": 256},
        "crop_size": {"height": 224, "width": 224},
        "image_mean": [0.485, 0.456, 0.406],
        "image_std": [0.229, 0.224, 0.225],
    }
    folder = _hf_folder(
        tmp_path / "hf",
        {"architectures": ["ResNetForImageClassification"]},
        tokenizer=False,
        extra={"preprocessor_config.json": json.dumps(pre)},
    )
    assert sniff(folder)["preprocessing"]["input_size"] == [224, 224]
    assert sniff(folder)["preprocessing"]["resize_shorter"] == 256


@pytest.mark.parametrize(
    ("architecture", "task"),
    [
        ("BertForSequenceClassification", "text-classification"),
        ("LlamaForCausalLM", "text-generation"),
        ("BertModel", "feature-extraction"),
    ],
)
def test_hf_task_comes_from_the_architecture(tmp_path, architecture, task):
    assert sniff(_hf_folder(tmp_path / "hf", {"architectures": [architecture]}))["task"] == task


def test_hf_unknown_architecture_is_refused(tmp_path):
    with pytest.raises(InvalidModel, match="unsupported architecture"):
        sniff(_hf_folder(tmp_path / "hf", {"architectures": ["BertForMaskedLM"]}))


def test_hf_config_needing_remote_code_is_refused(tmp_path):
    config = {"architectures": ["EvilModel"], "auto_map": {"AutoModel": "modeling_evil.EvilModel"}}
    with pytest.raises(InvalidModel, match="remote code"):
        sniff(_hf_folder(tmp_path / "hf", config))


def test_hf_folder_shipping_python_is_refused(tmp_path):
    folder = _hf_folder(
        tmp_path / "hf", {"architectures": ["BertModel"]}, extra={"modeling_x.py": "import os"}
    )
    with pytest.raises(InvalidModel, match="remote code is refused"):
        sniff(folder)


def test_hf_pickle_weights_are_refused(tmp_path):
    folder = _hf_folder(tmp_path / "hf", {"architectures": ["BertModel"]}, weights=False)
    torch.save({"w": torch.ones(2)}, folder / "pytorch_model.bin")
    with pytest.raises(InvalidModel, match="pytorch_model.bin: pickled PyTorch checkpoints are refused"):
        sniff(folder)


def test_hf_corrupt_safetensors_are_refused(tmp_path):
    folder = _hf_folder(tmp_path / "hf", {"architectures": ["BertModel"]})
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(InvalidModel, match="impossible safetensors header"):
        sniff(folder)


def test_hf_text_model_without_tokenizer_is_refused(tmp_path):
    with pytest.raises(InvalidModel, match="needs its tokenizer"):
        sniff(_hf_folder(tmp_path / "hf", {"architectures": ["BertModel"]}, tokenizer=False))
