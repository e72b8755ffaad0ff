"""Running one job in a Celery worker: claim it, run its steps from `inference.jobs`, record the result.

The pure conversion code in `inference.jobs` knows nothing of Django; this module feeds it paths and
a progress callback, and turns what it returns into rows (a new version, a report, log lines).
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
import time
from pathlib import Path

from django.db import close_old_connections
from django.db.models import F
from django.utils import timezone

from inference.live import publish_job
from inference.models import Job, JobKind, JobStatus, ModelVersion
from inference.services.registry import version_derive, version_file

log = logging.getLogger("lantau.jobs")
HEARTBEAT_EVERY_S = 5


class JobReporter:
    """Progress, log lines, cancellation checks and heartbeats for one running job."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self._last_cancel_check = 0.0
        self._cancelled = False
        self._last_write = self._last_line = 0.0
        self._last_message: str | None = None
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)

    def __enter__(self) -> JobReporter:
        self._beat.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._beat.join(timeout=10)

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_EVERY_S):
            try:
                Job.objects.filter(pk=self.job.pk, status=JobStatus.RUNNING).update(heartbeat_at=timezone.now())
            except Exception:  # a missed heartbeat is harmless; the next one retries
                log.warning("job %s: heartbeat failed", self.job.pk, exc_info=True)
            finally:
                close_old_connections()

    def scaled(self, low: float, high: float):
        """A progress callback for one stage that maps its 0-100 onto low-high of the whole job."""
        return lambda percent, message: self.progress(low + (high - low) * percent / 100, message)

    def progress(self, percent: float, message: str) -> None:
        """Record progress; writes and pushes at most every 0.25 s (log lines at most once a second)."""
        percent = max(self.job.progress, min(100.0, percent))
        self.job.progress, self.job.message = percent, message[:300]
        now = time.monotonic()
        if now - self._last_write < 0.25:
            return
        self._last_write = now
        Job.objects.filter(pk=self.job.pk).update(progress=percent, message=self.job.message, heartbeat_at=timezone.now())
        line = None
        if message != self._last_message and now - self._last_line >= 1.0:
            self.job.log_lines.create(progress=percent, message=message[:500])
            self._last_message, self._last_line, line = message, now, message
        publish_job(self.job, log_line=line)

    def cancelled(self) -> bool:
        now = time.monotonic()
        if not self._cancelled and now - self._last_cancel_check > 0.5:
            self._last_cancel_check = now
            self._cancelled = Job.objects.filter(pk=self.job.pk, cancel_requested=True).exists()
        return self._cancelled


def job_claim(job_id: int) -> Job | None:
    """Move a queued job to running; None if another worker has it or it was cancelled meanwhile."""
    claimed = Job.objects.filter(pk=job_id, status=JobStatus.QUEUED).update(
        status=JobStatus.RUNNING, started_at=timezone.now(), heartbeat_at=timezone.now(), attempts=F("attempts") + 1,
        worker=f"{socket.gethostname()}:{os.getpid()}", progress=0, message="started",
    )
    return Job.objects.select_related("source__model", "team", "created_by").get(pk=job_id) if claimed else None


def job_execute(job_id: int) -> str:
    """Run a job to a terminal state; returns that state. Never leaves the job running."""
    from inference.jobs.steps import JobCancelled

    job = job_claim(job_id)
    if job is None:
        return "not claimed"
    publish_job(job)
    try:
        with JobReporter(job) as reporter, tempfile.TemporaryDirectory(prefix=f"lantau-job-{job.pk}-") as tmp:
            result, output = HANDLERS[JobKind(job.kind)](job, reporter, Path(tmp))
        return _finish(job, JobStatus.SUCCEEDED, result=result, output=output, message="done")
    except JobCancelled:
        return _finish(job, JobStatus.CANCELLED, message="cancelled; partial output removed")
    except Exception as exc:  # the job fails with a message; the worker lives on
        log.exception("job %s failed", job.pk)
        return _finish(job, JobStatus.FAILED, error=_describe(exc), message="failed")


def _describe(exc: Exception) -> str:
    from core.errors import ApplicationError
    from inference.validation.formats import InvalidModel

    if isinstance(exc, ApplicationError):
        return exc.message[:2000]
    if isinstance(exc, (InvalidModel, ValueError)):
        return str(exc)[:2000]
    return f"{type(exc).__name__}: {str(exc)[:500]}"


def _finish(job: Job, status: str, *, result: dict | None = None, output: ModelVersion | None = None,
            error: str = "", message: str = "") -> str:
    progress = 100.0 if status == JobStatus.SUCCEEDED else job.progress
    Job.objects.filter(pk=job.pk).update(status=status, finished_at=timezone.now(), result=result or {},
                                         output=output, error=error, message=message, progress=progress)
    job.refresh_from_db()
    job.log_lines.create(progress=progress, message=f"{status}: {error or message}"[:500])
    publish_job(job, log_line=f"{status}: {error or message}")
    return status


