"""The manifest's ``generation`` section (task ``text-generation``): what a runner needs to drive a cached graph.

Written by ``inference.export.causal_lm`` (and by people uploading a generator); read by the runner's
decoder. Example::

    "generation": {"architecture": "llama", "num_layers": 4, "num_kv_heads": 2, "head_dim": 32,
                   "context_length": 256, "eos_token_ids": [2, 0], "chat_template": "...",
                   "special_tokens": {"eos_token": "<|im_end|>"}, "default_max_tokens": 256}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_TOKENS = 256


class ManifestError(ValueError):
    """A manifest (or a part of it) breaks the contract; the message is one line naming the field."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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

    def __post_init__(self) -> None:
        for key in ("num_layers", "num_kv_heads", "head_dim", "context_length", "default_max_tokens"):
            value = getattr(self, key)
            if not _is_int(value) or value < 1:
                raise ManifestError(f"manifest: generation.{key} must be a positive integer")
        if not isinstance(self.eos_token_ids, tuple) or not all(_is_int(i) for i in self.eos_token_ids):
            raise ManifestError("manifest: generation.eos_token_ids must be a list of token ids")
        if self.chat_template is not None and not isinstance(self.chat_template, str):
            raise ManifestError("manifest: generation.chat_template must be a string")
        tokens = self.special_tokens
        if not isinstance(tokens, dict) or not all(isinstance(v, str) for v in tokens.values()):
            raise ManifestError("manifest: generation.special_tokens must map names to token strings")
        if not isinstance(self.architecture, str):
            raise ManifestError("manifest: generation.architecture must be a string")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "num_layers": self.num_layers,
            "num_kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "context_length": self.context_length,
            "eos_token_ids": list(self.eos_token_ids),
            "special_tokens": dict(self.special_tokens),
            "default_max_tokens": self.default_max_tokens,
        }
        if self.architecture:
            out["architecture"] = self.architecture
        if self.chat_template is not None:
            out["chat_template"] = self.chat_template
        return out

    @classmethod
    def from_dict(cls, data: Any) -> GenerationSpec:
        """Validate the ``generation`` object; raise ManifestError with a one-line reason."""
        if not isinstance(data, dict):
            raise ManifestError("manifest: 'generation' must be an object for text-generation")
        eos = data.get("eos_token_ids", [])
        eos = [eos] if _is_int(eos) else eos
        if not isinstance(eos, list):
            raise ManifestError("manifest: generation.eos_token_ids must be a list of token ids")
        tokens: Any = data.get("special_tokens")
        missing = [k for k in ("num_layers", "num_kv_heads", "head_dim", "context_length") if k not in data]
        if missing:
            raise ManifestError(f"manifest: generation.{missing[0]} must be a positive integer")
        return cls(
            num_layers=data["num_layers"],
            num_kv_heads=data["num_kv_heads"],
            head_dim=data["head_dim"],
            context_length=data["context_length"],
            eos_token_ids=tuple(eos),
            chat_template=data.get("chat_template"),
            special_tokens={} if tokens is None else tokens,
            default_max_tokens=data.get("default_max_tokens", DEFAULT_MAX_TOKENS),
            architecture=data.get("architecture") or "",
        )
