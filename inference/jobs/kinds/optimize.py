"""Offline graph optimisation by onnxruntime, then compared with the parent."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from inference.conversion.graph import optimize_graph
from inference.jobs.registry import JobKindBase, KindOptions, Outcome, register
from inference.jobs.runner import JobReporter
from inference.jobs.versions import derive_compared, job_source, version_inputs
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
        source = job_source(job)
        dst = workdir / "model.onnx"
        conversion = optimize_graph(
            version_inputs(source).model,
            dst,
            level=options.level,
            progress=reporter.scaled(0, 50),
            cancelled=reporter.cancelled,
        )
        report, version = derive_compared(
            job, reporter, dst, precision=source.precision, conversion=conversion
        )
        return Outcome(report, version)
