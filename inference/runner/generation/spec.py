"""The manifest's ``generation`` section for task ``text-generation``: defined in ``contract.generation``.

Kept here so the runner's generation code reads it as a ConfigError (exit code 2) like any other
manifest problem.
"""

from __future__ import annotations

from typing import Any

from contract.generation import DEFAULT_MAX_TOKENS, GenerationSpec, ManifestError

from ..errors import ConfigError

__all__ = ["DEFAULT_MAX_TOKENS", "GenerationSpec", "parse_generation"]


def parse_generation(data: Any) -> GenerationSpec:
    """Validate the ``generation`` object; raise ConfigError with a one-line reason."""
    try:
        return GenerationSpec.from_dict(data)
    except ManifestError as exc:
        raise ConfigError(str(exc)) from None
