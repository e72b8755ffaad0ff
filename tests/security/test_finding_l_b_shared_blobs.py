"""Review finding L-B: the model store is content-addressed across teams, but a failed import deleted its
blobs when no *Artifact* named them, ignoring datasets and other jobs' pending uploads. Team B could so
delete team A's dataset file (its normalised JSONL is deterministic) or kill team A's queued import by
uploading the same bytes in an import bound to fail. Every deletion path now asks ``blobs_in_use``."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from evalsets.models import Dataset
from evalsets.services import dataset_delete
from inference import storage
from inference.jobs.runner import job_execute
from inference.models import Job
from inference.services.registry import version_discard
from tests.support import people

pytestmark = pytest.mark.django_db

JSONL = b'{"text": "hello"}\n'
CHECKPOINT = b"\x00" * 64 + b"a public checkpoint, byte for byte"


def client_of(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def team_b_client(db):
    return client_of(people.outsider())  # Oscar, owner of globex: no member of acme


def import_post(client: Client, name: str, files: list[tuple[str, bytes]]) -> int:
    uploads = [SimpleUploadedFile(filename, data) for filename, data in files]
    r = client.post("/api/v1/models", {"name": name, "task": "", "files": uploads})
    assert r.status_code == 202, r.content
    return r.json()["id"]


def dataset_post(client: Client, name: str, data: bytes) -> dict:
    upload = SimpleUploadedFile("texts.jsonl", data)
    r = client.post("/api/v1/datasets", {"name": name, "kind": "texts", "file": upload})
    assert r.status_code == 201, r.content
    return r.json()


def failed_import(client: Client, files: list[tuple[str, bytes]]) -> Job:
    job = Job.objects.get(pk=import_post(client, "b", files))
    assert job_execute(job.pk) == "failed"
    return job


def test_l_b_a_failed_import_keeps_another_teams_dataset_blob(owner_client, team_b_client) -> None:
    dataset_post(owner_client, "greetings", JSONL)
    sha = Dataset.objects.get(name="greetings").sha256
    stored = storage.blob_path(sha).read_bytes()  # the normalised file team B can rebuild from public data
    assert storage.exists(sha)

    failed_import(team_b_client, [("that.jsonl", stored), ("x.json", b"{}")])
    assert storage.exists(sha), "team B's failed import deleted team A's dataset file"
    assert storage.blob_path(sha).read_bytes() == stored


def test_l_b_a_failed_import_keeps_another_teams_pending_import(owner_client, team_b_client) -> None:
    queued = Job.objects.get(
        pk=import_post(owner_client, "a", [("model.bin", CHECKPOINT), ("config.json", b"{}")])
    )
    shas = [f["sha256"] for f in queued.options["files"]]
    assert queued.status == "queued" and all(storage.exists(s) for s in shas)

    own = failed_import(team_b_client, [("model.bin", CHECKPOINT), ("config.json", b"{}")])
    assert all(storage.exists(s) for s in shas), "team B's failed import deleted team A's queued upload"
    # The failed import still cleans up what only it held.
    alone = failed_import(team_b_client, [("mine.bin", b"only team B has these bytes"), ("x.json", b"{}")])
    assert not storage.exists(alone.options["files"][0]["sha256"])
    assert own.team_id != queued.team_id


def test_l_b_a_deleted_dataset_keeps_a_blob_a_pending_import_names(
    owner, team_b_client, django_capture_on_commit_callbacks
) -> None:
    """The dataset's own deletion path asks the same question: another team's queued import holds it."""
    data = json.dumps({"text": "hello"}).encode() + b"\n"
    payload = dataset_post(team_b_client, "mine", data)
    dataset = Dataset.objects.get(name="mine")
    sha = dataset.sha256
    owner_client = client_of(owner)
    import_post(owner_client, "a", [("that.jsonl", storage.blob_path(sha).read_bytes()), ("x.json", b"{}")])

    with django_capture_on_commit_callbacks(execute=True):
        dataset_delete(team=dataset.team, actor=dataset.created_by, dataset=dataset)
    assert payload["name"] == "mine" and storage.exists(sha), (
        "the deleted dataset took a queued import's file"
    )


def test_l_b_a_discarded_version_keeps_a_blob_another_teams_import_names(
    colour_version, team_b_client, django_capture_on_commit_callbacks
) -> None:
    """``version_discard`` (a job's output dropped) asks the same question."""
    sha = colour_version.artifacts.get(role="model").sha256
    import_post(team_b_client, "b", [("model.onnx", storage.blob_path(sha).read_bytes()), ("x.json", b"{}")])

    with django_capture_on_commit_callbacks(execute=True):
        version_discard(version=colour_version)
    assert not type(colour_version).objects.filter(pk=colour_version.pk).exists()
    assert storage.exists(sha), "discarding team A's version deleted team B's queued upload"
