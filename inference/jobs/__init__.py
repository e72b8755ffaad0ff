"""Conversion, quantization, evaluation and benchmark jobs: pure functions over paths, no Django.

Each job takes ``progress(percent, message)`` and ``cancelled() -> bool`` callables, checks
cancellation between steps (raising ``JobCancelled`` after removing its partial output) and
returns a JSON-ready report dict. Celery tasks wrap these; see docs/quantization.md.
"""

from inference.jobs.benchmark import benchmark, compare_latency
from inference.jobs.evaluate import evaluate
from inference.jobs.export import export_onnx
from inference.jobs.graph import convert_fp16, optimize_graph
from inference.jobs.quantize import quantize_dynamic_int8, quantize_static_int8, recommended_options
from inference.jobs.steps import JobCancelled

__all__ = [
    "JobCancelled",
    "benchmark",
    "compare_latency",
    "convert_fp16",
    "evaluate",
    "export_onnx",
    "optimize_graph",
    "quantize_dynamic_int8",
    "quantize_static_int8",
    "recommended_options",
]
