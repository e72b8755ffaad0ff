"""Steps the conversion kinds share: a version's files as paths, a comparison with the parent, the new version."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from inference import storage
from inference.conversion.benchmark import compare_latency
from inference.conversion.evaluate import evaluate
from inference.jobs.runner import JobReporter
from inference.models import Job, ModelVersion
from inference.services.registry import version_derive, version_file

# What a converted model is compared on unless the kind says otherwise (validation inputs, timed runs).
COMPARE_LIMIT = 256
COMPARE_RUNS = 24


@dataclass
class VersionInputs:
    """Paths a job reads: the model (beside its external data files, if any) and its companions."""

    model: Path
    tokenizer: Path | None
    preprocessing: dict | None
    task: str


def job_source(job: Job) -> ModelVersion:
    """The version a job works on (every kind but an import has one)."""
    if job.source is None:
        raise ValueError(f"job {job.pk} ({job.kind}) has no source version")
    return job.source


def version_inputs(version: ModelVersion) -> VersionInputs:
    """Where a version's files are; a model with external data is laid out in a shared linked folder."""
    model = version_file(version, "model")
    if version.artifacts.filter(role="external-data").exists():
        model = storage.linked_folder(version.artifacts.all()) / "model.onnx"
    if model is None:
        raise ValueError(f"{version} has no model file")
    return VersionInputs(
        model=model,
        tokenizer=version_file(version, "tokenizer"),
        preprocessing=version.preprocessing or None,
        task=version.model.task,
    )


def compare_with_parent(
    reporter: JobReporter,
    parent: ModelVersion,
    child: Path,
    low: float,
    *,
    limit: int = COMPARE_LIMIT,
    runs: int = COMPARE_RUNS,
) -> dict:
    """Agreement and latency of ``child`` against ``parent``, reported over ``low``..95 % of the job."""
    src = version_inputs(parent)
    middle = low + (95 - low) / 2
    agreement = evaluate(
        src.model,
        child,
        src.task,
        preprocessing=src.preprocessing,
        tokenizer=src.tokenizer,
        limit=limit,
        progress=reporter.scaled(low, middle),
        cancelled=reporter.cancelled,
    )
    latency = compare_latency(
        src.model,
        child,
        src.task,
        runs=runs,
        progress=reporter.scaled(middle, 95),
        cancelled=reporter.cancelled,
    )
    return {"agreement": agreement, "latency": latency}


def job_lineage(job: Job) -> dict:
    """How a derived version came to be: recorded on the version, shown beside its figures."""
    return {
        "source": "job",
        "job": job.pk,
        "kind": job.kind,
        "parent": str(job_source(job)),
        "options": job.options,
    }


def derive_compared(
    job: Job, reporter: JobReporter, converted: Path, *, precision: str, conversion: dict
) -> tuple[dict, ModelVersion]:
    """Compare a converted ONNX model with the job's source, then store it as the source's next version."""
    source = job_source(job)
    report = {"conversion": conversion, **compare_with_parent(reporter, source, converted, 50)}
    reporter.progress(96, "storing the new version")
    version = version_derive(
        parent=source,
        actor=job.created_by,
        model_path=converted,
        precision=precision,
        lineage=job_lineage(job),
        report=report,
    )
    return report, version
