"""The exporter: its cached ONNX graph, driven by the runner's decoder, matches PyTorch exactly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, BertConfig

from inference.demo import tiny_chat
from inference.export.causal_lm import cache_layout
from inference.runner.config import load_manifest
from inference.runner.engine import Engine
from inference.runner.generation.continuous_batch import ContinuousBatch
from inference.runner.generation.decoder import Decoder
from inference.runner.generation.sampling import SamplingParams
from inference.runner.generation.sequence import Sequence

PROMPTS = ["hello", "what is lantau island and what is on it?", "<|im_start|>user\ncount to five<|im_end|>\n"]
NEW_TOKENS = 24


def torch_greedy(model_dir: Path, prompt: list[int], steps: int = NEW_TOKENS) -> list[int]:
    """Reference: the PyTorch model, no cache, full forward pass per token."""
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(steps):
            next_id = model(input_ids=ids).logits[0, -1].argmax()
            ids = torch.cat([ids, next_id.view(1, 1)], dim=1)
    return ids[0, len(prompt) :].tolist()


def runner_parts(model_dir: Path) -> tuple[Decoder, Tokenizer]:
    manifest = load_manifest(model_dir)
    decoder = Decoder(Engine(manifest.model_path, threads=1), manifest.generation)
    return decoder, Tokenizer.from_file(str(manifest.tokenizer_path))


def greedy_sequence(tokenizer: Tokenizer, prompt: list[int], max_tokens: int = NEW_TOKENS) -> Sequence:
    # No end-of-sequence ids: every sequence runs max_tokens steps, like the reference.
    return Sequence(prompt, SamplingParams(max_tokens=max_tokens, temperature=0), tokenizer, frozenset())


def test_cached_onnx_graph_reproduces_pytorch_greedy_tokens_alone(exported_dir: Path) -> None:
    decoder, tokenizer = runner_parts(exported_dir)
    prompt = tokenizer.encode(PROMPTS[1]).ids
    batch = ContinuousBatch(decoder)
    sequence = greedy_sequence(tokenizer, prompt)
    batch.step([sequence])  # prefill from an empty (length 0) cache
    while batch.rows:
        batch.step([])
    assert sequence.generated == torch_greedy(exported_dir / "hf", prompt)


def test_sequences_joining_at_different_steps_keep_their_exact_greedy_tokens(exported_dir: Path) -> None:
    """Left padding, merging and dropping rows must not change any sequence's tokens."""
    decoder, tokenizer = runner_parts(exported_dir)
    prompts = [tokenizer.encode(text).ids for text in PROMPTS]
    lengths = [NEW_TOKENS, NEW_TOKENS, NEW_TOKENS // 2]  # the last one leaves while others go on
    sequences = [greedy_sequence(tokenizer, p, n) for p, n in zip(prompts, lengths, strict=True)]
    batch = ContinuousBatch(decoder)
    batch.step([sequences[0]])
    batch.step([sequences[1]])
    for _ in range(3):
        batch.step([])
    batch.step([sequences[2]])
    while batch.rows:
        assert batch.kv is not None and batch.kv.width <= max(len(p) for p in prompts) + NEW_TOKENS
        batch.step([])
    for prompt, sequence in zip(prompts, sequences, strict=True):
        expected = torch_greedy(exported_dir / "hf", prompt, sequence.params.max_tokens)
        assert sequence.generated == expected


def test_manifest_describes_the_cache_and_the_graph(exported_dir: Path) -> None:
    manifest = json.loads((exported_dir / "lantau.json").read_text())
    section = manifest["generation"]
    assert manifest["task"] == "text-generation" and manifest["tokenizer_file"] == "tokenizer.json"
    heads = 2 if section["architecture"] == "llama" else 4  # Llama uses grouped-query attention
    assert (section["num_layers"], section["num_kv_heads"], section["head_dim"]) == (2, heads, 16)
    assert section["context_length"] == 128
    tokenizer = Tokenizer.from_file(str(exported_dir / "tokenizer.json"))
    assert section["eos_token_ids"] == [
        tokenizer.token_to_id("<|im_end|>"),
        tokenizer.token_to_id("<|endoftext|>"),
    ]
    assert "<|im_start|>" in section["chat_template"]
    graph = onnx.load(str(exported_dir / "model.onnx"), load_external_data=False).graph
    inputs = [i.name for i in graph.input]
    assert inputs[:3] == ["input_ids", "attention_mask", "position_ids"]
    assert inputs[3:] == [f"past_key_values.{i}.{k}" for i in range(2) for k in ("key", "value")]
    assert [o.name for o in graph.output] == ["logits"] + [
        f"present.{i}.{k}" for i in range(2) for k in ("key", "value")
    ]


def test_unsupported_architectures_are_refused() -> None:
    with pytest.raises(ValueError, match="unsupported architecture 'bert'"):
        cache_layout(BertConfig())


def test_tiny_chat_builds_a_servable_folder(tmp_path: Path) -> None:
    onnx_path, tokenizer_path, section = tiny_chat.build_and_export(tmp_path, steps=2)
    assert onnx_path == tmp_path / "model.onnx" and tokenizer_path == tmp_path / "tokenizer.json"
    manifest = load_manifest(tmp_path)
    assert manifest.deployment == "tiny-chat" and manifest.generation.num_layers == section["num_layers"]
    assert "toy" in (tmp_path / "hf" / "TRAINING.txt").read_text()
    decoder, tokenizer = runner_parts(tmp_path)
    logits, kv = decoder.prefill([tokenizer.encode("hello").ids])
    assert logits.shape == (1, len(tokenizer.get_vocab())) and np.isfinite(logits).all()
