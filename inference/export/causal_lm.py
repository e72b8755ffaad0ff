"""Hugging Face causal LM folder -> one ONNX decoder graph with its key/value cache.

The graph serves prefill and decode alike. Inputs: ``input_ids`` [batch, tokens],
``attention_mask`` [batch, past + tokens] (0 marks left padding), ``position_ids`` [batch, tokens]
and ``past_key_values.N.key|value`` [batch, kv_heads, past, head_dim] (past may be 0 on the
first step). Outputs: ``logits`` [batch, tokens, vocab] and ``present.N.key|value`` (past + tokens).

Supported architectures: Llama (also grouped-query attention) and GPT-2. The export uses the
TorchScript exporter (``dynamo=False``) through a small wrapper that turns flat tensors into a
transformers ``DynamicCache`` and back, because the exporter cannot take a cache object.
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from contract.generation import GenerationSpec
from contract.manifest import MANIFEST_NAME, ModelManifest, Task
from inference.runner.generation.chat_template import DEFAULT_CHAT_TEMPLATE

SUPPORTED_TYPES = ("llama", "gpt2")
OPSET = 17


@dataclass(frozen=True)
class CacheLayout:
    num_layers: int
    num_kv_heads: int
    head_dim: int


def cache_layout(config: Any) -> CacheLayout:
    """Layers, key/value heads and head size of the cache, read from a transformers config."""
    if config.model_type == "gpt2":
        return CacheLayout(config.n_layer, config.n_head, config.n_embd // config.n_head)
    if config.model_type == "llama":
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return CacheLayout(config.num_hidden_layers, config.num_key_value_heads or heads, head_dim)
    raise ValueError(f"unsupported architecture {config.model_type!r}; expected one of {SUPPORTED_TYPES}")


def cache_names(layers: int, prefix: str) -> list[str]:
    return [f"{prefix}.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]


def additive_mask(attention_mask: Any, new_tokens: Any, dtype: Any) -> Any:
    """[batch, 1, new, total] float mask: 0 where a query may attend, the dtype's minimum elsewhere.

    Built here with plain tensor ops because transformers' own mask builder uses ``vmap``, which
    the TorchScript tracer cannot follow; models return a ready 4-D mask as it is.
    """
    import torch

    total = attention_mask.shape[1]
    key_index = torch.arange(total, device=attention_mask.device)
    query_index = torch.arange(new_tokens, device=attention_mask.device) + (total - new_tokens)
    causal = key_index[None, :] <= query_index[:, None]
    allowed = causal[None, None, :, :] & attention_mask[:, None, None, :].bool()
    zeros = torch.zeros(allowed.shape, dtype=dtype, device=attention_mask.device)
    return zeros.masked_fill(~allowed, torch.finfo(dtype).min)


def _decoder_step_module(model: Any, layers: int) -> Any:
    import torch
    from transformers import DynamicCache

    class DecoderStep(torch.nn.Module):
        """Flat tensors in and out around one forward pass with a DynamicCache."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(
            self,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor,
            position_ids: torch.Tensor,
            *past: torch.Tensor,
        ) -> tuple[torch.Tensor, ...]:
            pairs = [(past[2 * i], past[2 * i + 1]) for i in range(layers)]
            cache = DynamicCache(pairs)
            out = self.model(
                input_ids=input_ids,
                attention_mask=additive_mask(attention_mask, input_ids.shape[1], model.dtype),
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=True,
                return_dict=True,
            )
            present = out.past_key_values
            flat = [t for i in range(layers) for t in (present.layers[i].keys, present.layers[i].values)]
            return (out.logits, *flat)

    return DecoderStep().eval()


def _example_inputs(layout: CacheLayout, dtype: Any) -> tuple[Any, ...]:
    """Batch 2, 3 new tokens after 4 cached ones: sizes no graph should specialise on."""
    import torch

    batch, new, past = 2, 3, 4
    ids = torch.randint(3, 50, (batch, new), dtype=torch.long)
    mask = torch.ones(batch, past + new, dtype=torch.long)
    positions = torch.arange(past, past + new, dtype=torch.long).expand(batch, new).contiguous()
    shape = (batch, layout.num_kv_heads, past, layout.head_dim)
    cache = [torch.randn(shape, dtype=dtype) for _ in range(2 * layout.num_layers)]
    return (ids, mask, positions, *cache)


