"""Collect stored blobs nobody uses: the console side of keeping disks from filling up.

A blob stays while a model version's artifact, a validation dataset or any job's options (an import
waiting for, or retrying on, its uploaded files) names it, and while it is younger than
LANTAU_BLOB_GC_GRACE_S (an upload may have stored it and not yet created the row naming it).
Node agents evict their own caches (inference.agent).
"""

from __future__ import annotations

import logging
import time

from django.apps import apps
from django.conf import settings

from inference import storage
from inference.models import Artifact, Job

log = logging.getLogger("lantau.blobs")


def blobs_in_use() -> set[str]:
    used = set(Artifact.objects.values_list("sha256", flat=True))
    if apps.is_installed("evalsets"):
        used |= set(apps.get_model("evalsets", "Dataset").objects.values_list("sha256", flat=True))
    for options in Job.objects.exclude(options={}).values_list("options", flat=True).iterator():
        for item in (options or {}).get("files") or []:
            if isinstance(item, dict) and isinstance(item.get("sha256"), str):
                used.add(item["sha256"])
    return used


def blobs_collect(*, grace_s: int | None = None) -> int:
    """Delete unused blobs older than the grace period; returns how many went."""
    folder = storage.root() / "sha256"
    if not folder.is_dir():
        return 0
    cutoff = time.time() - (settings.BLOB_GC_GRACE_S if grace_s is None else grace_s)
    used = blobs_in_use()
    removed = 0
    for path in folder.glob("*/*"):
        if len(path.name) != 64 or path.name in used or not path.is_file():
            continue
        try:
            if path.stat().st_mtime >= cutoff:
                continue
            path.unlink()
        except OSError:  # gone already, or being replaced: the next run looks again
            continue
        removed += 1
    if removed:
        log.info("deleted %d unused blob(s)", removed)
    return removed
