"""Accuracy against a labelled set, the disagreements download and the accuracy_drop target (issue 12).

Jobs start through POST /api/v1/jobs and run in this process (``job_execute``, as the Celery task calls
it) against real PostgreSQL and the sandbox, on the tiny colour classifier (red, green, blue).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from django.test import Client
from onnx import numpy_helper

from evalsets.services import dataset_create
from inference.jobs.runner import job_execute
from inference.models import Job
from inference.services.registry import UploadedModel, model_version_upload, version_derive
from tests.evalsets.test_dataset_uploads import png, zipped
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.django_db(transaction=True)
# Folder names are matched to the model's labels case-insensitively ("Blue" is "blue"); "purple" is
# no label of the model: it is counted apart and left out of the accuracy.
COLOUR_SET = {
    "red/1.png": png((220, 10, 10)),
    "red/2.png": png((200, 40, 30)),
    "green/1.png": png((10, 220, 10)),
    "Blue/1.png": png((10, 10, 220)),
    "Blue/2.png": png((30, 40, 200)),
    "purple/1.png": png((120, 20, 200)),
}


@pytest.fixture
def colours(owner, team, tmp_path):
    path = colour_classifier(tmp_path / "c.onnx")
    upload = UploadedModel(
        name="colours",
        task="image-classification",
        model_chunks=[path.read_bytes()],
        labels_text="\n".join(COLOURS),
    )
    return model_version_upload(team=team, actor=owner, upload=upload)


@pytest.fixture
def swapped_child(owner, colours, tmp_path):
    """A child of the colour model whose green and blue outputs are swapped: it misreads green and blue."""
    model = onnx.load(colour_classifier(tmp_path / "swapped.onnx"))
    weights = next(i for i in model.graph.initializer if i.name == "weights")
    weights.CopyFrom(numpy_helper.from_array(np.eye(3, dtype=np.float32)[:, [0, 2, 1]] * 10.0, "weights"))
    onnx.save(model, tmp_path / "swapped.onnx")
    return version_derive(
        parent=colours,
        actor=owner,
        model_path=tmp_path / "swapped.onnx",
        precision="fp32",
        lineage={"source": "test"},
        report={},
    )


def dataset(owner, team, name: str, entries: dict[str, bytes | None]) -> int:
    return dataset_create(team=team, actor=owner, name=name, kind="images", chunks=[zipped(entries)]).pk


def start(client, version, kind: str, **options):
    return client.post(
        "/api/v1/jobs",
        {"version_id": version.pk, "kind": kind, "options": options},
        content_type="application/json",
    )


def run(client, version, kind: str, **options) -> Job:
    r = start(client, version, kind, **options)
    assert r.status_code == 201, r.content
    job_execute(r.json()["id"])
    return Job.objects.get(pk=r.json()["id"])


def test_a_labelled_set_gives_accuracies_a_drop_and_downloadable_disagreements(
    owner, team, owner_client, outsider, swapped_child
):
    job = run(owner_client, swapped_child, "evaluate", dataset_id=dataset(owner, team, "rgb", COLOUR_SET))
    assert job.status == "succeeded", job.error
    agreement = owner_client.get(f"/api/v1/jobs/{job.pk}").json()["result"]["agreement"]
    accuracy = agreement["accuracy"]
    assert accuracy["labelled_count"] == 5 and accuracy["unknown_label_count"] == 1
    assert accuracy["parent"] == {"top1_accuracy": 1.0, "top5_accuracy": 1.0}
    assert (
        accuracy["child"]["top1_accuracy"] == pytest.approx(0.4) and accuracy["child"]["top5_accuracy"] == 1.0
    )
    assert agreement["accuracy_drop"] == pytest.approx(60.0)
    assert "disagreements" not in agreement and agreement["count"] == 6

    page = owner_client.get(f"/jobs/{job.pk}/").content.decode()
    assert "4 examples where the converted model" in page and f"/jobs/{job.pk}/disagreements.json" in page
    r = owner_client.get(f"/jobs/{job.pk}/disagreements.json")
    assert r.status_code == 200 and 'filename="job-' in r["Content-Disposition"]
    body = json.loads(r.content)
    assert body["count"] == 4 and body["of"] == 6 and body["dataset"]["name"] == "rgb"
    blue = next(item for item in body["items"] if item["id"] == "Blue/1.png")
    assert (
        blue["true_label"] == "Blue"
        and blue["parent"]["label"] == "blue"
        and blue["child"]["label"] == "green"
    )
    assert blue["parent"]["probability"] > 0.9
    assert body["per_class"]["Blue"] == {
        "count": 2,
        "disagreements": 2,
        "parent_correct": 2,
        "child_correct": 0,
    }
    assert (
        body["per_class"]["red"]["disagreements"] == 0 and body["per_class"]["purple"]["parent_correct"] == 0
    )
    assert body["accuracy"]["child"]["top1_accuracy"] == pytest.approx(0.4)

    other = Client()
    other.force_login(outsider)
    assert other.get(f"/jobs/{job.pk}/disagreements.json").status_code == 404


def test_a_set_whose_labels_the_model_does_not_know_is_refused(owner, team, owner_client, swapped_child):
    pets = dataset(owner, team, "pets", {"cat/1.png": png((200, 30, 30)), "Dog/1.png": png((30, 30, 200))})
    job = run(owner_client, swapped_child, "evaluate", dataset_id=pets)
    assert job.status == "failed" and job.output is None
    assert job.error == (
        "none of the labels of dataset 'pets' (Dog, cat) is one of the model's 3 labels (red, green, blue); "
        "labels are matched case-insensitively"
    )
    assert owner_client.get(f"/jobs/{job.pk}/disagreements.json").status_code == 404


def test_an_accuracy_drop_target_needs_a_labelled_set_and_is_met_on_one(owner, team, owner_client, colours):
    target = [{"metric": "accuracy_drop", "max": 1.0}]
    r = start(owner_client, colours, "quantize_int8", target=target)
    assert r.status_code == 422
    assert (
        "accuracy_drop target needs a labelled dataset: give options.dataset_id"
        in r.json()["error"]["message"]
    )

    flat = dataset(owner, team, "flat", {"a.png": png((200, 30, 30)), "b.png": png((30, 200, 30))})
    refused = run(owner_client, colours, "quantize_int8", target=target, dataset_id=flat)
    assert refused.status == "failed" and refused.error.endswith(
        "whose labels the model knows: dataset 'flat' has no labels"
    )

    labelled = dataset(owner, team, "rgb", COLOUR_SET)
    job = run(owner_client, colours, "quantize_int8", target=target, max_trials=3, dataset_id=labelled)
    assert job.status == "succeeded", job.error
    tuning, agreement = job.result["tuning"], job.result["agreement"]
    assert tuning["target_met"] is True and tuning["targets"] == ["accuracy_drop <= 1"]
    assert agreement["accuracy_drop"] <= 1.0 and agreement["accuracy"]["labelled_count"] == 5
    assert all("accuracy_drop" in t["agreement"] for t in tuning["trials"])
    assert (
        job.output is not None
        and job.output.report["agreement"]["accuracy"]["parent"]["top1_accuracy"] == 1.0
    )


def test_a_child_that_always_agrees_shows_no_disagreement_and_no_empty_download(owner, team, owner_client, colours,
                                                                               tmp_path):  # fmt: skip
    same = version_derive(parent=colours, actor=owner, model_path=colour_classifier(tmp_path / "same.onnx"),
                          precision="fp32", lineage={"source": "test"}, report={})  # fmt: skip
    job = run(owner_client, same, "evaluate", dataset_id=dataset(owner, team, "rgb", COLOUR_SET))
    assert job.status == "succeeded", job.error
    assert job.result["disagreements"]["count"] == 0
    page = owner_client.get(f"/jobs/{job.pk}/").content.decode()
    assert "No example where the converted model" in page and "disagreements.json" not in page