def _inputs(version: ModelVersion) -> dict:
    """Paths a job reads: the model (in a folder with its external data files, if any) and companions."""
    model = version_file(version, "model")
    if version.artifacts.filter(role="external-data").exists():
        model = _linked_folder(version) / "model.onnx"
    return {"model": model, "tokenizer": version_file(version, "tokenizer"),
            "preprocessing": version.preprocessing or None, "task": version.model.task}


def _compare(job: Job, reporter: JobReporter, parent: ModelVersion, child: Path, low: float) -> dict:
    from inference.jobs.benchmark import compare_latency
    from inference.jobs.evaluate import evaluate

    src = _inputs(parent)
    agreement = evaluate(src["model"], child, src["task"], preprocessing=src["preprocessing"],
                         tokenizer=src["tokenizer"], limit=int(job.options.get("limit", 256)),
                         progress=reporter.scaled(low, low + (95 - low) / 2), cancelled=reporter.cancelled)
    latency = compare_latency(src["model"], child, src["task"], runs=int(job.options.get("runs", 24)),
                              progress=reporter.scaled(low + (95 - low) / 2, 95), cancelled=reporter.cancelled)
    return {"agreement": agreement, "latency": latency}


def _derive(job, reporter, converted: Path, precision: str, conversion: dict) -> tuple[dict, ModelVersion]:
    report = {"conversion": conversion, **_compare(job, reporter, job.source, converted, 50)}
    reporter.progress(96, "storing the new version")
    lineage = {"source": "job", "job": job.pk, "kind": job.kind, "parent": str(job.source), "options": job.options}
    version = version_derive(parent=job.source, actor=job.created_by, model_path=converted, precision=precision,
                             lineage=lineage, report=report)
    return report, version


def _quantize(job, reporter, tmp: Path):
    from inference.jobs.quantize import quantize_dynamic_int8, quantize_static_int8, recommended_options

    src = _inputs(job.source)
    options = recommended_options(src["task"]) | job.options
    mode = options.pop("mode", "static")
    dst = tmp / "model.onnx"
    common = {"progress": reporter.scaled(0, 50), "cancelled": reporter.cancelled}
    if mode == "dynamic":
        for key in ("method", "quant_format", "activation_type", "calibration_limit"):
            options.pop(key, None)
        conversion = quantize_dynamic_int8(src["model"], dst, **options, **common)
    elif mode == "static":
        conversion = quantize_static_int8(src["model"], dst, task=src["task"], preprocessing=src["preprocessing"],
                                          tokenizer=src["tokenizer"], **options, **common)
    else:
        raise ValueError("mode must be `static` or `dynamic`")
    return _derive(job, reporter, dst, "int8", conversion)


def _fp16(job, reporter, tmp: Path):
    from inference.jobs.graph import convert_fp16

    dst = tmp / "model.onnx"
    conversion = convert_fp16(_inputs(job.source)["model"], dst, **job.options, progress=reporter.scaled(0, 50),
                              cancelled=reporter.cancelled)
    return _derive(job, reporter, dst, "fp16", conversion)


def _optimize(job, reporter, tmp: Path):
    from inference.jobs.graph import optimize_graph

    dst = tmp / "model.onnx"
    conversion = optimize_graph(_inputs(job.source)["model"], dst, **job.options, progress=reporter.scaled(0, 50),
                                cancelled=reporter.cancelled)
    return _derive(job, reporter, dst, job.source.precision, conversion)


def _evaluate(job, reporter, tmp: Path):
    report = _compare(job, reporter, job.source.parent, _inputs(job.source)["model"], 0)
    ModelVersion.objects.filter(pk=job.source_id).update(report={**job.source.report, **report})
    return report, None


