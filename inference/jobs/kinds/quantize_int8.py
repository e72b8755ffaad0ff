"""INT8 quantization: static (calibrated activations) or dynamic (weights only), compared with the parent.

With a target (and by default for image classifiers and embedding models) the job tunes: it tries
settings fastest-first in the sandbox (``inference.conversion.tuning``) and keeps the first that meets
the target, or the closest with ``target_met: false`` when none does. Every trial is in the report.
On a labelled ``dataset_id`` whose labels the model knows, trials are also scored for accuracy, and an
``accuracy_drop`` target (which needs such a set) can decide.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from core.errors import ValidationFailed
from evalsets.services import dataset_for_job
from inference.conversion.hardware import has_vnni
from inference.conversion.quantize import recommended_options
from inference.conversion.tuning import DEFAULT_TARGETS, MAX_TRIALS, METRICS, candidates
from inference.jobs.registry import JobKindBase, KindOptions, Outcome, register
from inference.jobs.reporter import JobReporter
from inference.jobs.versions import (
    CLASSIFIER_TASKS,
    COMPARE_LIMIT,
    dataset_labels,
    job_lineage,
    job_source,
    put_version,
    sandbox,
    version_inputs,
)
from inference.models import Job
from inference.services.registry import version_derive

UNSET = "unset: the recommended setting for the model's task (docs/quantization.md)"
STATIC_ONLY = ("method", "quant_format", "activation_type", "calibration_limit", "float_nodes")
JOB_ONLY = ("target", "tune", "max_trials", "dataset_id")  # how the job runs, not quantizer settings


TargetMetric = Literal[
    "confident_top1_agreement",
    "top1_agreement",
    "top5_containment",
    "cosine",
    "min_cosine",
    "next_token_agreement",
    "accuracy_drop",
]


class TuningTarget(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: TargetMetric
    min: float | None = Field(None, description="lowest acceptable value (agreements, cosine)")
    max: float | None = Field(None, description="highest acceptable value (accuracy_drop)")


class QuantizeInt8Options(KindOptions):
    mode: Literal["static", "dynamic"] | None = Field(
        None,
        description=f"static calibrates activations on validation inputs; dynamic quantizes weights only; {UNSET}",
    )
    method: Literal["MinMax", "Entropy", "Percentile"] | None = Field(
        None, description=f"calibration method (static); {UNSET}"
    )
    per_channel: bool | None = Field(None, description=f"one scale per output channel; {UNSET}")
    quant_format: Literal["QDQ", "QOperator"] | None = Field(
        None, description=f"graph format (static); {UNSET}"
    )
    activation_type: Literal["QInt8", "QUInt8"] | None = Field(
        None, description=f"activation type (static); {UNSET}"
    )
    weight_type: Literal["QInt8", "QUInt8"] | None = Field(None, description=f"weight type; {UNSET}")
    reduce_range: bool | None = Field(None, description=f"7-bit weights for older CPUs; {UNSET}")
    exclude_nodes: list[str] | None = Field(
        None, max_length=10000, description=f"node names or fnmatch patterns left in float; {UNSET}"
    )
    exclude_op_types: list[str] | None = Field(
        None,
        max_length=1000,
        description=f"op types whose weighted nodes stay in float (e.g. Gather); {UNSET}",
    )
    calibration_limit: int | None = Field(
        None, ge=1, le=10000, description="calibration inputs used (static); unset: 64"
    )
    keep_float_edges: bool | None = Field(
        None, description="leave the first and last weighted nodes in float; unset: no (tuning may try it)"
    )
    float_nodes: int | None = Field(
        None,
        ge=0,
        le=500,
        description="static: also leave in float the N nodes a per-node error analysis finds worst; unset: 0",
    )
    target: list[TuningTarget] | None = Field(
        None,
        max_length=8,
        description='tune until every target holds, e.g. [{"metric": "confident_top1_agreement", "min": 0.99}]; '
        "unset: the task's default target (image classification, embeddings)",
    )
    tune: bool | None = Field(
        None, description="search settings against the target; unset: on where a target applies"
    )
    max_trials: int = Field(MAX_TRIALS, ge=1, le=30, description="most configurations a tuning run tries")
    dataset_id: int | None = Field(
        None, ge=1, description="a validation dataset of the team (GET /api/v1/datasets); unset: built-in set"
    )

    @model_validator(mode="after")
    def _accuracy_needs_labels(self) -> Self:
        if self.dataset_id is None and any(t.metric == "accuracy_drop" for t in self.target or []):
            raise PydanticCustomError(
                "labelled_dataset",
                "an accuracy_drop target needs a labelled dataset: give options.dataset_id "
                "(a labelled image or text set of the team, GET /api/v1/datasets)",
            )
        return self


@register
class QuantizeInt8(JobKindBase):
    name = "quantize_int8"
    label = "INT8 quantization"
    Options = QuantizeInt8Options

    def run(self, job: Job, reporter: JobReporter, workdir: Path) -> Outcome:
        """Quantize (tuning where a target applies) in the sandbox; keep the chosen model as a new version."""
        source = job_source(job)
        task = source.model.task
        parsed = QuantizeInt8Options.parse(job.options, kind=self.name)
        given = parsed.model_dump(exclude_none=True, exclude=set(JOB_ONLY))
        base: dict[str, Any] = recommended_options(task) | given
        mode = base.pop("mode", "static")
        if mode == "dynamic":
            for key in STATIC_ONLY:
                base.pop(key, None)
        targets = _targets(parsed, task)
        tuning = bool(targets) if parsed.tune is None else parsed.tune
        if tuning and not targets:
            raise ValidationFailed(f"options.tune: a {task} model has no default target; give options.target")
        settings = candidates(mode, base, set(given), vnni=has_vnni()) if tuning else [base]
        args = {
            "mode": mode,
            "candidates": settings,
            "targets": targets if tuning else [],
            "max_trials": parsed.max_trials if tuning else 1,
            "limit": COMPARE_LIMIT,
        }
        if parsed.dataset_id is not None and task in CLASSIFIER_TASKS:
            wanted = any(t["metric"] == "accuracy_drop" for t in args["targets"])
            needed_by = "an accuracy_drop target needs a labelled dataset whose labels the model knows"
            args["labels"] = dataset_labels(
                job, source, parsed.dataset_id, required=wanted, needed_by=needed_by
            )
        report, model = _tune_in_sandbox(job, reporter, workdir, args, parsed.dataset_id)
        reporter.note(report["tuning"]["summary"])
        reporter.progress(96, "storing the new version")
        version = version_derive(
            parent=source,
            actor=job.created_by,
            model_path=model,
            precision="int8",
            lineage=job_lineage(job),
            report=report,
        )
        return Outcome(report, version)


def _targets(parsed: QuantizeInt8Options, task: str) -> list[dict[str, Any]]:
    if parsed.target is None:
        return list(DEFAULT_TARGETS.get(task, []))
    targets = []
    for index, target in enumerate(parsed.target):
        bound = "max" if METRICS[target.metric][1] == "max" else "min"
        if getattr(target, bound) is None:
            raise ValidationFailed(f"options.target.{index}: {target.metric} needs a {bound!r} bound")
        if target.metric == "accuracy_drop" and task not in CLASSIFIER_TASKS:
            raise ValidationFailed(
                f"options.target.{index}: accuracy_drop scores a classifier against labels; "
                f"a {task} model has none"
            )
        targets.append({"metric": target.metric, bound: getattr(target, bound)})
    return targets


def _tune_in_sandbox(
    job: Job, reporter: JobReporter, workdir: Path, args: dict[str, Any], dataset_id: int | None
) -> tuple[dict[str, Any], Path]:
    """Run the tuning task in one sandbox; the version report and the kept model's path in ``workdir``."""
    source = job_source(job)
    described = None
    with sandbox(reporter) as box:
        src = put_version(box, version_inputs(source), "model")
        if dataset_id is not None:
            kinds = ("images",) if src["task"] == "image-classification" else ("texts",)
            folder, described = dataset_for_job(
                team=job.team, dataset_id=dataset_id, dest=workdir / "dataset", kinds=kinds
            )
            args["dataset"] = str(box.put("dataset", folder))
        call = {**src, **args, "out": str(box.out)}
        tuned = box.call("tune_int8", call, progress=reporter.scaled(0, 95), cancelled=reporter.cancelled)
        model = box.take(str(tuned["file"]), workdir / "model.onnx")
    kept = ("conversion", "agreement", "latency", "file", "disagreements")
    tuning = {key: tuned[key] for key in tuned if key not in kept}
    if described is not None:
        tuning["dataset"] = described
    report = {
        "conversion": tuned["conversion"],
        "agreement": tuned["agreement"],
        "latency": tuned["latency"],
        "tuning": tuning,
    }
    if tuned.get("disagreements"):
        report["disagreements"] = tuned["disagreements"]
    return report, model
