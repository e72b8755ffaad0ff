"""Benchmark a version on the worker's CPU: size, latency at batch 1 and 8, throughput."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from inference.conversion.benchmark import benchmark
from inference.jobs.registry import JobKindBase, KindOptions, Outcome, register
from inference.jobs.runner import JobReporter
from inference.jobs.versions import job_source, version_inputs
from inference.models import Job


class BenchmarkOptions(KindOptions):
    runs: int = Field(30, ge=1, le=1000, description="timed runs per batch size")


@register
class Benchmark(JobKindBase):
    name = "benchmark"
    label = "Benchmark"
    Options = BenchmarkOptions

    def run(self, job: Job, reporter: JobReporter, workdir: Path) -> Outcome:
        """Time the version; the result is the job's, no new version."""
        runs = BenchmarkOptions.parse(job.options, kind=self.name).runs
        src = version_inputs(job_source(job))
        # Short rounds keep cancellation prompt: it is checked between rounds.
        report = benchmark(
            src.model,
            src.task,
            runs=runs,
            rounds=max(3, runs // 200),
            progress=reporter.scaled(0, 95),
            cancelled=reporter.cancelled,
        )
        return Outcome(report)