def _benchmark(job, reporter, tmp: Path):
    from inference.jobs.benchmark import benchmark

    src = _inputs(job.source)
    runs = int(job.options.get("runs", 30))
    # Short rounds keep cancellation prompt: it is checked between rounds.
    report = benchmark(src["model"], src["task"], runs=runs, rounds=max(3, runs // 200),
                       progress=reporter.scaled(0, 95), cancelled=reporter.cancelled)
    return report, None


def _import(job, reporter, tmp: Path):
    from inference.services.imports import import_cleanup, materialize, register_import
    from inference.validation.formats import InvalidModel, sniff

    try:
        reporter.progress(5, "unpacking the upload")
        folder = materialize(job.options["files"], tmp / "upload")
        reporter.progress(30, "checking the format")
        info = sniff(folder)
        declared = job.options["task"]
        if declared and info.get("task") and declared != info["task"]:
            raise InvalidModel(f"the upload was declared {declared} but its config describes {info['task']}")
        if not (declared or info.get("task")):
            raise InvalidModel(f"say which task this {info['format']} model performs")
        if info["format"] == "onnx":
            _check_onnx_import(job, info)
        reporter.progress(70, f"storing the {info['format']} files")
        version = register_import(job=job, info=info, folder=folder)
        if info["format"] == "onnx":
            _record_signature(version, info["details"])
        summary = {"format": info["format"], "task": version.model.task, "files": version.artifacts.count()}
        return summary, version
    finally:
        import_cleanup(job)


def _check_onnx_import(job, info: dict) -> None:
    from inference.validation.onnx_model import check_task, inspect_onnx

    details = inspect_onnx(info["path"], allow_external=True)
    check_task(job.options["task"], details, labels=job.options["labels"])
    info["details"] = details


def _record_signature(version: ModelVersion, details: dict) -> None:
    from inference.validation.onnx_model import image_preprocessing

    fields = {"inputs": details["inputs"], "outputs": details["outputs"]}
    if version.model.task == "image-classification":
        fields["preprocessing"] = image_preprocessing(details, version.preprocessing)
    ModelVersion.objects.filter(pk=version.pk).update(**fields)


def _link_version(version: ModelVersion, folder: Path) -> Path:
    """Lay a version's files out under their names: hard links into the store, copies across filesystems.

    Not symbolic links: the format checks refuse links, as they should for anything uploaded.
    """
    import os
    import shutil

    from inference import storage

    folder.mkdir(parents=True, exist_ok=True)
    for artifact in version.artifacts.all():
        target = folder / Path(artifact.filename).name
        try:
            os.link(storage.blob_path(artifact.sha256), target)
        except OSError:
            shutil.copyfile(storage.blob_path(artifact.sha256), target)
    return folder


def _linked_folder(version: ModelVersion) -> Path:
    """One folder per version content (reused by later jobs) holding the model beside its external data files.

    Versions never change, so the folder is built once, under a temporary name, and renamed into place;
    a job racing to build the same one keeps whichever landed first.
    """
    import hashlib
    import os
    import shutil

    base = Path(tempfile.gettempdir()) / "lantau-linked"
    # Named by content, not by id: ids repeat across databases, contents do not.
    content = hashlib.sha256("".join(sorted(a.sha256 + a.filename for a in version.artifacts.all())).encode())
    folder = base / content.hexdigest()[:32]
    if (folder / "model.onnx").exists():
        return folder
    base.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=".building-", dir=base))
    _link_version(version, building)
    try:
        os.rename(building, folder)
    except OSError:  # built meanwhile by another job
        shutil.rmtree(building, ignore_errors=True)
    return folder


def _materialize_version(version: ModelVersion, folder: Path) -> Path:
    """A Hugging Face folder or a TorchScript file, as the exporter expects to find it."""
    _link_version(version, folder)
    return folder / "model.pt" if version.format == "torchscript" else folder


def _export(job, reporter, tmp: Path):
    from inference.jobs.export import export_onnx
    from inference.validation.onnx_model import image_preprocessing, inspect_onnx

    source = job.source
    src = _materialize_version(source, tmp / "source")
    shape = job.options.get("input_shape") or source.runtime_config.get("input_shape")
    out = tmp / "out"
    report = export_onnx(src, out, source.model.task, progress=reporter.scaled(0, 80), cancelled=reporter.cancelled,
                         input_shape=shape)
    model_path = out / "model.onnx"
    pre = None
    if source.model.task == "image-classification":
        pre = image_preprocessing(inspect_onnx(model_path), report.get("preprocessing") or source.preprocessing or {})
    tokenizer = out / "tokenizer.json"
    runtime = {"feature-extraction": {"max_length": 256, "pooling": "mean", "normalize": True},
               "text-generation": {"generation": report.get("generation")}}.get(source.model.task, {})
    reporter.progress(90, "storing the ONNX version")
    lineage = {"source": "job", "job": job.pk, "kind": job.kind, "parent": str(source), "options": job.options}
    version = version_derive(parent=source, actor=job.created_by, model_path=model_path, precision="fp32",
                             lineage=lineage, report={"conversion": _jsonable(report)},
                             tokenizer_path=tokenizer if tokenizer.is_file() else None,
                             labels=report.get("labels") or source.labels, preprocessing=pre, runtime_config=runtime)
    return {"conversion": _jsonable(report)}, version


def _jsonable(report: dict) -> dict:
    import json

    return json.loads(json.dumps(report, default=str))


HANDLERS = {
    JobKind.IMPORT: _import,
    JobKind.QUANTIZE_INT8: _quantize,
    JobKind.FP16: _fp16,
    JobKind.OPTIMIZE: _optimize,
    JobKind.EVALUATE: _evaluate,
    JobKind.BENCHMARK: _benchmark,
    JobKind.EXPORT_ONNX: _export,
}
