"""The onnxruntime session: loaded once, best provider first, run from one dedicated thread."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .errors import ConfigError

log = logging.getLogger("lantau.runner.engine")

PREFERRED_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
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
    """TensorRT, then CUDA, then CPU: whichever of these this onnxruntime build offers."""
    chosen = [name for name in PREFERRED_PROVIDERS if name in available]
    return chosen or list(available)


class Engine:
    """Wraps one ``InferenceSession``; ``run`` must only be called from the inference thread."""

    def __init__(self, model_path: Path, threads: int = 0, spinning: bool = False) -> None:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.intra_op_num_threads = threads or os.cpu_count() or 1
        options.inter_op_num_threads = 1
        # onnxruntime's workers busy-wait between operators by default. The decoding threads share these
        # cores, and measured on 2 shared cores spinning doubled the CPU time per image: off unless asked.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        self.providers = choose_providers(ort.get_available_providers())
        try:
            self.session = ort.InferenceSession(str(model_path), options, providers=self.providers)
        except Exception as exc:  # onnxruntime raises its own untyped errors for bad graphs
            raise ConfigError(f"cannot load model {model_path.name}: {str(exc).splitlines()[0]}") from None
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
