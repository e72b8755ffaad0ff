"""Dataset uploads through /api/v1/datasets: good sets, mislabelled and hostile archives, teams, races."""

from __future__ import annotations

import io
import json
import stat
import threading
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from PIL import Image

from core.errors import Conflict
from evalsets.models import Dataset
from evalsets.services import dataset_create, dataset_materialize
from inference import storage

pytestmark = pytest.mark.django_db


def png(colour: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (40, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, "PNG")
    return buffer.getvalue()


def zipped(entries: dict[str, bytes | None]) -> bytes:
    """A zip of ``name -> content``; ``None`` makes a directory entry."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in entries.items():
            if content is None:
                zf.writestr(zipfile.ZipInfo(name), b"")
            else:
                zf.writestr(name, content)
    return buffer.getvalue()


def upload(client: Client, name: str, kind: str, content: bytes, filename: str = "set.zip"):
    body = {"name": name, "kind": kind, "file": SimpleUploadedFile(filename, content)}
    return client.post("/api/v1/datasets", body, format="multipart")


def stored_files() -> list[Path]:
    """Every file in the store (blobs and staging): what a refused upload must not leave behind."""
    root = storage.root()
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def refused(response, message: str) -> None:
    assert response.status_code == 422, response.content
    assert message in response.json()["error"]["message"], response.json()
    assert not Dataset.objects.exists() and stored_files() == []


CLASSES = {"cat/1.png": png((200, 30, 30)), "cat/2.png": png((190, 40, 30)), "dog/1.png": png((20, 30, 200))}


def test_a_folder_set_is_stored_with_counts_and_thumbnails_and_laid_out_for_jobs(owner_client, tmp_path):
    r = upload(
        owner_client,
        "pets",
        "images",
        zipped({"pets/": None, **{f"pets/{k}": v for k, v in CLASSES.items()}}),
    )
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["item_count"] == 3 and body["labelled"] and body["class_counts"] == {"cat": 2, "dog": 1}
    assert [s["label"] for s in body["samples"]] == ["cat", "dog"]
    assert all(s["thumbnail"].startswith("data:image/jpeg;base64,") for s in body["samples"])
    assert [d["name"] for d in owner_client.get("/api/v1/datasets").json()] == ["pets"]
    page = owner_client.get("/datasets/")
    assert page.status_code == 200 and b"data:image/jpeg;base64," in page.content and b"dog" in page.content
    folder = dataset_materialize(Dataset.objects.get(name="pets"), tmp_path / "pets")
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*.png")) == [
        "cat/1.png",
        "cat/2.png",
        "dog/1.png",
    ]
    assert Image.open(folder / "dog" / "1.png").getpixel((0, 0)) == (20, 30, 200)


def test_a_csv_labelled_set_and_a_flat_unlabelled_set(owner_client, tmp_path):
    csv = b"file,label\nimg/a.png,red\nimg/b.png,blue\n"
    r = upload(
        owner_client,
        "colours",
        "images",
        zipped({"labels.csv": csv, "img/a.png": png(), "img/b.png": png((0, 0, 255))}),
    )
    assert r.status_code == 201, r.content
    assert r.json()["class_counts"] == {"blue": 1, "red": 1}
    folder = dataset_materialize(Dataset.objects.get(name="colours"), tmp_path / "c")
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*.png")) == ["blue/b.png", "red/a.png"]
    flat = upload(owner_client, "flat", "images", zipped({"a.png": png(), "b.png": png()}))
    assert flat.status_code == 201 and flat.json()["labelled"] is False and flat.json()["item_count"] == 2


@pytest.mark.parametrize(
    "entries, message",
    [
        ({"stray.png": png(), **CLASSES}, "sit at the top level beside the class folders (stray.png)"),
        (
            {"labels.csv": b"a.png,red\nmissing.png,blue\n", "a.png": png()},
            "row 2 names 'missing.png', which the archive does not hold",
        ),
        ({"labels.csv": b"a.png,red\n", "a.png": png(), "b.png": png()}, "not in labels.csv (e.g. 'b.png')"),
        ({**CLASSES, "bird/": None}, "the class folder 'bird' holds no images"),
        ({**CLASSES, "dog/notes.txt": b"hello"}, "dog/notes.txt is not an image"),
        ({**CLASSES, "dog/fake.jpg": b"\xff\xd8 not really a jpeg"}, "dog/fake.jpg is not a readable image"),
        ({"a/b/c.png": png(), "a/c/d.png": png(), "x/y.png": png()}, "nested too deep"),
    ],
    ids=[
        "file-beside-folders",
        "csv-names-missing-file",
        "file-missing-from-csv",
        "empty-folder",
        "text-file",
        "fake-jpeg",
        "too-deep",
    ],
)
def test_mislabelled_sets_are_refused_with_the_reason_and_nothing_kept(owner_client, entries, message):
    refused(upload(owner_client, "bad", "images", zipped(entries)), message)


def _symlink_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        link = zipfile.ZipInfo("cat/evil.png")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
        zf.writestr("cat/1.png", png())
    return buffer.getvalue()


@pytest.mark.parametrize(
    "content, message",
    [
        (zipped({"../escape/1.png": png(), "cat/1.png": png()}), "points outside the archive folder"),
        (_symlink_zip(), "is a symbolic link"),
        (zipped({"cat/bomb.png": b"\0" * (8 * 1024 * 1024)}), "refused as a zip bomb"),
        (b"PK\x03\x04 truncated", "is a zip archive"),
        (zipped({}), "the archive holds no images"),
    ],
    ids=["traversal", "symlink", "bomb", "not-a-zip", "empty"],
)
def test_hostile_or_empty_archives_are_refused(owner_client, content, message):
    refused(upload(owner_client, "bad", "images", content), message)


def test_text_and_prompt_sets_are_checked_line_by_line(owner_client, tmp_path):
    texts = b'{"text": "a cat", "label": "pets"}\n\n{"text": "stocks fell", "label": "news"}\n{"text": "a dog", "label": "pets"}\n'
    r = upload(owner_client, "news", "texts", texts, "t.jsonl")
    assert r.status_code == 201 and r.json()["class_counts"] == {"news": 1, "pets": 2}
    prompts = upload(
        owner_client,
        "chat",
        "prompts",
        b'{"prompt": "hello there"}\n{"prompt": "tell me a story"}\n',
        "p.jsonl",
    )
    assert prompts.status_code == 201 and prompts.json()["samples"][0]["text"] == "hello there"
    laid_out = dataset_materialize(Dataset.objects.get(name="chat"), tmp_path / "chat")
    assert [json.loads(line) for line in laid_out.read_text().splitlines()][1] == {"text": "tell me a story"}
    assert Dataset.objects.count() == 2


@pytest.mark.parametrize(
    "kind, content, message",
    [
        ("texts", b"", "the file holds no lines"),
        ("texts", b'{"text": "ok"}\n[1, 2]\n', "line 2 is not a JSON object"),
        (
            "texts",
            b'{"text": "ok", "label": "a"}\n{"text": "no label"}\n',
            "entry 2 has no label but others do",
        ),
        ("prompts", b'{"text": "not a prompt"}\n', 'needs a non-empty "prompt" string'),
        ("texts", zipped({"a.txt": b"x"}), "is a JSON Lines file, not a zip"),
        ("texts", b'{"text": "a\\u0000b"}\n', '"text" holds a NUL character'),
        ("texts", b"[" * 100_000 + b"\n", "line 1 is not JSON"),
    ],
    ids=["empty", "not-an-object", "label-missing", "prompt-key", "zip-as-text", "nul", "deep-nesting"],
)
def test_bad_text_sets_are_refused(owner_client, kind, content, message):
    refused(upload(owner_client, "bad", kind, content, "t.jsonl"), message)


def test_other_teams_see_nothing_and_viewers_cannot_write(owner_client, outsider, viewer):
    assert upload(owner_client, "pets", "images", zipped(CLASSES)).status_code == 201
    oscar = Client()
    oscar.force_login(outsider)
    assert oscar.get("/api/v1/datasets").json() == []
    assert oscar.get("/api/v1/datasets/pets").status_code == 404
    assert oscar.delete("/api/v1/datasets/pets").status_code == 404
    assert b"pets" not in oscar.get("/datasets/").content
    vera = Client()
    vera.force_login(viewer)
    assert vera.get("/api/v1/datasets/pets").json()["item_count"] == 3
    assert upload(vera, "mine", "images", zipped(CLASSES)).status_code == 403
    assert vera.delete("/api/v1/datasets/pets").status_code == 403
    assert Dataset.objects.filter(name="pets").exists()


def test_delete_removes_the_row_and_its_stored_file(owner_client, django_capture_on_commit_callbacks):
    sha = upload(owner_client, "pets", "images", zipped(CLASSES)).json()["sha256"]
    assert storage.blob_path(sha).exists()
    with django_capture_on_commit_callbacks(execute=True):
        assert owner_client.delete("/api/v1/datasets/pets").status_code == 204
    assert not Dataset.objects.exists() and not storage.blob_path(sha).exists()
    assert (
        upload(owner_client, "pets", "images", zipped(CLASSES)).status_code == 201
    )  # the name is free again


def test_an_existing_name_is_a_conflict(owner_client):
    assert upload(owner_client, "pets", "images", zipped(CLASSES)).status_code == 201
    r = upload(owner_client, "pets", "texts", b'{"text": "x"}\n', "t.jsonl")
    assert r.status_code == 409 and "already has a dataset named 'pets'" in r.json()["error"]["message"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_uploads_with_the_same_name_store_one(owner, team):
    barrier, outcomes = threading.Barrier(2), []

    def one(colour: tuple[int, int, int]) -> None:
        try:
            barrier.wait()
            entries = {"cat/1.png": png(colour), "dog/1.png": png()}
            dataset_create(team=team, actor=owner, name="pets", kind="images", chunks=[zipped(entries)])
            outcomes.append("stored")
        except Conflict:
            outcomes.append("conflict")
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(c,)) for c in ((1, 2, 3), (4, 5, 6))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["conflict", "stored"]
    dataset = Dataset.objects.get(name="pets")
    assert [p.name for p in stored_files()] == [dataset.sha256]  # the loser left no blob and no staging file


def test_the_page_uploads_and_deletes_through_the_same_service(owner_client):
    body = {"name": "pets", "kind": "images", "file": SimpleUploadedFile("p.zip", zipped(CLASSES))}
    r = owner_client.post("/datasets/", body, follow=True)
    assert r.status_code == 200 and b"dataset pets stored: 3 items" in r.content
    assert b'id="dataset-pets"' in r.content and b"<td>cat</td><td>2</td>" in r.content
    bad = {
        "name": "bad",
        "kind": "images",
        "file": SimpleUploadedFile("b.zip", zipped({"x.png": png(), **CLASSES})),
    }
    r = owner_client.post("/datasets/", bad, follow=True)
    assert b"sit at the top level beside the class folders" in r.content
    r = owner_client.post("/datasets/pets/delete", follow=True)
    assert b"dataset pets deleted" in r.content and not Dataset.objects.exists()


def test_an_upload_over_the_size_cap_is_413_and_leaves_nothing(owner_client, settings):
    settings.DATASET_MAX_BYTES = 2048
    r = upload(owner_client, "big", "texts", b'{"text": "%s"}\n' % (b"x" * 4096), "t.jsonl")
    assert r.status_code == 413 and r.json()["error"]["type"] == "payload_too_large"
    assert not Dataset.objects.exists() and stored_files() == []
