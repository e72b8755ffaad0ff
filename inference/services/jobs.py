"""Starting, cancelling and retrying jobs; the reaper that ends jobs whose worker died."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import Team
from accounts.permissions import permission_require
from accounts.services import audit_record
from core.errors import ValidationFailed
from inference import queue
from inference.jobs.registry import kind_get, kinds
from inference.live import publish_job
from inference.models import Job, JobStatus, ModelVersion


def _enqueue(job: Job) -> None:
    queue.job_run_later(job.pk)


def _checked_options(kind_name: str, source: ModelVersion, options: object) -> dict:
    """The options as the kind's schema accepts them (only the keys given, so defaults can improve later)."""
    kind = kind_get(kind_name)
    if not kind.startable:
        raise ValidationFailed(
            f"{kind_name} jobs are not started here; choose one of {', '.join(kinds(startable=True))}"
        )
    parsed = kind.parse_options(options)
    kind.check_source(source)
    return parsed.model_dump(mode="json", exclude_unset=True)


def job_start(*, team: Team, actor, source: ModelVersion, kind: str, options: dict | None = None) -> Job:
    """Queue a job on one of the team's versions; the worker picks it up after commit.

    The kind comes from the registry (``inference.jobs.registry``), which checks the options against the
    kind's schema and the source against what the kind accepts.
    """
    permission_require(team=team, user=actor, action="job.start")
    options = _checked_options(kind, source, {} if options is None else options)
    with transaction.atomic():
        job = Job.objects.create(team=team, kind=kind, source=source, options=options, created_by=actor)
        audit_record(
            team=team,
            actor=actor,
            action="job.start",
            target=f"job {job.pk}",
            data={"kind": kind, "source": str(source), "options": options},
        )
        publish_job(job)
        _enqueue(job)
    return job


def job_cancel(*, team: Team, actor, job: Job) -> Job:
    """Cancel a queued job at once; ask a running one to stop at its next step."""
    permission_require(team=team, user=actor, action="job.cancel")
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.status == JobStatus.QUEUED:
            job.check_transition(JobStatus.CANCELLED)
            job.status, job.finished_at, job.message = (
                JobStatus.CANCELLED,
                timezone.now(),
                "cancelled before it started",
            )
        elif job.status == JobStatus.RUNNING:
            job.cancel_requested = True
        else:
            job.check_transition(JobStatus.CANCELLED)  # raises: already finished
        job.save()
        audit_record(team=team, actor=actor, action="job.cancel", target=f"job {job.pk}")
        publish_job(job)
    return job


def job_retry(*, team: Team, actor, job: Job) -> Job:
    """Put a failed or cancelled job back in the queue with the same options."""
    permission_require(team=team, user=actor, action="job.retry")
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        job.check_transition(JobStatus.QUEUED)
        job.status, job.progress, job.error, job.message = JobStatus.QUEUED, 0, "", "queued again"
        job.cancel_requested, job.started_at, job.finished_at, job.result = False, None, None, {}
        job.save()
        job.log_lines.create(progress=0, message="retried")
        audit_record(team=team, actor=actor, action="job.retry", target=f"job {job.pk}")
        publish_job(job)
        _enqueue(job)
    return job


def jobs_reap() -> int:
    """Fail running jobs whose worker stopped sending heartbeats (killed, out of memory, machine lost)."""
    cutoff = timezone.now() - timedelta(seconds=settings.JOB_HEARTBEAT_STALE_S)
    reaped = 0
    for job in Job.objects.filter(status=JobStatus.RUNNING, heartbeat_at__lt=cutoff):
        with transaction.atomic():
            changed = Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING, heartbeat_at__lt=cutoff).update(
                status=JobStatus.FAILED,
                finished_at=timezone.now(),
                error=f"the worker {job.worker or ''} stopped responding; the job was ended (retry it)".replace(
                    "  ", " "
                ),
            )
            if changed:
                reaped += 1
                job.refresh_from_db()
                job.log_lines.create(progress=job.progress, message="worker lost: job failed")
                publish_job(job)
    return reaped + jobs_requeue_lost()


QUEUED_RESEND_S = 30


def jobs_requeue_lost() -> int:
    """Send again the message of jobs queued for a while: one lost to a broker or database restart
    between the commit and a worker's claim would otherwise stay "queued" for ever. A duplicate is
    harmless (`job_claim` lets exactly one message run a job); `heartbeat_at`, unused while queued,
    spaces the resends out."""
    cutoff = timezone.now() - timedelta(seconds=QUEUED_RESEND_S)
    stale = Job.objects.filter(status=JobStatus.QUEUED, created_at__lt=cutoff).exclude(
        heartbeat_at__gte=cutoff
    )
    resent = 0
    for job_id in list(stale.values_list("pk", flat=True)[:100]):
        if Job.objects.filter(pk=job_id, status=JobStatus.QUEUED).update(heartbeat_at=timezone.now()):
            queue.job_run_later(job_id)
            resent += 1
    return resent
