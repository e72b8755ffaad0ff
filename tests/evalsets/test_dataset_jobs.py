"""Jobs on a team's dataset: the evaluate kind compares on it and its report names it."""

from __future__ import annotations

import pytest

from evalsets.services import dataset_create
from inference.jobs.runner import job_execute
from inference.models import Job
from inference.services.jobs import job_start
from inference.services.registry import UploadedModel, model_version_upload
from tests.evalsets.test_dataset_uploads import png, zipped
from tests.support.tiny_models import COLOURS, colour_classifier

pytestmark = pytest.mark.django_db


def test_evaluate_on_an_uploaded_image_set_names_it_and_counts_its_images(owner, team, tmp_path):
    path = colour_classifier(tmp_path / "c.onnx")
    upload = UploadedModel(
        name="colours",
        task="image-classification",
        model_chunks=[path.read_bytes()],
        labels_text="\n".join(COLOURS),
    )
    parent = model_version_upload(team=team, actor=owner, upload=upload)
    optimize = job_start(team=team, actor=owner, source=parent, kind="optimize", options={"level": "basic"})
    assert job_execute(optimize.pk) == "succeeded"
    child = Job.objects.get(pk=optimize.pk).output
    entries = {
        "red/1.png": png((220, 10, 10)),
        "red/2.png": png((200, 40, 30)),
        "green/1.png": png((10, 220, 10)),
        "blue/1.png": png((10, 10, 220)),
    }
    rgb = dataset_create(team=team, actor=owner, name="rgb", kind="images", chunks=[zipped(entries)])
    texts = dataset_create(team=team, actor=owner, name="words", kind="texts", chunks=[b'{"text": "red"}\n'])

    job = job_start(team=team, actor=owner, source=child, kind="evaluate", options={"dataset_id": rgb.pk})
    assert job_execute(job.pk) == "succeeded", Job.objects.get(pk=job.pk).error
    result = Job.objects.get(pk=job.pk).result
    assert (
        result["dataset"]["name"] == "rgb"
        and result["dataset"]["count"] == 4
        and result["dataset"]["labelled"]
    )
    assert result["agreement"]["count"] == 4 and result["agreement"]["top1_agreement"] == 1.0

    wrong = job_start(team=team, actor=owner, source=child, kind="evaluate", options={"dataset_id": texts.pk})
    assert job_execute(wrong.pk) == "failed"
    assert "is of kind texts; this job needs one of kind images" in Job.objects.get(pk=wrong.pk).error
