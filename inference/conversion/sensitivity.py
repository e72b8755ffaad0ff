"""Per-node error analysis: which weighted nodes add the most quantization error to a graph.

Both graphs (the float one and a QDQ-quantized one) are run on a few inputs with the inputs and outputs
of every weighted node (Conv, Gemm, MatMul with an initializer) exposed. A node's error is the relative
noise ``|q - f|^2 / |f|^2`` of its output; what it *adds* is that minus the noise at the output of the
weighted node before it (the graphs are mostly chains; residual branches make this an estimate).
The nodes adding the most are the first to keep in float. Graph optimisations are off, so the QDQ graph
runs as float arithmetic with fake quantization: the figure is the format's error, not a kernel's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inference.conversion import datasets

PROBE_INPUTS = 16  # enough to rank nodes; the analysis runs both graphs with every tensor exposed


@dataclass(frozen=True)
class WeightedNode:
    name: str
    op_type: str
    input: str
    output: str


def weighted_nodes(model_path: Path) -> list[WeightedNode]:
    """Nodes carrying a weight initializer of rank >= 2, in graph (topological) order."""
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    weights = {t.name for t in graph.initializer if len(t.dims) >= 2}
    return [
        WeightedNode(node.name, node.op_type, node.input[0], node.output[0])
        for node in graph.node
        if node.name and node.input and any(name in weights for name in node.input[1:])
    ]


def edge_nodes(model_path: Path) -> list[str]:
    """The first and the last weighted nodes (the stem and the classifier or output projection)."""
    nodes = weighted_nodes(model_path)
    return sorted({nodes[0].name, nodes[-1].name}) if nodes else []


def sensitive_nodes(
    float_path: Path,
    quantized_path: Path,
    feeds: dict[str, np.ndarray],
    count: int,
    scratch: Path,
    skip: tuple[str, ...] | list[str] = (),
) -> list[dict[str, Any]]:
    """The ``count`` weighted nodes (not in ``skip``) adding the most error, worst first, with their figures."""
    nodes = [node for node in weighted_nodes(float_path) if node.name not in skip]
    tensors = sorted({node.output for node in nodes})
    probe = {name: value[:PROBE_INPUTS] for name, value in feeds.items()}
    floats = _exposed(float_path, tensors, probe, scratch / "float-exposed.onnx")
    quantized = _exposed(quantized_path, tensors, probe, scratch / "quantized-exposed.onnx")
    ranked: list[dict[str, Any]] = []
    before = 0.0
    for node in nodes:
        if node.output not in floats or node.output not in quantized:
            continue
        # Noise is compared at weighted nodes' outputs only: the quantizer may fold an activation (Clip,
        # Relu) into the node before it, so other tensors do not always mean the same in both graphs.
        after = _noise(floats[node.output], quantized[node.output])
        ranked.append(
            {"node": node.name, "op_type": node.op_type, "added_noise": after - before, "noise": after}
        )
        before = after
    ranked.sort(key=lambda item: -item["added_noise"])
    return [
        {**item, "added_noise": round(item["added_noise"], 6), "noise": round(item["noise"], 6)}
        for item in ranked[:count]
    ]


def _noise(reference: np.ndarray | None, value: np.ndarray | None) -> float:
    if reference is None or value is None or reference.shape != value.shape:
        return 0.0
    power = float(np.square(reference).sum()) or 1e-12
    return float(np.square(value - reference).sum()) / power


def _exposed(
    model_path: Path, tensors: list[str], feeds: dict[str, np.ndarray], scratch: Path
) -> dict[str, np.ndarray]:
    """Values of ``tensors`` (those the graph has) over ``feeds``, run without graph optimisations."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(model_path))
    produced = {out for node in model.graph.node for out in node.output}
    present = {o.name for o in model.graph.output}
    wanted = [name for name in tensors if name in produced or name in feeds]
    for name in wanted:
        if name in produced and name not in present:
            model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    onnx.save(model, str(scratch))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(str(scratch), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    inputs = {i.name for i in session.get_inputs()}
    found: dict[str, list[np.ndarray]] = {name: [] for name in wanted}
    for batch in datasets.batches(feeds, 8):
        values = dict(
            zip(names, session.run(names, {k: v for k, v in batch.items() if k in inputs}), strict=True)
        )
        values |= {k: v for k, v in batch.items() if k in found}
        for name in wanted:
            found[name].append(np.asarray(values[name], dtype=np.float32))
    scratch.unlink(missing_ok=True)
    return {name: np.concatenate(parts) for name, parts in found.items() if parts}