def load_for_export(model_dir: Path) -> Any:
    """The model with eager attention (its explicit mask survives tracing with left padding)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), attn_implementation="eager")
    if model.config.model_type not in SUPPORTED_TYPES:
        raise ValueError(f"unsupported architecture {model.config.model_type!r}")
    return model.eval()


def export_onnx(model_dir: Path, onnx_path: Path) -> CacheLayout:
    """Write the cached decoder graph for the model in ``model_dir``; return its cache layout."""
    import torch

    model = load_for_export(model_dir)
    layout = cache_layout(model.config)
    past_in = cache_names(layout.num_layers, "past_key_values")
    present = cache_names(layout.num_layers, "present")
    axes: dict[str, dict[int, str]] = {
        "input_ids": {0: "batch", 1: "tokens"},
        "attention_mask": {0: "batch", 1: "total"},
        "position_ids": {0: "batch", 1: "tokens"},
        "logits": {0: "batch", 1: "tokens"},
    }
    axes |= {name: {0: "batch", 2: "past"} for name in past_in}
    axes |= {name: {0: "batch", 2: "total"} for name in present}
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), torch.no_grad():  # the tracer warns about every shape branch
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _decoder_step_module(model, layout.num_layers),
            _example_inputs(layout, model.dtype),
            str(onnx_path),
            input_names=["input_ids", "attention_mask", "position_ids", *past_in],
            output_names=["logits", *present],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    return layout


def _tokenizer_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "tokenizer_config.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _chat_template(model_dir: Path, tok: dict[str, Any]) -> str:
    """The template saved beside the tokenizer (``chat_template.jinja`` in recent transformers)."""
    path = model_dir / "chat_template.jinja"
    if path.is_file():
        return path.read_text(encoding="utf-8")
    value = tok.get("chat_template")
    if isinstance(value, list):  # named templates: take the default one
        value = next((t.get("template") for t in value if t.get("name") == "default"), None)
    return value or DEFAULT_CHAT_TEMPLATE


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # older tokenizer configs store AddedToken dicts
        return value.get("content")
    return value if isinstance(value, str) else None


def _eos_ids(model_dir: Path, config: Any) -> list[int]:
    generation = model_dir / "generation_config.json"
    value = config.eos_token_id
    if generation.is_file():
        value = json.loads(generation.read_text(encoding="utf-8")).get("eos_token_id", value)
    ids = value if isinstance(value, list) else [value]
    return [int(i) for i in ids if i is not None]


def generation_section(model_dir: Path, layout: CacheLayout) -> dict[str, Any]:
    """The manifest's ``generation`` object: what the runner needs to drive the cached graph."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(model_dir))
    tok = _tokenizer_config(model_dir)
    context = getattr(config, "max_position_embeddings", None) or config.n_positions
    special = {key: _token_text(tok.get(key)) for key in ("bos_token", "eos_token")}
    return {
        "architecture": config.model_type,
        **asdict(layout),
        "context_length": int(context),
        "eos_token_ids": _eos_ids(model_dir, config),
        "chat_template": _chat_template(model_dir, tok),
        "special_tokens": {key: value for key, value in special.items() if value},
    }


def export_model_folder(
    model_dir: Path, out_dir: Path, *, deployment: str, model_version: str | None = None
) -> tuple[Path, Path, dict[str, Any]]:
    """Export ``model_dir`` into ``out_dir`` (model.onnx, tokenizer.json, lantau.json).

    Returns (onnx path, tokenizer.json path, generation section of the manifest).
    """
    tokenizer = model_dir / "tokenizer.json"
    if not tokenizer.is_file():
        raise ValueError(f"{model_dir} has no tokenizer.json (a fast tokenizer is required)")
    out_dir.mkdir(parents=True, exist_ok=True)
    layout = export_onnx(model_dir, out_dir / "model.onnx")
    section = generation_section(model_dir, layout)
    shutil.copyfile(tokenizer, out_dir / "tokenizer.json")
    manifest = ModelManifest(
        deployment=deployment,
        model_version=model_version or f"{deployment}:1",
        task=Task.TEXT_GENERATION,
        model_file="model.onnx",
        tokenizer_file="tokenizer.json",
        generation=GenerationSpec.from_dict(section),  # ManifestError here, not when a runner starts
    )
    (out_dir / MANIFEST_NAME).write_text(manifest.to_json(indent=2), encoding="utf-8")
    return out_dir / "model.onnx", out_dir / "tokenizer.json", section
