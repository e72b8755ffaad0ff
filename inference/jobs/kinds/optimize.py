"""Offline graph optimisation by onnxruntime, then compared with the parent."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from inference.jobs.registry import JobKindBase, KindOptions, Outcome, register
from inference.jobs.reporter import JobReporter
from inference.jobs.versions import derive_compared, job_source
from inference.models import Job


class OptimizeOptions(KindOptions):
    level: Literal["basic", "extended"] = Field(
        "extended",
        description="onnxruntime optimisation level (not `all`: its layouts are tied to one machine)",
    )


@register
class Optimize(JobKindBase):
    name = "optimize"
    label = "Graph optimisation"
    Options = OptimizeOptions

    def run(self, job: Job, reporter: JobReporter, workdir: Path) -> Outcome:
        """Fuse and fold the graph once and store the result, same precision, as the next version."""
        options = OptimizeOptions.parse(job.options, kind=self.name)
        report, version = derive_compared(
            job,
            reporter,
            workdir,
            op="optimize",
            options={"level": options.level},
            precision=job_source(job).precision,
        )
        return Outcome(report, version)
