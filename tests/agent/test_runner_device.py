"""The runner's ``--device``: which execution providers it asks onnxruntime for, and a GPU device this
onnxruntime cannot give is an error (exit 2 with the reason), never a silent run on the CPU."""

from __future__ import annotations

import subprocess
import sys

import pytest

from inference.runner.engine import CPU, CUDA, TRT, check_session_providers, providers_for
from inference.runner.errors import ConfigError
from tests.support.runners import REPO, image_manifest, runner_command, write_manifest
from tests.support.tiny_models import colour_classifier

GPU_BUILD = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]


def test_each_device_asks_for_its_providers_in_order(tmp_path) -> None:
    assert providers_for("cpu", GPU_BUILD) == [CPU]
    assert providers_for("cuda", GPU_BUILD) == [(CUDA, {"device_id": "0"}), CPU]
    cache = tmp_path / "trt-cache" / "42" / "gpu1"
    assert providers_for("tensorrt", GPU_BUILD, trt_cache_dir=cache) == [
        (TRT, {"device_id": "0", "trt_engine_cache_enable": "True", "trt_engine_cache_path": str(cache)}),
        (CUDA, {"device_id": "0"}),
        CPU,
    ]
    assert cache.is_dir()  # made for TensorRT to write its engines into
    assert providers_for("auto", GPU_BUILD) == GPU_BUILD  # a runner started by hand: the best there is


def test_a_gpu_device_without_its_provider_is_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="device cuda needs CUDAExecutionProvider, but this onnxruntime "
                       "offers only CPUExecutionProvider .install onnxruntime-gpu"):  # fmt: skip
        providers_for("cuda", ["CPUExecutionProvider"])
    with pytest.raises(ConfigError, match="device tensorrt needs TensorrtExecutionProvider"):
        providers_for("tensorrt", ["CUDAExecutionProvider", "CPUExecutionProvider"])
    # onnxruntime drops a provider whose libraries fail to load and runs on the CPU: caught after loading.
    with pytest.raises(ConfigError, match="could only start CPUExecutionProvider"):
        check_session_providers("cuda", ["CPUExecutionProvider"])
    check_session_providers("cuda", ["CUDAExecutionProvider", "CPUExecutionProvider"])
    check_session_providers("cpu", ["CPUExecutionProvider"])


def test_a_runner_asked_for_cuda_on_a_cpu_host_exits_2_with_the_reason(tmp_path) -> None:
    colour_classifier(tmp_path / "model.onnx")
    write_manifest(tmp_path, image_manifest())
    result = subprocess.run(
        runner_command(tmp_path, "--device", "cuda"), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "device cuda needs CUDAExecutionProvider" in result.stderr
    bad = subprocess.run([sys.executable, "-m", "inference.runner", "--model-dir", str(tmp_path), "--device",
                          "tpu"], cwd=REPO, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 2 and "invalid choice: 'tpu'" in bad.stderr
