"""Evaluate a version against its parent: agreement and latency, added to the version's report.

On a labelled dataset of the team (a classifier's), also top-1/top-5 accuracy of both and the drop;
a set none of whose labels the model knows is refused. The examples where the two disagree are in the
report (``disagreements``) and downloadable from the job's page.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from core.errors import ValidationFailed
from evalsets.services import dataset_for_job
from inference.jobs.registry import JobKindBase, KindOptions, Outcome, register
from inference.jobs.reporter import JobReporter
from inference.jobs.versions import (
    CLASSIFIER_TASKS,
    COMPARE_LIMIT,
    compare_with_parent,
    dataset_labels,
    job_source,
)
from inference.models import Job, ModelVersion


class EvaluateOptions(KindOptions):
    limit: int = Field(COMPARE_LIMIT, ge=1, le=10000, description="validation inputs compared")
    dataset_id: int | None = Field(
        None,
        ge=1,
        description="a validation dataset of the team (GET /api/v1/datasets); unset: the built-in set",
    )


@register
class Evaluate(JobKindBase):
    name = "evaluate"
    label = "Evaluate against parent"
    Options = EvaluateOptions

    @classmethod
    def check_source(cls, source: ModelVersion) -> None:
        """An ONNX version with a parent to compare with."""
        super().check_source(source)
        if source.parent_id is None:
            raise ValidationFailed("evaluation compares a version with its parent; this version has none")

    def run(self, job: Job, reporter: JobReporter, workdir: Path) -> Outcome:
        """Compare the version with its parent and merge the figures into its report."""
        options = EvaluateOptions.parse(job.options, kind=self.name)
        source = job_source(job)
        if source.parent is None:
            raise ValidationFailed("evaluation compares a version with its parent; this version has none")
        dataset, described, labels = None, None, None
        if options.dataset_id is not None:
            kinds = ("images",) if source.model.task == "image-classification" else ("texts", "prompts")
            dataset, described = dataset_for_job(
                team=job.team, dataset_id=options.dataset_id, dest=workdir / "dataset", kinds=kinds
            )
            if described["labelled"] and source.model.task in CLASSIFIER_TASKS:
                labels = dataset_labels(job, source, options.dataset_id, required=True)
        report = compare_with_parent(
            reporter, source.parent, source, limit=options.limit, dataset=dataset, labels=labels
        )
        if described is not None:
            report["dataset"] = described
        ModelVersion.objects.filter(pk=source.pk).update(report={**source.report, **report})
        return Outcome(report)
