"""The job runner against real PostgreSQL: a worker that finishes late never overrides the reaper."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from inference import storage
from inference.jobs.registry import kind_get
from inference.jobs.reporter import JobReporter
from inference.jobs.runner import job_claim, job_execute, job_finish
from inference.models import Artifact, Job, JobStatus, ModelVersion
from inference.services.jobs import job_start, jobs_reap

pytestmark = pytest.mark.django_db


def _stale(job: Job) -> None:
    Job.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))


def test_a_job_finished_after_the_reaper_failed_it_stays_failed_and_leaves_no_version(
    owner, team, colour_version, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.JOB_HEARTBEAT_STALE_S = 30
    queued = job_start(
        team=team, actor=owner, source=colour_version, kind="quantize_int8", options={"mode": "dynamic"}
    )
    job = job_claim(queued.pk)
    with JobReporter(job) as reporter:  # the worker converts the model; meanwhile it looks dead
        outcome = kind_get(job.kind)().run(job, reporter, tmp_path)
    assert outcome.output is not None and outcome.output.number == 2
    new_blob = storage.blob_path(outcome.output.sha256)
    assert new_blob.exists()
    _stale(job)
    assert jobs_reap() == 1

    with django_capture_on_commit_callbacks(execute=True):  # blobs go once the rows are gone for good
        state = job_finish(
            job=job, status=JobStatus.SUCCEEDED, result=outcome.result, output=outcome.output, message="done"
        )
    assert state == "failed"
    job.refresh_from_db()
    assert job.status == "failed" and "stopped responding" in job.error and job.output_id is None
    assert not ModelVersion.objects.filter(pk=outcome.output.pk).exists()
    assert list(colour_version.model.versions.values_list("number", flat=True)) == [1]
    assert not new_blob.exists()  # no other version holds this content
    assert all(
        storage.blob_path(a.sha256).exists() for a in Artifact.objects.all()
    )  # the parent's files stay
    assert "output was discarded" in job.log_lines.last().message


def test_a_late_failure_or_cancel_does_not_rewrite_a_reaped_job(owner, team, colour_version, settings):
    settings.JOB_HEARTBEAT_STALE_S = 30
    job = job_claim(job_start(team=team, actor=owner, source=colour_version, kind="benchmark").pk)
    _stale(job)
    assert jobs_reap() == 1
    error = Job.objects.get(pk=job.pk).error
    assert job_finish(job=job, status=JobStatus.CANCELLED, message="cancelled") == "failed"
    assert job_finish(job=job, status=JobStatus.FAILED, error="boom") == "failed"
    assert Job.objects.get(pk=job.pk).error == error


def test_a_running_job_finishes_with_its_output(owner, team, colour_version):
    job = job_start(
        team=team, actor=owner, source=colour_version, kind="optimize", options={"level": "basic"}
    )
    assert job_execute(job.pk) == "succeeded"
    job.refresh_from_db()
    assert job.progress == 100 and job.output.parent_id == colour_version.pk
    assert job.output.lineage["options"] == {"level": "basic"} and job.output.labels == colour_version.labels
    assert job_execute(job.pk) == "not claimed"


def test_a_job_whose_stored_options_no_longer_fit_fails_with_the_reason(owner, team, colour_version):
    job = job_start(team=team, actor=owner, source=colour_version, kind="benchmark")
    Job.objects.filter(pk=job.pk).update(options={"runs": 5000})
    assert job_execute(job.pk) == "failed"
    assert Job.objects.get(pk=job.pk).error.startswith("options.runs: ")


def test_external_data_folders_are_linked_once_per_content(colour_version, tmp_path):
    artifacts = list(colour_version.artifacts.all())
    folder = storage.linked_folder(artifacts)
    assert storage.linked_folder(artifacts) == folder
    assert {p.name for p in folder.iterdir()} == {a.filename for a in artifacts}
    assert Path(folder / "model.onnx").read_bytes() == storage.blob_path(colour_version.sha256).read_bytes()


def test_a_job_left_queued_is_sent_again_spaced_out_and_still_runs_once(owner, team, colour_version):
    from inference.services.jobs import jobs_requeue_lost

    lost = job_start(team=team, actor=owner, source=colour_version, kind="benchmark", options={})
    fresh = job_start(team=team, actor=owner, source=colour_version, kind="benchmark", options={})
    Job.objects.filter(pk=lost.pk).update(created_at=timezone.now() - timedelta(minutes=2))
    assert jobs_requeue_lost() == 1  # only the old one: its message may have been lost
    assert jobs_requeue_lost() == 0  # not again until the resend interval has passed
    assert Job.objects.get(pk=fresh.pk).heartbeat_at is None
    assert job_claim(lost.pk) is not None and job_claim(lost.pk) is None  # a duplicate message runs nothing
