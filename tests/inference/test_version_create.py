"""``version_create``, the one way a version is stored: numbering under concurrency, one labels cap."""

import threading

import pytest
from django.db import connection

from accounts.models import AuditEvent
from core.errors import Conflict, PayloadTooLarge
from inference import storage
from inference.models import Artifact, ModelVersion, RegisteredModel
from inference.services.registry import MAX_LABELS_FILE_BYTES, ModelRef, VersionFile, version_create


def _create(team, owner, path, labels=()):
    return version_create(
        model=ModelRef(team=team, name="racers", task="image-classification"),
        files=[VersionFile("model", "model.onnx", path=path)],
        labels=list(labels),
        fields={"lineage": {"source": "test"}},
        actor=owner,
        action="model_version.create",
    )


@pytest.mark.django_db(transaction=True)
def test_versions_created_at_once_for_one_model_get_distinct_numbers(owner, team, tmp_path):
    workers = 6
    paths = []
    for index in range(workers):
        paths.append(tmp_path / f"m{index}.bin")
        paths[-1].write_bytes(f"model {index}".encode())
    start, numbers, errors = threading.Barrier(workers), [], []

    def create(path):
        try:
            start.wait()
            numbers.append(_create(team, owner, path).number)
        except Exception as exc:  # collected: an assertion in a thread would be lost
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(p,)) for p in paths]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(numbers) == list(range(1, workers + 1))
    assert RegisteredModel.objects.filter(team=team, name="racers").count() == 1
    assert ModelVersion.objects.filter(model__name="racers").count() == workers
    assert AuditEvent.objects.filter(action="model_version.create").count() == workers


@pytest.mark.django_db
def test_a_version_stores_its_files_and_labels_and_is_audited(owner, team, tmp_path):
    path = tmp_path / "m.bin"
    path.write_bytes(b"weights")
    version = _create(team, owner, path, labels=["cat", "dog"])
    files = {a.filename: a for a in version.artifacts.all()}
    assert set(files) == {"model.onnx", "labels.json"} and version.sha256 == files["model.onnx"].sha256
    assert storage.blob_path(files["labels.json"].sha256).read_text() == '["cat", "dog"]'
    assert version.size_bytes == len(b"weights") and path.exists()  # the caller's file is copied, not moved


@pytest.mark.django_db
def test_labels_over_the_one_cap_are_refused_and_nothing_is_left(owner, team, tmp_path, settings):
    path = tmp_path / "m.bin"
    path.write_bytes(b"weights")
    too_many = ["x" * 1000] * (MAX_LABELS_FILE_BYTES // 1000 + 1)
    with pytest.raises(PayloadTooLarge):
        _create(team, owner, path, labels=too_many)
    assert not ModelVersion.objects.exists() and not Artifact.objects.exists()
    stored = settings.STORAGE_DIR / "sha256"
    assert not stored.exists() or not [p for p in stored.rglob("*") if p.is_file()]


@pytest.mark.django_db
def test_a_version_of_another_task_is_refused(owner, team, tmp_path):
    path = tmp_path / "m.bin"
    path.write_bytes(b"weights")
    _create(team, owner, path)
    with pytest.raises(Conflict, match="already exists with task image-classification"):
        version_create(
            model=ModelRef(team=team, name="racers", task="feature-extraction"),
            files=[VersionFile("model", "model.onnx", path=path)],
            labels=[],
            fields={},
            actor=owner,
            action="model_version.create",
        )
    assert ModelVersion.objects.count() == 1
