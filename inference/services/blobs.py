"""Collect stored blobs nobody uses: the console side of keeping disks from filling up.

A blob stays while a model version (or one of its artifacts), a validation dataset or any job's options
(an import waiting for, or retrying on, its uploaded files) names it, whatever the team: the store is
content-addressed across teams. ``blobs_in_use`` is the one answer to "who holds this blob", used by the
collector and by every deletion path (``blobs_drop_unreferenced``: a failed or finished import, a
discarded version, a deleted dataset; review finding L-B). The collector also spares blobs younger than
LANTAU_BLOB_GC_GRACE_S (an upload may have stored it and not yet created the row naming it).
Node agents evict their own caches (inference.agent).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from django.apps import apps
from django.conf import settings
from django.db.models import Model

from inference import storage
from inference.models import Artifact, Job, ModelVersion

log = logging.getLogger("lantau.blobs")


def blobs_in_use(among: Iterable[str] | None = None, *, ignore_job: int | None = None) -> set[str]:
    """The blobs something names, in any team: all of them, or those of ``among``.

    ``ignore_job``: a job whose own ``files`` do not count (the import cleaning up after itself)."""
    wanted = None if among is None else set(among)
    if wanted is not None and not wanted:
        return set()

    def shas(model: type[Model]) -> set[str]:
        rows = model._default_manager.all()
        rows = rows if wanted is None else rows.filter(sha256__in=wanted)
        return set(rows.values_list("sha256", flat=True))

    used = shas(Artifact) | shas(ModelVersion)
    if apps.is_installed("evalsets"):
        used |= shas(apps.get_model("evalsets", "Dataset"))
    jobs = Job.objects.exclude(options={})
    if ignore_job is not None:
        jobs = jobs.exclude(pk=ignore_job)
    for options in jobs.values_list("options", flat=True).iterator():
        for item in (options or {}).get("files") or []:
            if isinstance(item, dict) and isinstance(item.get("sha256"), str):
                used.add(item["sha256"])
    return used if wanted is None else used & wanted


def blobs_drop_unreferenced(shas: Iterable[str], *, ignore_job: int | None = None) -> None:
    """Remove those of ``shas`` that nothing names (``blobs_in_use``): another team may hold the same content."""
    wanted = set(shas)
    for sha in wanted - blobs_in_use(wanted, ignore_job=ignore_job):
        storage.blob_path(sha).unlink(missing_ok=True)


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
