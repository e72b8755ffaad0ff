"""Weight-only INT4/INT8 of a causal language model (MatMulNBits), compared with its source.

The report gives size, greedy decode tokens per second and perplexity, before and after, on the
team's dataset (``dataset_id``: a text or prompt set) or the built-in sentences. The new version keeps
the source's tokenizer and generation settings, so a runner serves it like the source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from core.errors import ValidationFailed
from evalsets.services import dataset_text_lines
from inference.jobs.registry import JobKindBase, KindOptions, Outcome, register
from inference.jobs.reporter import JobReporter
from inference.jobs.versions import job_lineage, job_source, put_version, sandbox, version_inputs
from inference.models import Job, ModelVersion, Task
from inference.services.registry import version_derive


class QuantizeWeightsOptions(KindOptions):
    bits: Literal[4, 8] = Field(4, description="bits per weight")
    block_size: int = Field(
        32,
        ge=16,
        le=256,
        description="weights sharing one scale along K (a power of two, 16..256); smaller is more "
        "accurate and a little larger",
    )
    symmetric: bool = Field(True, description="symmetric blocks (no zero points)")
    accuracy_level: Literal[0, 1, 2, 3, 4] = Field(
        4,
        description="MatMulNBits compute on CPU: 4 int8 activations (default: the fastest, 2-3x the float "
        "decode speed of a 512-wide model; INT8 weights without it were 6x slower than float), "
        "0 onnxruntime's choice, 1 fp32, 2 fp16, 3 bf16",
    )
    dataset_id: int | None = Field(
        None, ge=1, description="a text or prompt dataset of the team for perplexity; unset: built-in text"
    )
    limit: int = Field(64, ge=1, le=2000, description="texts the perplexity is measured on")

    @field_validator("block_size")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError("must be a power of two (16, 32, 64, 128 or 256)")
        return value


@register
class QuantizeWeights(JobKindBase):
    name = "quantize_weights"
    label = "Weight-only INT4/INT8 (language models)"
    Options = QuantizeWeightsOptions

    @classmethod
    def check_source(cls, source: ModelVersion) -> None:
        """An exported causal LM: ONNX with the cached decoder layout."""
        super().check_source(source)
        if source.model.task != Task.TEXT_GENERATION:
            raise ValidationFailed(
                f"weight-only quantization is for text-generation models; this is {source.model.task} "
                "(use quantize_int8)"
            )

    def run(self, job: Job, reporter: JobReporter, workdir: Path) -> Outcome:
        """Quantize and compare in the sandbox, then store the result as the source's next version."""
        options = QuantizeWeightsOptions.parse(job.options, kind=self.name)
        source = job_source(job)
        texts, dataset = self._texts(job, options.dataset_id, workdir)
        with sandbox(reporter) as box:
            src = put_version(box, version_inputs(source), "model")
            if src["tokenizer"] is None:
                raise ValidationFailed(f"{source} has no tokenizer.json")
            args = {
                "model": src["model"],
                "dst": str(box.out / "model.onnx"),
                "tokenizer": src["tokenizer"],
                "texts": str(box.put("texts.txt", texts)) if texts else None,
                "limit": options.limit,
                "options": options.model_dump(include={"bits", "block_size", "symmetric", "accuracy_level"}),
            }
            result = box.call(
                "quantize_weights", args, progress=reporter.scaled(0, 95), cancelled=reporter.cancelled
            )
            converted = box.take("model.onnx", workdir / "model.onnx")
        report = {**result, "dataset": dataset}
        reporter.progress(96, "storing the new version")
        version = version_derive(
            parent=source,
            actor=job.created_by,
            model_path=converted,
            precision=f"int{options.bits}",
            lineage=job_lineage(job),
            report=report,
        )
        return Outcome(report, version)

    @staticmethod
    def _texts(job: Job, dataset_id: int | None, workdir: Path) -> tuple[Path | None, dict]:
        """The dataset's texts as one line each (what the evaluation reads), and how the report names it."""
        if dataset_id is None:
            return None, {"name": "built-in sentences", "id": None, "count": None}

        return dataset_text_lines(team=job.team, dataset_id=dataset_id, dest=workdir / "texts.txt")
