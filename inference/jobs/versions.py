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

from core.errors import ValidationFailed
from evalsets.selectors import dataset_get_by_id
from inference import storage
from inference.jobs.reporter import JobReporter
from inference.models import Job, ModelVersion
from inference.sandbox import Sandbox, SandboxFailed, SandboxLimits, isolation, isolation_refusal
from inference.services.registry import version_derive, version_file

# What a converted model is compared on unless the kind says otherwise (validation inputs, timed runs).
COMPARE_LIMIT = 256
COMPARE_RUNS = 24
CLASSIFIER_TASKS = ("image-classification", "text-classification")  # scored against labelled sets


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


def sandbox_isolation_required() -> bool:
    return bool(settings.SANDBOX_REQUIRE_ISOLATION) and not settings.SANDBOX_UNSAFE


@contextmanager
def sandbox(reporter: JobReporter) -> Iterator[Sandbox]:
    """A sandbox for one job step; what the child printed lands in the job's log, scrubbed.

    Fails closed: where the sandbox can neither drop to another uid nor isolate the network (either gap
    is enough), the step is refused with the reason, unless the operator accepted the risk
    (``LANTAU_SANDBOX_UNSAFE=1``, or ``LANTAU_SANDBOX_REQUIRE_ISOLATION=0``); then the job log says so.
    """
    refusal = isolation_refusal(isolation())
    if refusal and sandbox_isolation_required():
        raise SandboxFailed(refusal)
    if refusal:
        reporter.note(f"sandbox: WARNING, running without isolation (accepted by the operator): {refusal}")
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
    dataset: Path | None = None,
    labels: list[str] | None = None,
) -> dict:
    """Agreement and latency of ``child`` against ``parent`` (both stored versions), over 0..95 % of the job.

    ``dataset``: a team's validation set as ``evalsets.services.dataset_materialize`` lays it out;
    ``labels``: the model's label list, to score accuracy on a labelled set. A classifier's report also
    has ``disagreements`` (the examples where the two top-1 answers differ).
    """
    with sandbox(reporter) as box:
        old = put_version(box, version_inputs(parent), "parent")
        new = put_version(box, version_inputs(child), "child")
        args = {**old, "parent": old["model"], "child": new["model"], "limit": limit, "runs": runs}
        if dataset is not None:
            args["dataset"] = str(box.put(dataset.name, dataset))
        if labels:
            args["labels"] = labels
        found = box.call("compare", args, progress=reporter.scaled(0, 95), cancelled=reporter.cancelled)
    return split_disagreements(found)


def split_disagreements(report: dict) -> dict:
    """The comparison's per-example disagreements beside its agreement figures rather than inside them."""
    agreement = report.get("agreement")
    if not isinstance(agreement, dict) or "disagreements" not in agreement:
        return report
    kept = {key: value for key, value in agreement.items() if key != "disagreements"}
    return {**report, "agreement": kept, "disagreements": agreement["disagreements"]}


def dataset_labels(
    job: Job, version: ModelVersion, dataset_id: int, *, required: bool, needed_by: str = ""
) -> list[str] | None:
    """The version's label list when the team's dataset is labelled with some of those labels, else None.

    ``required``: such a dataset is needed (by ``needed_by``, which starts the message); a
    ValidationFailed says what is wrong with this one.
    """

    dataset = dataset_get_by_id(team=job.team, dataset_id=dataset_id)
    known = {label.casefold() for label in version.labels or []}
    counts: dict[str, int] = dataset.class_counts or {}
    if dataset.labelled and any(label.casefold() in known for label in counts):
        return list(version.labels)
    if not dataset.labelled:
        why = f"dataset {dataset.name!r} has no labels"
    elif not known:
        why = f"{version} has no label list to score the labels of dataset {dataset.name!r} against"
    else:
        why = (
            f"none of the labels of dataset {dataset.name!r} ({', '.join(sorted(counts)[:5])}) is one of the "
            f"model's {len(version.labels)} labels ({', '.join(list(version.labels)[:5])}); "
            "labels are matched case-insensitively"
        )
    if required:
        raise ValidationFailed(f"{needed_by}: {why}" if needed_by else why)
    return None


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
    report = split_disagreements({key: result.get(key) for key in ("conversion", "agreement", "latency")})
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
