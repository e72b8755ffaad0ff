"""Accuracy-aware INT8 tuning: try settings in order, keep the first (fastest-first) that meets the target.

The idea behind Intel Neural Compressor's and Olive's tuning loops. One run loads the validation inputs
and the parent's outputs once; each trial quantizes, compares the result with the parent on those
inputs and times both at batch 8. Candidates are ordered by expected speed: settings that only change
how ranges are calibrated (method, calibration size, per-channel scales, u8/s8) first, then graphs that
keep more nodes in float (first and last layers, then those the per-node error analysis finds worst).
When nothing meets the target the best candidate is kept and the report says so.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inference.conversion import hardware
from inference.conversion.benchmark import compare_latency
from inference.conversion.evaluate import (
    CLASSIFIERS,
    Validation,
    compare_outputs,
    disagreements,
    labelled_accuracy,
    model_outputs,
    validation_set,
)
from inference.conversion.quantize import quantize_dynamic_int8, quantize_static_int8
from inference.conversion.steps import Cancelled, Progress, Steps, remove

# Target metric name -> (figure in the evaluation, "min" or "max" bound).
METRICS: dict[str, tuple[str, str]] = {
    "confident_top1_agreement": ("confident_top1_agreement", "min"),
    "top1_agreement": ("top1_agreement", "min"),
    "top5_containment": ("parent_top1_in_child_top5", "min"),
    "cosine": ("mean_cosine", "min"),
    "min_cosine": ("min_cosine", "min"),
    "next_token_agreement": ("next_token_agreement", "min"),
    "accuracy_drop": ("accuracy_drop", "max"),
}
DEFAULT_TARGETS: dict[str, list[dict[str, Any]]] = {
    "image-classification": [
        {"metric": "confident_top1_agreement", "min": 0.99},
        {"metric": "top5_containment", "min": 0.99},
    ],
    "feature-extraction": [{"metric": "cosine", "min": 0.99}],
}
TIMING_BATCH = 8
TIMING_RUNS = 12
MAX_TRIALS = 8


@dataclass(frozen=True)
class Target:
    metric: str
    bound: float

    @property
    def figure(self) -> str:
        return METRICS[self.metric][0]

    @property
    def kind(self) -> str:
        return METRICS[self.metric][1]

    def met(self, agreement: Mapping[str, Any]) -> bool:
        value = agreement.get(self.figure)
        if value is None:
            return False
        return bool(value >= self.bound) if self.kind == "min" else bool(value <= self.bound)

    def margin(self, agreement: Mapping[str, Any]) -> float:
        """How far past the bound (negative: short of it); the best of several failures is the least short."""
        value = agreement.get(self.figure)
        if value is None:
            return -1.0
        return float(value) - self.bound if self.kind == "min" else self.bound - float(value)

    def describe(self) -> str:
        return f"{self.metric} {'>=' if self.kind == 'min' else '<='} {self.bound:g}"


def parse_targets(given: list[dict[str, Any]]) -> list[Target]:
    """``[{"metric": ..., "min"|"max": ...}]`` as targets; ValueError names what is wrong."""
    targets = []
    for item in given:
        metric = item.get("metric")
        if metric not in METRICS:
            raise ValueError(f"unknown target metric {metric!r}; choose one of {', '.join(METRICS)}")
        kind = METRICS[metric][1]
        if item.get(kind) is None:
            raise ValueError(f"target {metric} needs a {kind!r} bound")
        targets.append(Target(metric, float(item[kind])))
    return targets


def candidates(mode: str, base: dict[str, Any], fixed: set[str], *, vnni: bool) -> list[dict[str, Any]]:
    """Settings to try, fastest expected first; knobs the person set (``fixed``) are never varied."""
    steps = _static_steps(vnni) if mode == "static" else _dynamic_steps()
    found: list[dict[str, Any]] = [dict(base)]
    for change in steps:
        if fixed & set(change):
            continue
        candidate = base | change
        if candidate not in found:
            found.append(candidate)
    return found


def _static_steps(vnni: bool) -> list[dict[str, Any]]:
    # Without VNNI, u8 x s8 products can saturate 16-bit sums (onnxruntime's AVX2 kernels): 7-bit weights
    # (reduce_range) or u8 weights avoid it, so those come earlier on such hosts.
    saturation: list[dict[str, Any]] = [{"reduce_range": True}, {"weight_type": "QUInt8"}]
    steps: list[dict[str, Any]] = [
        {"method": "Percentile"},
        {"method": "Entropy"},
        {"per_channel": True},
        {"method": "Percentile", "calibration_limit": 256},
        {"activation_type": "QInt8"},
        {"quant_format": "QOperator"},
        {"keep_float_edges": True},
        {"keep_float_edges": True, "method": "Percentile"},
        {"float_nodes": 4},
        {"float_nodes": 12},
    ]
    return saturation + steps if not vnni else steps[:4] + saturation + steps[4:]


def _dynamic_steps() -> list[dict[str, Any]]:
    return [
        {"per_channel": True},
        {"reduce_range": True},
        {"keep_float_edges": True},
        {"keep_float_edges": True, "reduce_range": True},
    ]


@dataclass
class TuningRun:
    """What a tuning run needs: the source (in the sandbox), its task and companions, where trials go."""

    model: Path
    out: Path
    task: str
    mode: str
    preprocessing: dict[str, Any] | None = None
    tokenizer: Path | None = None
    dataset: Path | None = None
    limit: int = 256
    labels: list[str] | None = None  # the model's label list: accuracy on a labelled dataset


def tune(
    run: TuningRun,
    settings: list[dict[str, Any]],
    targets: list[Target],
    *,
    max_trials: int = MAX_TRIALS,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
) -> dict[str, Any]:
    """Try ``settings`` in order (at most ``max_trials``) until one meets every target; the report.

    Each trial's model is ``out/trial-<n>.onnx``; only the kept one remains when this returns.
    """
    step = Steps(progress, cancelled)
    step(0, "loading the validation inputs")
    valset = validation_set(
        run.task, run.dataset, preprocessing=run.preprocessing, tokenizer=run.tokenizer, limit=run.limit
    )
    parent = model_outputs(run.model, valset.inputs, step)
    if any(t.metric == "accuracy_drop" for t in targets) and not labelled_accuracy(
        run.task, parent, parent, valset.labels, run.labels
    ):
        raise ValueError("an accuracy_drop target needs a labelled dataset and the model's label list")
    trials: list[dict[str, Any]] = []
    settings = settings[:max_trials]
    for index, options in enumerate(settings):
        share = 95 / len(settings)
        trial = _trial(run, index, options, valset, parent, targets, _scaled(step, 3 + index * share, share))
        trials.append(trial)
        step.progress(3 + (index + 1) * share, _line(trial))
        if trial["met"]:
            break
    chosen = _choose(trials, targets)
    for trial in trials:
        if trial is not chosen:
            remove(run.out / trial["file"])
    step(97, f"timing the kept model (trial {chosen['trial']}) at batch 1 and {TIMING_BATCH}")
    chosen["latency"] = compare_latency(
        run.model, run.out / chosen["file"], run.task, (1, TIMING_BATCH), cancelled=step.cancelled
    )
    step.progress(100, "done")
    return _report(run, trials, chosen, targets, len(settings), max_trials)


def _trial(
    run: TuningRun,
    index: int,
    options: dict[str, Any],
    valset: Validation,
    parent: np.ndarray,
    targets: list[Target],
    step: Steps,
) -> dict[str, Any]:
    dst = run.out / f"trial-{index + 1}.onnx"
    started = time.monotonic()
    step(0, f"trial {index + 1}: quantizing ({_summary(options)})")
    if run.mode == "dynamic":
        conversion = quantize_dynamic_int8(run.model, dst, **options, cancelled=step.cancelled)
    else:
        conversion = quantize_static_int8(
            run.model,
            dst,
            task=run.task,
            preprocessing=run.preprocessing,
            tokenizer=run.tokenizer,
            **options,
            cancelled=step.cancelled,
        )
    step(50, f"trial {index + 1}: comparing with the parent")
    child = model_outputs(dst, valset.inputs, step)
    agreement = {
        "count": int(parent.shape[0]),
        **compare_outputs(run.task, parent, child, valset.inputs),
        **labelled_accuracy(run.task, parent, child, valset.labels, run.labels),
    }
    differ = disagreements(parent, child, valset, run.labels) if run.task in CLASSIFIERS else None
    step(75, f"trial {index + 1}: timing at batch {TIMING_BATCH}")
    latency = compare_latency(
        run.model, dst, run.task, (TIMING_BATCH,), runs=TIMING_RUNS, rounds=3, cancelled=step.cancelled
    )
    batch = str(TIMING_BATCH)
    return {
        "trial": index + 1,
        "file": dst.name,
        "options": {"mode": run.mode, **options},
        "excluded": conversion["options"].get("excluded", []),
        "float_count": len(conversion["options"].get("excluded", [])),
        "sensitivity": conversion["options"].get("sensitivity", []),
        "agreement": agreement,
        "latency_ms": latency["child"]["batches"][batch]["p50_ms"],
        "parent_latency_ms": latency["parent"]["batches"][batch]["p50_ms"],
        "speedup": latency["speedup"][batch],
        "size_bytes": conversion.get("size_bytes"),
        "targets": {t.describe(): t.met(agreement) for t in targets},
        "met": all(t.met(agreement) for t in targets),
        "seconds": round(time.monotonic() - started, 1),
        "conversion": conversion,
        "latency": latency,
        "disagreements": differ,
    }


def _choose(trials: list[dict[str, Any]], targets: list[Target]) -> dict[str, Any]:
    met = [t for t in trials if t["met"]]
    if met:
        return min(met, key=lambda t: t["latency_ms"])
    # Nothing met: the candidate meeting the most targets, then the least short of the rest.
    return max(
        trials,
        key=lambda t: (
            sum(x.met(t["agreement"]) for x in targets),
            min((x.margin(t["agreement"]) for x in targets), default=0.0),
        ),
    )


def _report(
    run: TuningRun,
    trials: list[dict[str, Any]],
    chosen: dict[str, Any],
    targets: list[Target],
    planned: int,
    max_trials: int,
) -> dict[str, Any]:
    met = bool(chosen["met"])
    wanted = " and ".join(t.describe() for t in targets) or "none"
    if not targets:
        summary = "no target: quantized once with the given settings"
    elif met:
        summary = f"trial {chosen['trial']} of {len(trials)} met the target ({wanted}): kept it"
    else:
        summary = (
            f"no configuration met the target ({wanted}) in {len(trials)} trials; kept the closest, "
            f"trial {chosen['trial']}, which falls short: compare its figures before deploying it"
        )
    fastest = min(trials, key=lambda t: t["latency_ms"])
    return {
        "targets": [t.describe() for t in targets],
        "target_met": met,
        "summary": summary,
        "chosen": chosen["trial"],
        "file": chosen["file"],
        "max_trials": max_trials,
        "candidates": planned,
        "trials": [
            {k: v for k, v in t.items() if k not in ("conversion", "latency", "file", "disagreements")}
            for t in trials
        ],
        "conversion": chosen["conversion"],
        "disagreements": chosen["disagreements"],
        "agreement": chosen["agreement"],
        "latency": chosen["latency"],
        "hardware": hardware.describe()
        | {"fastest_format": _format(fastest["options"]), "fastest_trial": fastest["trial"]},
    }


def _format(options: dict[str, Any]) -> str:
    if options.get("mode") == "dynamic":
        return f"dynamic ({_short(options.get('weight_type', 'QInt8'))} weights)"
    activation, weight = (
        _short(options.get("activation_type", "QUInt8")),
        _short(options.get("weight_type", "QInt8")),
    )
    return f"{options.get('quant_format', 'QDQ')} {activation}/{weight}"


def _short(kind: str) -> str:
    return {"QUInt8": "u8", "QInt8": "s8"}.get(kind, kind)


def _summary(options: dict[str, Any]) -> str:
    keys = (
        "method",
        "per_channel",
        "activation_type",
        "weight_type",
        "reduce_range",
        "keep_float_edges",
        "float_nodes",
    )
    return ", ".join(f"{k}={options[k]}" for k in keys if k in options)


def _line(trial: dict[str, Any]) -> str:
    figures = ", ".join(f"{k} {'met' if v else 'missed'}" for k, v in trial["targets"].items())
    return (
        f"trial {trial['trial']}: {trial['speedup']:.2f}x at batch {TIMING_BATCH}; {figures or 'no target'}"
    )


def _scaled(step: Steps, low: float, span: float) -> Steps:
    def progress(percent: float, message: str) -> None:
        step.progress(low + span * percent / 100, message)

    return Steps(progress, step.cancelled)
