"""Untrained tiny Llama and GPT-2 models (Hugging Face folders) exported once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tiny_models import exported_causal_lm


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return exported_causal_lm(tmp_path_factory.mktemp("llama-export"), "llama")


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return exported_causal_lm(tmp_path_factory.mktemp("gpt2-export"), "gpt2")


@pytest.fixture(params=["llama", "gpt2"])
def exported_dir(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(f"{request.param}_dir")
