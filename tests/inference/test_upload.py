"""Uploading models through /api/v1/models: what is accepted, what is refused, and that refusals leave nothing."""

import threading
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client

from inference.models import Artifact, ModelVersion, RegisteredModel
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.django_db


@pytest.fixture
def colour_onnx(tmp_path) -> bytes:
    return colour_classifier(tmp_path / "c.onnx").read_bytes()


def upload(client, data: bytes, **fields):
    from django.core.files.uploadedfile import SimpleUploadedFile

    form = {"name": "colours", "task": "image-classification", "labels": "\n".join(COLOURS)} | fields
    form["file"] = SimpleUploadedFile("model.onnx", data)
    return client.post("/api/v1/models", form)


def stored_files(settings) -> list[Path]:
    root = Path(settings.STORAGE_DIR)
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def test_valid_classifier_is_stored_with_its_signature(owner_client, colour_onnx, settings):
    r = upload(owner_client, colour_onnx)
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["label"] == "colours:1" and body["labels_count"] == 3 and body["format"] == "onnx"
    assert body["inputs"] == [{"name": "pixel_values", "dtype": "float32", "shape": ["batch", 3, 16, 16]}]
    assert body["preprocessing"]["input_size"] == [16, 16]
    stored = {p.name for p in stored_files(settings)}
    assert body["sha256"] in stored and len(stored) == 2  # the model and its labels.json
    assert {a["filename"] for a in body["artifacts"]} == {"model.onnx", "labels.json"}


def test_same_content_twice_makes_two_versions_but_one_copy_of_each_file(owner_client, colour_onnx, settings):
    assert upload(owner_client, colour_onnx).status_code == 201
    second = upload(owner_client, colour_onnx)
    assert second.status_code == 201 and second.json()["number"] == 2
    assert len(stored_files(settings)) == 2  # model + labels, stored once for both versions


@pytest.mark.parametrize(
    "payload, message",
    [
        (b"", "not a valid ONNX model"),
        (b"\x08\x07" + b"garbage" * 50, "ONNX"),
    ],
)
def test_invalid_onnx_is_refused_and_nothing_is_stored(owner_client, payload, message, settings):
    r = upload(owner_client, payload)
    assert r.status_code == 422
    assert message in r.json()["error"]["message"]
    assert not RegisteredModel.objects.exists() and not Artifact.objects.exists()
    assert stored_files(settings) == []


def test_label_count_must_match_the_model(owner_client, colour_onnx, settings):
    r = upload(owner_client, colour_onnx, labels="cat\ndog")
    assert r.status_code == 422 and "3 classes but 2 labels" in r.json()["error"]["message"]
    assert stored_files(settings) == [] and not ModelVersion.objects.exists()


def test_declared_task_must_match_the_model(owner_client, colour_onnx):
    r = upload(owner_client, colour_onnx, task="feature-extraction")
    assert r.status_code == 422 and "input_ids" in r.json()["error"]["message"]
    r = upload(owner_client, colour_onnx, task="text-to-video")
    assert r.status_code == 422 and "unknown task" in r.json()["error"]["message"]


def test_hostile_names_and_preprocessing_are_refused(owner_client, colour_onnx):
    for name in ["../etc", "Upper", "a" * 80, "", "drop table;"]:
        r = upload(owner_client, colour_onnx, name=name)
        assert r.status_code == 422, name
    r = upload(owner_client, colour_onnx, preprocessing='{"mean": [1, 2]}')
    assert r.status_code == 422 and "mean" in r.json()["error"]["message"]
    r = upload(owner_client, colour_onnx, preprocessing="{not json")
    assert r.status_code == 422


def test_upload_over_the_limit_is_413_and_leaves_no_partial_file(owner_client, colour_onnx, settings):
    settings.MAX_UPLOAD_BYTES = len(colour_onnx) - 1
    r = upload(owner_client, colour_onnx)
    assert r.status_code == 413 and r.json()["error"]["type"] == "payload_too_large"
    assert stored_files(settings) == []


def test_viewer_cannot_upload_and_outsider_cannot_see(client, viewer, outsider, owner_client, colour_onnx):
    client.force_login(viewer)
    r = upload(client, colour_onnx)
    assert r.status_code == 403
    assert upload(owner_client, colour_onnx).status_code == 201
    other = Client()
    other.force_login(outsider)
    assert other.get("/api/v1/models").json() == []
    assert other.get("/api/v1/models/colours").status_code == 404


def test_embedding_model_needs_a_tokenizer(owner_client, tmp_path):
    from onnx import TensorProto, helper, save

    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["input_ids"], ["h"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["h", "axes"], ["last_hidden_state"]),
        ],
        "emb",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "t"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["b", "t", 1])],
        initializer=[helper.make_tensor("axes", TensorProto.INT64, [1], [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, tmp_path / "e.onnx")
    r = upload(
        owner_client, (tmp_path / "e.onnx").read_bytes(), name="emb", task="feature-extraction", labels=""
    )
    assert r.status_code == 422 and "tokenizer" in r.json()["error"]["message"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_uploads_of_one_name_get_distinct_version_numbers(owner, colour_onnx):
    results = []

    def go():
        c = Client()
        c.force_login(owner)
        try:
            results.append(upload(c, colour_onnx).status_code)
        finally:
            connection.close()  # each thread has its own connection; close it so the test database can go

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [201] * 4
    assert sorted(ModelVersion.objects.values_list("number", flat=True)) == [1, 2, 3, 4]
