"""Reproduce the figures in docs/quantization.md for a demo model.

    python -m bench.report efficientnet [--workdir DIR] [--options '{"method": "Entropy"}']
    python -m bench.report minilm

Exports the demo model to FP32 ONNX, quantizes it with ``recommended_options(task)`` (overridden by
``--options``), evaluates agreement on the built-in validation set and times both models in
alternating rounds. Prints one JSON report.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from inference.conversion.benchmark import compare_latency
from inference.conversion.evaluate import evaluate
from inference.conversion.quantize import quantize_dynamic_int8, quantize_static_int8, recommended_options

DEMOS = {"efficientnet": "image-classification", "minilm": "feature-extraction"}


def _export_demo(name: str, workdir: Path) -> tuple[Path, dict]:
    parent = workdir / f"{name}-fp32.onnx"
    if name == "efficientnet":
        from inference.demo import efficientnet

        if not parent.exists():
            efficientnet.export_onnx(parent)
        return parent, {"preprocessing": efficientnet.PREPROCESSING}
    from inference.demo import minilm

    if not parent.exists():
        minilm.export_onnx(parent)
    return parent, {"tokenizer": minilm.model_folder() / "tokenizer.json"}


def quantize(parent: Path, child: Path, task: str, options: dict, inputs: dict) -> dict:
    """Quantize with ``options`` (a ``recommended_options`` shaped dict)."""
    options = dict(options)
    mode = options.pop("mode")
    if mode == "dynamic":
        return quantize_dynamic_int8(parent, child, **options)
    return quantize_static_int8(parent, child, task=task, **inputs, **options)


def report(name: str, workdir: Path, overrides: dict, runs: int, rounds: int) -> dict:
    task = DEMOS[name]
    workdir.mkdir(parents=True, exist_ok=True)
    parent, inputs = _export_demo(name, workdir)
    options = recommended_options(task) | overrides
    child = workdir / f"{name}-int8.onnx"
    child.unlink(missing_ok=True)
    quantized = quantize(parent, child, task, options, inputs)
    agreement = evaluate(parent, child, task, **inputs)
    latency = compare_latency(parent, child, task, (1, 8), runs=runs, rounds=rounds)
    return {
        "model": name,
        "task": task,
        "options": quantized["options"],
        "agreement": agreement,
        "speedup": latency["speedup"],
        "size_ratio": latency["size_ratio"],
        "parent": latency["parent"],
        "child": latency["child"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=sorted(DEMOS))
    parser.add_argument("--workdir", type=Path, default=None, help="keep the exported models here")
    parser.add_argument("--options", default="{}", help="JSON overriding recommended_options(task)")
    parser.add_argument("--runs", type=int, default=40, help="timed runs per model and batch size")
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds the runs are split into")
    args = parser.parse_args(argv)
    overrides = json.loads(args.options)
    if args.workdir is not None:
        result = report(args.model, args.workdir, overrides, args.runs, args.rounds)
    else:
        with tempfile.TemporaryDirectory(prefix="lantau-report-") as tmp:
            result = report(args.model, Path(tmp), overrides, args.runs, args.rounds)
    json.dump(result, sys.stdout, indent=2, default=str)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
