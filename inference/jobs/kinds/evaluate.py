"""Evaluate a version against its parent: agreement and latency, added to the version's report."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from core.errors import ValidationFailed
from inference.jobs.registry import JobKindBase, KindOptions, Outcome, register
from inference.jobs.runner import JobReporter
from inference.jobs.versions import COMPARE_LIMIT, compare_with_parent, job_source
from inference.models import Job, ModelVersion


class EvaluateOptions(KindOptions):
    limit: int = Field(COMPARE_LIMIT, ge=1, le=10000, description="validation inputs compared")


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
        report = compare_with_parent(reporter, source.parent, source, limit=options.limit)
        ModelVersion.objects.filter(pk=source.pk).update(report={**source.report, **report})
        return Outcome(report)
