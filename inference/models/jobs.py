"""Jobs: conversion, quantization, evaluation and benchmark runs, each a row the worker moves along.

Status transitions and who makes them:
  QUEUED    -> RUNNING     the worker claims the row atomically (only one worker ever runs a job)
  QUEUED    -> CANCELLED   a person cancels before it starts
  RUNNING   -> SUCCEEDED | FAILED | CANCELLED   the worker, at the end (cancel is requested by a person
               and honoured between steps)
  RUNNING   -> FAILED      the reaper, when the worker stopped sending heartbeats (it died)
  FAILED | CANCELLED -> QUEUED   a person retries
"""

from __future__ import annotations

from enum import StrEnum

from django.conf import settings
from django.db import models

from core.errors import Conflict


class JobKind(StrEnum):
    """Names of the kinds other code refers to. Every kind, with its label, is in ``inference.jobs.registry``
    (which validates ``Job.kind``); these values are stored in rows, so they never change."""

    IMPORT = "import"
    QUANTIZE_INT8 = "quantize_int8"
    FP16 = "fp16"
    OPTIMIZE = "optimize"
    EXPORT_ONNX = "export_onnx"
    EVALUATE = "evaluate"
    BENCHMARK = "benchmark"
    QUANTIZE_WEIGHTS = "quantize_weights"


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


TRANSITIONS = {
    JobStatus.QUEUED: {JobStatus.RUNNING, JobStatus.CANCELLED},
    JobStatus.RUNNING: {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED},
    JobStatus.FAILED: {JobStatus.QUEUED},
    JobStatus.CANCELLED: {JobStatus.QUEUED},
    JobStatus.SUCCEEDED: set(),
}
TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}


class Job(models.Model):
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="jobs")
    # One of the registered kinds (``inference.jobs.registry`` checks it when a job starts; its label
    # is ``registry.kind_label``): no choices here, so the model layer imports no job kind.
    kind = models.CharField(max_length=32)
    # The version a job works on; empty for an import, whose upload is described in `options`.
    source = models.ForeignKey(
        "inference.ModelVersion", on_delete=models.CASCADE, related_name="jobs", null=True, blank=True
    )
    options = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED)
    progress = models.FloatField(default=0)
    message = models.CharField(max_length=300, blank=True)
    error = models.TextField(blank=True)
    result = models.JSONField(default=dict, blank=True)
    output = models.ForeignKey(
        "inference.ModelVersion", on_delete=models.SET_NULL, null=True, blank=True, related_name="produced_by"
    )
    cancel_requested = models.BooleanField(default=False)
    attempts = models.PositiveIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "heartbeat_at"])]

    def __str__(self) -> str:
        return f"job {self.pk} {self.kind} of {self.source_id}"

    def check_transition(self, to: str) -> None:
        if to not in TRANSITIONS[JobStatus(self.status)]:
            raise Conflict(f"a {self.status} job cannot become {to}")

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL


class JobLogLine(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="log_lines")
    at = models.DateTimeField(auto_now_add=True)
    progress = models.FloatField(default=0)
    message = models.CharField(max_length=500)

    class Meta:
        ordering = ["pk"]
