"""Running one job in a Celery worker: claim the row, run its kind, report progress, finish it.

Every move of the row is a conditional UPDATE on its current status, so the worker, a person cancelling
and the reaper (``services.jobs.jobs_reap``) never overwrite each other: a worker that finishes after
the reaper failed its job leaves the job failed and throws its output away.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
from pathlib import Path

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core.errors import ApplicationError
from inference.conversion.steps import JobCancelled
from inference.jobs.registry import kind_get
from inference.jobs.reporter import JobReporter
from inference.live import publish_job
from inference.models import Job, JobStatus, ModelVersion
from inference.reports import public_result
from inference.sandbox import SandboxFailed
from inference.services.registry import version_discard
from inference.validation.formats import InvalidModel

log = logging.getLogger("lantau.jobs")


def job_claim(job_id: int) -> Job | None:
    """Move a queued job to running; None if another worker has it or it was cancelled meanwhile."""
    claimed = Job.objects.filter(pk=job_id, status=JobStatus.QUEUED).update(
        status=JobStatus.RUNNING,
        started_at=timezone.now(),
        heartbeat_at=timezone.now(),
        attempts=F("attempts") + 1,
        worker=f"{socket.gethostname()}:{os.getpid()}",
        progress=0,
        message="started",
    )
    return (
        Job.objects.select_related("source__model", "team", "created_by").get(pk=job_id) if claimed else None
    )


def job_execute(job_id: int) -> str:
    """Run a job to a terminal state; returns that state. Never leaves the job running."""
    job = job_claim(job_id)
    if job is None:
        return "not claimed"
    publish_job(job)
    try:
        kind = kind_get(job.kind)
        # mkdtemp makes the job's folder 0700: other local users can neither read nor plant files in it.
        with JobReporter(job) as reporter, tempfile.TemporaryDirectory(prefix=f"lantau-job-{job.pk}-") as tmp:
            outcome = kind().run(job, reporter, Path(tmp))
        return job_finish(
            job=job,
            status=JobStatus.SUCCEEDED,
            result=public_result(outcome.result),
            output=outcome.output,
            message="done",
        )
    except JobCancelled:
        return job_finish(job=job, status=JobStatus.CANCELLED, message="cancelled; partial output removed")
    except Exception as exc:  # the job fails with a message; the worker lives on
        log.exception("job %s failed", job.pk)
        return job_finish(job=job, status=JobStatus.FAILED, error=_describe(exc), message="failed")


def _describe(exc: Exception) -> str:
    if isinstance(exc, ApplicationError):
        return exc.message[:2000]
    if isinstance(exc, (InvalidModel, SandboxFailed, ValueError)):
        return str(exc)[:2000]
    return f"{type(exc).__name__}: {str(exc)[:500]}"


def job_finish(
    *,
    job: Job,
    status: str,
    result: dict | None = None,
    output: ModelVersion | None = None,
    error: str = "",
    message: str = "",
) -> str:
    """Move a running job to ``status``; returns the state the job ends in.

    Only a job still RUNNING moves. If the reaper ended it meanwhile (the worker looked dead), it stays
    failed and the version this run produced is removed, so no version exists that no job vouches for.
    """
    progress = 100.0 if status == JobStatus.SUCCEEDED else job.progress
    with transaction.atomic():
        moved = Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
            status=status,
            finished_at=timezone.now(),
            result=result or {},
            output=output,
            error=error,
            message=message,
            progress=progress,
        )
        if not moved and output is not None:
            version_discard(version=output)
    job.refresh_from_db()
    if not moved:
        log.warning(
            "job %s finished as %s after it was already %s; kept %s", job.pk, status, job.status, job.status
        )
        line = f"the worker finished after the job was {job.status}; its output was discarded"
        job.log_lines.create(progress=job.progress, message=line[:500])
        publish_job(job, log_line=line)
        return job.status
    job.log_lines.create(progress=progress, message=f"{status}: {error or message}"[:500])
    publish_job(job, log_line=f"{status}: {error or message}")
    return status
