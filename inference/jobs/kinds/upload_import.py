"""Import an upload a worker must check: unpack it, sniff the format, check the task, store the version.

Started by ``services.imports.model_import_start`` (POST /api/v1/models with anything but one ONNX
file), not by POST /api/v1/jobs: it has no source version.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from inference.jobs.registry import JobKindBase, KindOptions, Outcome, register
from inference.jobs.reporter import JobReporter
from inference.jobs.versions import sandbox
from inference.models import Job
from inference.services.imports import import_cleanup, import_info_checked, materialize, register_import


class StoredUpload(BaseModel):
    filename: str
    sha256: str = Field(pattern="^[0-9a-f]{64}$")
    size: int = Field(ge=0)


class ImportOptions(KindOptions):
    name: str = Field(description="the model the version joins (created if new)")
    task: str = Field("", description="declared task; empty: read from a Hugging Face config")
    files: list[StoredUpload] = Field(min_length=1, description="the uploaded files, already in the store")
    labels: list[str] = Field(default_factory=list, description="class labels given with the upload")
    preprocessing: dict = Field(default_factory=dict, description="image preprocessing given with the upload")
    input_shape: list[int] | None = Field(None, description="TorchScript: the example input shape")


@register
class UploadImport(JobKindBase):
    name = "import"
    label = "Import upload"
    startable = False
    Options = ImportOptions

    def run(self, job: Job, reporter: JobReporter, workdir: Path) -> Outcome:
        """Check the upload and register it; the upload's blobs no version kept are removed either way."""
        options = ImportOptions.parse(job.options, kind=self.name)
        try:
            with sandbox(reporter) as box:
                reporter.progress(5, "unpacking the upload")
                # Our own extraction (streaming, limited) writes into the box's read-only inputs.
                folder = materialize(job.options["files"], box.inbox / "upload")
                box.seal()
                # Parsing and checking the model is the sandbox's: a crafted file crashes only the child.
                args = {"folder": str(folder), "task": options.task, "labels": options.labels}
                raw = box.call(
                    "check_upload", args, progress=reporter.scaled(10, 65), cancelled=reporter.cancelled
                )
                info = import_info_checked(raw, folder)
                reporter.progress(70, f"storing the {info['format']} files")
                version = register_import(job=job, info=info, folder=folder)
            summary = {
                "format": info["format"],
                "task": version.model.task,
                "files": version.artifacts.count(),
            }
            return Outcome(summary, version)
        finally:
            import_cleanup(job)
