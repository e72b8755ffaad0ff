"""FP16 conversion with float32 inputs and outputs, then compared with the parent."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from inference.jobs.registry import JobKindBase, KindOptions, Outcome, register
from inference.jobs.reporter import JobReporter
from inference.jobs.versions import derive_compared
from inference.models import Job


class Fp16Options(KindOptions):
    keep_io_types: bool = Field(True, description="keep float32 inputs and outputs (callers send float32)")
    op_block_list: list[str] | None = Field(
        None, max_length=1000, description="op types left in float32; unset: onnxconverter's default list"
    )


@register
class Fp16(JobKindBase):
    name = "fp16"
    label = "FP16 conversion"
    Options = Fp16Options

    def run(self, job: Job, reporter: JobReporter, workdir: Path) -> Outcome:
        """Convert the weights to FP16 and store the result as the next version."""
        options = Fp16Options.parse(job.options, kind=self.name).model_dump()
        report, version = derive_compared(
            job, reporter, workdir, op="fp16", options=options, precision="fp16"
        )
        return Outcome(report, version)
