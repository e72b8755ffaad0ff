"""The console collects stored blobs that no model version, dataset or job uses (after a grace period)."""

import os
import time

import pytest

from inference import storage
from inference.services.blobs import blobs_collect

pytestmark = pytest.mark.django_db


def stored(content: bytes, *, age_s: float = 0) -> str:
    staged = storage.stage([content], max_bytes=1 << 20)
    path, _ = storage.commit(staged)
    past = time.time() - age_s
    os.utime(path, (past, past))
    return staged.sha256


def test_unused_blobs_go_after_the_grace_period_and_used_ones_stay(colour_version, settings):
    used = [a.sha256 for a in colour_version.artifacts.all()]
    for sha in used:
        os.utime(storage.blob_path(sha), (time.time() - 7200,) * 2)
    orphan_old = stored(b"left behind by a failed upload", age_s=7200)
    orphan_new = stored(b"an upload whose row is not written yet")
    assert blobs_collect(grace_s=3600) == 1
    assert not storage.exists(orphan_old)
    assert storage.exists(orphan_new) and all(storage.exists(sha) for sha in used)


def test_a_reused_blob_is_fresh_again(settings):
    sha = stored(b"same bytes", age_s=7200)
    stored(b"same bytes")  # uploaded again: committing the same content touches the stored file
    assert blobs_collect(grace_s=3600) == 0 and storage.exists(sha)
