"""What a running job reports through: progress, log lines, cancellation checks and heartbeats.

The worker (``inference.jobs.runner``) makes one per job and hands it to the job's kind; a kind
imports this module, never the runner, so the registry, the runner and the kinds form no circle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import close_old_connections
from django.utils import timezone

from inference.live import publish_job
from inference.models import Job, JobStatus

log = logging.getLogger("lantau.jobs")
HEARTBEAT_EVERY_S = 5  # the reaper fails a running job whose heartbeat is older than its limit


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

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._beat.join(timeout=10)

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_EVERY_S):
            try:
                Job.objects.filter(pk=self.job.pk, status=JobStatus.RUNNING).update(
                    heartbeat_at=timezone.now()
                )
            except Exception:  # a missed heartbeat is harmless; the next one retries
                log.warning("job %s: heartbeat failed", self.job.pk, exc_info=True)
            finally:
                close_old_connections()

    def scaled(self, low: float, high: float) -> Callable[[float, str], None]:
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
        Job.objects.filter(pk=self.job.pk, status=JobStatus.RUNNING).update(
            progress=percent, message=self.job.message, heartbeat_at=timezone.now()
        )
        line = None
        if message != self._last_message and now - self._last_line >= 1.0:
            self.job.log_lines.create(progress=percent, message=message[:500])
            self._last_message, self._last_line, line = message, now, message
        publish_job(self.job, log_line=line)

    def note(self, message: str) -> None:
        """One log line as it is (the sandbox's output, already scrubbed of secrets)."""
        self.job.log_lines.create(progress=self.job.progress, message=message[:500])

    def cancelled(self) -> bool:
        """Whether a person asked to cancel (checked against the row at most twice a second)."""
        now = time.monotonic()
        if not self._cancelled and now - self._last_cancel_check > 0.5:
            self._last_cancel_check = now
            self._cancelled = Job.objects.filter(pk=self.job.pk, cancel_requested=True).exists()
        return self._cancelled
