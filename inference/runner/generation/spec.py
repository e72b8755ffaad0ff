"""The manifest's ``generation`` section for task ``text-generation``, parsed into a frozen dataclass.

Written by ``inference.export.causal_lm``; example::

    "generation": {"architecture": "llama", "num_layers": 4, "num_kv_heads": 2, "head_dim": 32,
                   "context_length": 256, "eos_token_ids": [2, 0], "chat_template": "...",
                   "special_tokens": {"eos_token": "<|im_end|>"}, "default_max_tokens": 256}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

DEFAULT_MAX_TOKENS = 256


@dataclass(frozen=True)
class GenerationSpec:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    context_length: int
    eos_token_ids: tuple[int, ...]
    chat_template: str | None = None
    special_tokens: dict[str, str] = field(default_factory=dict)
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    architecture: str = ""


def _positive_int(data: dict[str, Any], key: str, default: Any = ...) -> int:
    if key not in data and default is not ...:
        return default
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"manifest: generation.{key} must be a positive integer")
    return value


def _eos_ids(value: Any) -> tuple[int, ...]:
    ids = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ConfigError("manifest: generation.eos_token_ids must be a list of token ids")
    return tuple(ids)


def _optional_str(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"manifest: generation.{key} must be a string")
    return value


def _special_tokens(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError("manifest: generation.special_tokens must map names to token strings")
    return dict(value)


def parse_generation(data: Any) -> GenerationSpec:
    """Validate the ``generation`` object; raise ConfigError with a one-line reason."""
    if not isinstance(data, dict):
        raise ConfigError("manifest: 'generation' must be an object for text-generation")
    return GenerationSpec(
        num_layers=_positive_int(data, "num_layers"),
        num_kv_heads=_positive_int(data, "num_kv_heads"),
        head_dim=_positive_int(data, "head_dim"),
        context_length=_positive_int(data, "context_length"),
        eos_token_ids=_eos_ids(data.get("eos_token_ids", [])),
        chat_template=_optional_str(data, "chat_template"),
        special_tokens=_special_tokens(data.get("special_tokens")),
        default_max_tokens=_positive_int(data, "default_max_tokens", DEFAULT_MAX_TOKENS),
        architecture=_optional_str(data, "architecture") or "",
    )
