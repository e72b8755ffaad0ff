"""INT8 quantization: static (calibrated activations) or dynamic (weights only), then compared with the parent."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from inference.conversion.quantize import recommended_options
from inference.jobs.registry import JobKindBase, KindOptions, Outcome, register
from inference.jobs.runner import JobReporter
from inference.jobs.versions import derive_compared, job_source
from inference.models import Job

UNSET = "unset: the recommended setting for the model's task (docs/quantization.md)"
STATIC_ONLY = ("method", "quant_format", "activation_type", "calibration_limit")


class QuantizeInt8Options(KindOptions):
    mode: Literal["static", "dynamic"] | None = Field(
        None,
        description=f"static calibrates activations on validation inputs; dynamic quantizes weights only; {UNSET}",
    )
    method: Literal["MinMax", "Entropy", "Percentile"] | None = Field(
        None, description=f"calibration method (static); {UNSET}"
    )
    per_channel: bool | None = Field(None, description=f"one scale per output channel; {UNSET}")
    quant_format: Literal["QDQ", "QOperator"] | None = Field(
        None, description=f"graph format (static); {UNSET}"
    )
    activation_type: Literal["QInt8", "QUInt8"] | None = Field(
        None, description=f"activation type (static); {UNSET}"
    )
    weight_type: Literal["QInt8", "QUInt8"] | None = Field(None, description=f"weight type; {UNSET}")
    reduce_range: bool | None = Field(None, description=f"7-bit weights for older CPUs; {UNSET}")
    exclude_nodes: list[str] | None = Field(
        None, max_length=10000, description=f"node names or fnmatch patterns left in float; {UNSET}"
    )
    exclude_op_types: list[str] | None = Field(
        None,
        max_length=1000,
        description=f"op types whose weighted nodes stay in float (e.g. Gather); {UNSET}",
    )
    calibration_limit: int | None = Field(
        None, ge=1, le=10000, description="calibration inputs used (static); unset: 64"
    )


@register
class QuantizeInt8(JobKindBase):
    name = "quantize_int8"
    label = "INT8 quantization"
    Options = QuantizeInt8Options

    def run(self, job: Job, reporter: JobReporter, workdir: Path) -> Outcome:
        """Quantize (in the sandbox) with the task's recommended settings overridden by the job's."""
        task = job_source(job).model.task
        given = QuantizeInt8Options.parse(job.options, kind=self.name).model_dump(exclude_none=True)
        options: dict[str, Any] = recommended_options(task) | given
        mode = options.pop("mode", "static")
        if mode == "dynamic":
            for key in STATIC_ONLY:
                options.pop(key, None)
        else:
            options |= {"task": task, "preprocessing": "$preprocessing", "tokenizer": "$tokenizer"}
        report, version = derive_compared(
            job, reporter, workdir, op=f"quantize_{mode}", options=options, precision="int8"
        )
        return Outcome(report, version)
