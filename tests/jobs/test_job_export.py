"""Export to ONNX: outputs match PyTorch; TorchScript needs a shape; hostile archives stay refused."""

from __future__ import annotations

import os
import pickle
import zipfile

import numpy as np
import onnxruntime as ort
import pytest
import torch

from inference.conversion.export import export_onnx
from inference.validation.formats import InvalidModel
from tests.support.tiny_models import tiny_bert_folder, tiny_vit_folder


def _run(path, feeds):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_hf_image_classifier_export_matches_pytorch(tmp_path):
    from transformers import ViTForImageClassification

    folder = tiny_vit_folder(tmp_path / "vit")
    report = export_onnx(folder, tmp_path / "out")
    assert (report["task"], report["labels"]) == ("image-classification", ["cat", "dog", "fox"])
    assert report["preprocessing"]["input_size"] == [32, 32]
    pixels = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        expected = ViTForImageClassification.from_pretrained(folder).eval()(torch.from_numpy(pixels)).logits
    np.testing.assert_allclose(_run(report["path"], {"pixel_values": pixels}), expected.numpy(), atol=1e-4)


@pytest.mark.parametrize("classifier", [False, True])
def test_hf_bert_export_matches_pytorch(tmp_path, classifier):
    from transformers import AutoModel, AutoModelForSequenceClassification

    folder = tiny_bert_folder(tmp_path / "bert", classifier=classifier)
    report = export_onnx(folder, tmp_path / "out")
    assert report["task"] == ("text-classification" if classifier else "feature-extraction")
    assert (tmp_path / "out/tokenizer.json").is_file()
    ids = np.array([[2, 10, 11, 12, 3, 0], [2, 13, 14, 3, 0, 0]], dtype=np.int64)
    feeds = {
        "input_ids": ids,
        "attention_mask": (ids > 0).astype(np.int64),
        "token_type_ids": np.zeros_like(ids),
    }
    auto = AutoModelForSequenceClassification if classifier else AutoModel
    with torch.no_grad():
        expected = auto.from_pretrained(folder).eval()(**{k: torch.from_numpy(v) for k, v in feeds.items()})[
            0
        ]
    np.testing.assert_allclose(_run(report["path"], feeds), expected.numpy(), atol=1e-4)


def test_torchscript_exports_with_an_input_shape(tmp_path):
    module = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval())
    torch.jit.save(module, str(tmp_path / "m.pt"))
    with pytest.raises(InvalidModel, match="needs an example input shape"):
        export_onnx(tmp_path / "m.pt", tmp_path / "none")
    report = export_onnx(tmp_path / "m.pt", tmp_path / "out", input_shape=[1, 4])
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(
        _run(report["path"], {"input": x}), module(torch.from_numpy(x)).detach().numpy(), atol=1e-5
    )


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_torchscript_with_a_malicious_pickle_is_refused_without_running_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.jit.save(torch.jit.script(torch.nn.Linear(4, 3)), str(tmp_path / "ok.pt"))
    with zipfile.ZipFile(tmp_path / "ok.pt") as src, zipfile.ZipFile(tmp_path / "evil.pt", "w") as dst:
        for name in src.namelist():
            data = pickle.dumps(_Payload(), protocol=2) if name.endswith("constants.pkl") else src.read(name)
            dst.writestr(name, data)
    with pytest.raises(InvalidModel, match="does not load"):
        export_onnx(tmp_path / "evil.pt", tmp_path / "out", input_shape=[1, 4])
    assert not (tmp_path / "pwned").exists()
    assert not (tmp_path / "out").exists()
