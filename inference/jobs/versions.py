"""Steps the conversion kinds share: a version's files as paths, a comparison with the parent, the new version.

Every step that loads or converts a model runs in the sandbox (``inference.sandbox``): the kinds copy
the version's files in, call one task and take the output back; only storing happens in the worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from inference import storage
from inference.jobs.runner import JobReporter
from inference.models import Job, ModelVersion
from inference.sandbox import Sandbox, SandboxLimits
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
    linked: bool = False  # the model sits in a linked folder beside its external data


def job_source(job: Job) -> ModelVersion:
    """The version a job works on (every kind but an import has one)."""
    if job.source is None:
        raise ValueError(f"job {job.pk} ({job.kind}) has no source version")
    return job.source


def version_inputs(version: ModelVersion) -> VersionInputs:
    """Where a version's files are; a model with external data is laid out in a shared linked folder."""
    model = version_file(version, "model")
    linked = version.artifacts.filter(role="external-data").exists()
    if linked:
        model = storage.linked_folder(version.artifacts.all()) / "model.onnx"
    if model is None:
        raise ValueError(f"{version} has no model file")
    return VersionInputs(
        model=model,
        tokenizer=version_file(version, "tokenizer"),
        preprocessing=version.preprocessing or None,
        task=version.model.task,
        linked=linked,
    )


def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(
        memory_bytes=settings.SANDBOX_MEMORY_BYTES,
        cpu_seconds=settings.SANDBOX_CPU_S,
        timeout_s=float(settings.SANDBOX_TIMEOUT_S),
        file_bytes=settings.SANDBOX_FILE_BYTES,
        user=settings.SANDBOX_USER,
    )


@contextmanager
def sandbox(reporter: JobReporter) -> Iterator[Sandbox]:
    """A sandbox for one job step; what the child printed lands in the job's log, scrubbed."""
    with Sandbox(sandbox_limits(), note=reporter.note) as box:
        yield box


def put_version(box: Sandbox, src: VersionInputs, name: str) -> dict[str, Any]:
    """Copy a version's model (with its external data) and tokenizer into the box: the task's arguments."""
    model = box.put(name, src.model.parent) / "model.onnx" if src.linked else box.put(name, src.model)
    tokenizer = box.put(f"{name}-tokenizer", src.tokenizer) if src.tokenizer else None
    return {
        "model": str(model),
        "task": src.task,
        "preprocessing": src.preprocessing,
        "tokenizer": str(tokenizer) if tokenizer else None,
    }


def compare_with_parent(
    reporter: JobReporter,
    parent: ModelVersion,
    child: ModelVersion,
    *,
    limit: int = COMPARE_LIMIT,
    runs: int = COMPARE_RUNS,
) -> dict:
    """Agreement and latency of ``child`` against ``parent`` (both stored versions), over 0..95 % of the job."""
    with sandbox(reporter) as box:
        old = put_version(box, version_inputs(parent), "parent")
        new = put_version(box, version_inputs(child), "child")
        args = {**old, "parent": old["model"], "child": new["model"], "limit": limit, "runs": runs}
        return box.call("compare", args, progress=reporter.scaled(0, 95), cancelled=reporter.cancelled)


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
    job: Job, reporter: JobReporter, workdir: Path, *, op: str, options: dict[str, Any], precision: str
) -> tuple[dict, ModelVersion]:
    """Convert the job's source in the sandbox (``op``), compare it there with the source, store the result.

    ``options`` may name the source's tokenizer and preprocessing as ``"$tokenizer"``/``"$preprocessing"``
    (static quantization calibrates on them): they are replaced by the copies inside the box.
    """
    source = job_source(job)
    with sandbox(reporter) as box:
        src = put_version(box, version_inputs(source), "model")
        options = {
            key: src.get(value[1:]) if value in ("$tokenizer", "$preprocessing") else value
            for key, value in options.items()
        }
        compare = {**src, "parent": src["model"], "limit": COMPARE_LIMIT, "runs": COMPARE_RUNS}
        args = {
            "op": op,
            "model": src["model"],
            "dst": str(box.out / "model.onnx"),
            "options": options,
            "compare": compare,
        }
        result = box.call("convert", args, progress=reporter.scaled(0, 95), cancelled=reporter.cancelled)
        converted = box.take("model.onnx", workdir / "model.onnx")
    report = {key: result.get(key) for key in ("conversion", "agreement", "latency")}
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
