"""The onnxruntime session: loaded once, best provider first, run from one dedicated thread."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .config import DEVICES
from .errors import ConfigError

log = logging.getLogger("lantau.runner.engine")

PREFERRED_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
TRT, CUDA, CPU = PREFERRED_PROVIDERS
# What each device needs first; onnxruntime falls back along the list for operators the first lacks.
DEVICE_PROVIDERS = {"cpu": (CPU,), "cuda": (CUDA, CPU), "tensorrt": (TRT, CUDA, CPU)}
ProviderEntry = str | tuple[str, dict[str, str]]
NUMPY_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: np.dtype
    shape: tuple[int | str | None, ...]  # ints for fixed dims, names or None for dynamic ones


def choose_providers(available: list[str]) -> list[str]:
    """TensorRT, then CUDA, then CPU: whichever of these this onnxruntime build offers (``--device auto``)."""
    chosen = [name for name in PREFERRED_PROVIDERS if name in available]
    return chosen or list(available)


def providers_for(
    device: str, available: list[str], *, trt_cache_dir: Path | None = None, device_id: int = 0
) -> list[ProviderEntry]:
    """The execution providers, with their options, for ``device``; ConfigError when this onnxruntime
    build lacks the provider the device needs: a replica asked to run on CUDA must never run on the CPU
    unnoticed. ``device_id`` is 0 under ``CUDA_VISIBLE_DEVICES`` pinning (the agent pins each replica)."""
    if device == "auto":
        return list(choose_providers(available))
    if device not in DEVICE_PROVIDERS:
        raise ConfigError(f"unknown device {device!r}: one of {', '.join(DEVICES)}")
    wanted = DEVICE_PROVIDERS[device]
    if wanted[0] not in available:
        hint = " (install onnxruntime-gpu and the CUDA libraries)" if device != "cpu" else ""
        raise ConfigError(
            f"device {device} needs {wanted[0]}, but this onnxruntime offers only "
            f"{', '.join(available) or 'nothing'}{hint}"
        )
    chosen: list[ProviderEntry] = []
    for name in wanted:
        if name == TRT:
            options = {"device_id": str(device_id), "trt_engine_cache_enable": "True"}
            if trt_cache_dir is not None:
                trt_cache_dir.mkdir(parents=True, exist_ok=True)
                options["trt_engine_cache_path"] = str(trt_cache_dir)
            chosen.append((TRT, options))
        elif name == CUDA and CUDA in available:
            chosen.append((CUDA, {"device_id": str(device_id)}))
        elif name == CPU:
            chosen.append(CPU)
    return chosen


def provider_names(providers: list[ProviderEntry]) -> list[str]:
    return [entry if isinstance(entry, str) else entry[0] for entry in providers]


def check_session_providers(device: str, used: list[str]) -> None:
    """onnxruntime quietly drops a provider whose libraries fail to load (a missing libcudnn, say) and
    runs on the CPU: refuse that when the device asked for a GPU."""
    if device in DEVICE_PROVIDERS and DEVICE_PROVIDERS[device][0] not in used:
        raise ConfigError(
            f"device {device} needs {DEVICE_PROVIDERS[device][0]}, but onnxruntime could only start "
            f"{', '.join(used)} (check the CUDA/cuDNN/TensorRT libraries and the GPU driver)"
        )


class Engine:
    """Wraps one ``InferenceSession``; ``run`` must only be called from the inference thread."""

    def __init__(
        self,
        model_path: Path,
        threads: int = 0,
        spinning: bool = False,
        *,
        device: str = "auto",
        trt_cache_dir: Path | None = None,
    ) -> None:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.intra_op_num_threads = threads or os.cpu_count() or 1
        options.inter_op_num_threads = 1
        # onnxruntime's workers busy-wait between operators by default. The decoding threads share these
        # cores, and measured on 2 shared cores spinning doubled the CPU time per image: off unless asked.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        chosen = providers_for(device, ort.get_available_providers(), trt_cache_dir=trt_cache_dir)
        self.providers = provider_names(chosen)
        try:
            self.session = ort.InferenceSession(str(model_path), options, providers=chosen)
        except Exception as exc:  # onnxruntime raises its own untyped errors for bad graphs
            raise ConfigError(f"cannot load model {model_path.name}: {str(exc).splitlines()[0]}") from None
        check_session_providers(device, self.session.get_providers())
        self.inputs = [self._spec(arg) for arg in self.session.get_inputs()]
        self.outputs = [self._spec(arg) for arg in self.session.get_outputs()]
        # Only the first output is used; fetching just it lets onnxruntime skip e.g. a BERT pooler.
        self._output_names = [self.outputs[0].name]
        log.info(
            "loaded %s with providers %s (intra-op threads %d)",
            model_path.name,
            ",".join(self.session.get_providers()),
            options.intra_op_num_threads,
        )

    @staticmethod
    def _spec(arg: ort.NodeArg) -> TensorSpec:
        dtype = NUMPY_TYPES.get(arg.type)
        if dtype is None:
            raise ConfigError(f"model tensor {arg.name!r} has unsupported type {arg.type}")
        return TensorSpec(arg.name, np.dtype(dtype), tuple(arg.shape))

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        outputs: list[np.ndarray] = self.session.run(self._output_names, feeds)  # onnxruntime is untyped
        return outputs
