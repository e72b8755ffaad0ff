"""Untrained tiny Llama and GPT-2 models (Hugging Face folders) exported once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from inference.demo.tiny_chat import save_untrained
from inference.export.causal_lm import export_model_folder


def _export(tmp_path_factory: pytest.TempPathFactory, arch: str) -> Path:
    out = tmp_path_factory.mktemp(f"{arch}-export")
    export_model_folder(save_untrained(out / "hf", arch), out, deployment=f"tiny-{arch}")
    return out


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _export(tmp_path_factory, "llama")


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _export(tmp_path_factory, "gpt2")


@pytest.fixture(params=["llama", "gpt2"])
def exported_dir(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(f"{request.param}_dir")
