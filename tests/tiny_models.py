"""Tiny models built in the tests: a CNN exported to ONNX, a ViT and a BERT saved as HF folders."""

from __future__ import annotations

from pathlib import Path

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
