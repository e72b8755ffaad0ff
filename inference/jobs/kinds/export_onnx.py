"""Export a Hugging Face folder or a TorchScript file to ONNX, as the source's next (servable) version."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

from core.errors import ValidationFailed
from inference import storage
from inference.jobs.registry import JobKindBase, KindOptions, Outcome, register
from inference.jobs.reporter import JobReporter
from inference.jobs.versions import job_lineage, job_source, sandbox
from inference.models import Job, ModelVersion
from inference.services.registry import version_derive
from inference.validation.onnx_model import image_preprocessing

TEXT_RUNTIME = {"feature-extraction": {"max_length": 256, "pooling": "mean", "normalize": True}}


class ExportOnnxOptions(KindOptions):
    input_shape: list[Annotated[int, Field(gt=0, lt=100000)]] | None = Field(
        None,
        min_length=2,
        max_length=6,
        description="TorchScript only: an example input shape such as [1, 3, 224, 224] (the first axis becomes "
        "the dynamic batch axis); unset: the shape given at upload",
    )


@register
class ExportOnnx(JobKindBase):
    name = "export_onnx"
    label = "Export to ONNX"
    needs_onnx = False
    Options = ExportOnnxOptions

    @classmethod
    def check_source(cls, source: ModelVersion) -> None:
        """A Hugging Face or TorchScript version (an ONNX one has nothing to export)."""
        if source.format == "onnx":
            raise ValidationFailed("this version is already ONNX")

    def run(self, job: Job, reporter: JobReporter, workdir: Path) -> Outcome:
        """Export, then store the ONNX model with its tokenizer, labels and preprocessing."""
        source, options = job_source(job), ExportOnnxOptions.parse(job.options, kind=self.name)
        storage.link_artifacts(source.artifacts.all(), workdir / "source")
        with sandbox(reporter) as box:
            # TorchScript is code: it is loaded only in the sandbox, never in this worker.
            folder = box.put("source", workdir / "source")
            args = {
                "src": str(folder / "model.pt" if source.format == "torchscript" else folder),
                "out": str(box.out / "export"),
                "task": source.model.task,
                "input_shape": options.input_shape or source.runtime_config.get("input_shape"),
            }
            result = box.call("export", args, progress=reporter.scaled(0, 80), cancelled=reporter.cancelled)
            model_path = box.take("export/model.onnx", workdir / "out" / "model.onnx")
            tokenizer = workdir / "out" / "tokenizer.json"
            if result["report"].get("tokenizer"):
                box.take("export/tokenizer.json", tokenizer)
        report = result["report"]
        pre = None
        if source.model.task == "image-classification":
            pre = image_preprocessing(
                result["details"], report.get("preprocessing") or source.preprocessing or {}
            )
        runtime = TEXT_RUNTIME.get(source.model.task, {})
        if source.model.task == "text-generation":
            runtime = {"generation": report.get("generation")}
        reporter.progress(90, "storing the ONNX version")
        version = version_derive(
            parent=source,
            actor=job.created_by,
            model_path=model_path,
            precision="fp32",
            lineage=job_lineage(job),
            report={"conversion": report},
            tokenizer_path=tokenizer if tokenizer.is_file() else None,
            labels=report.get("labels") or source.labels,
            preprocessing=pre,
            runtime_config=runtime,
        )
        return Outcome({"conversion": report}, version)
