"""Benchmark a version on the worker's CPU: size, latency at batch 1 and 8, throughput."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from inference.jobs.registry import JobKindBase, KindOptions, Outcome, register
from inference.jobs.reporter import JobReporter
from inference.jobs.versions import job_source, put_version, sandbox, version_inputs
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
        with sandbox(reporter) as box:
            src = put_version(box, version_inputs(job_source(job)), "model")
            args = {"model": src["model"], "task": src["task"], "runs": runs, "rounds": max(3, runs // 200)}
            report = box.call(
                "benchmark", args, progress=reporter.scaled(0, 95), cancelled=reporter.cancelled
            )
        return Outcome(report)
