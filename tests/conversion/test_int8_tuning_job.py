"""The INT8 job tunes through POST /api/v1/jobs: meets a target, says so when it cannot, stops when cancelled.

The jobs run in this process (``job_execute``, as the Celery task calls it) against real PostgreSQL;
each trial runs in the sandbox on a tiny model whose last layer cannot be quantized (see
``outlier_classifier``), so the search has to reach "keep the first and last layers in float".
"""

from __future__ import annotations

import io
import json
import re
import threading
import time
import zipfile

import numpy as np
import pytest
from django.db import connection
from django.urls import reverse

from inference.jobs.runner import job_execute
from inference.models import Job, ModelVersion
from inference.services.jobs import job_cancel
from inference.services.registry import UploadedModel, model_version_upload
from tests.support.tiny_models import outlier_classifier

pytestmark = pytest.mark.django_db(transaction=True)
FIXED = {"method": "MinMax", "activation_type": "QUInt8", "quant_format": "QDQ", "weight_type": "QInt8"}
TOP1 = [{"metric": "top1_agreement", "min": 0.99}]


@pytest.fixture
def outlier_version(owner, team, tmp_path):
    path = outlier_classifier(tmp_path / "m.onnx")
    upload = UploadedModel(
        name="outlier",
        task="image-classification",
        model_chunks=[path.read_bytes()],
        labels_text="\n".join(f"class {i}" for i in range(6)),
    )
    return model_version_upload(team=team, actor=owner, upload=upload)


@pytest.fixture
def photo_set(owner, team):
    """A team dataset of 48 small noisy colour images: the jobs validate on it (quicker than built-in)."""
    from PIL import Image

    from evalsets.services import dataset_create

    rng = np.random.default_rng(7)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        for index in range(48):
            pixels = np.clip(rng.integers(0, 256, 3) + rng.normal(0, 40, (24, 24, 3)), 0, 255)
            image = io.BytesIO()
            Image.fromarray(pixels.astype(np.uint8)).save(image, format="PNG")
            zipped.writestr(f"{index:02d}.png", image.getvalue())
    dataset = dataset_create(
        team=team, actor=owner, name="noisy-colours", kind="images", chunks=[archive.getvalue()]
    )
    return dataset.pk


def start(client, version, **options) -> int:
    r = client.post(
        "/api/v1/jobs",
        {"version_id": version.pk, "kind": "quantize_int8", "options": options},
        content_type="application/json",
    )
    assert r.status_code == 201, r.content
    return r.json()["id"]


def test_tuning_meets_its_target_in_fewer_than_max_trials(owner_client, outlier_version, photo_set):
    fixed = FIXED | {"keep_float_edges": False, "reduce_range": False}  # left to vary: float_nodes
    job_id = start(owner_client, outlier_version, **fixed, target=TOP1, max_trials=4, dataset_id=photo_set)
    assert job_execute(job_id) == "succeeded", Job.objects.get(pk=job_id).error
    body = owner_client.get(f"/api/v1/jobs/{job_id}").json()
    tuning = body["result"]["tuning"]
    trials = tuning["trials"]
    assert tuning["target_met"] is True and 1 < len(trials) < 4
    assert not trials[0]["met"] and trials[-1]["met"] and tuning["chosen"] == trials[-1]["trial"]
    assert all({"options", "latency_ms", "speedup", "agreement", "met"} <= set(t) for t in trials)
    assert (
        tuning["targets"] == ["top1_agreement >= 0.99"] and tuning["hardware"]["instruction_sets"] is not None
    )
    assert (
        body["result"]["agreement"]["top1_agreement"] >= 0.99 and body["result"]["agreement"]["count"] == 48
    )
    assert tuning["dataset"]["name"] == "noisy-colours"
    assert trials[-1]["options"]["float_nodes"] > 0 and "classifier" in trials[-1]["excluded"]
    assert trials[-1]["sensitivity"][0]["node"] == "classifier"  # the per-node error analysis found it
    child = ModelVersion.objects.get(pk=body["output_id"])
    assert child.precision == "int8" and child.report["tuning"]["chosen"] == tuning["chosen"]
    assert (
        "met the target"
        in Job.objects.get(pk=job_id).log_lines.filter(message__contains="trial").last().message
    )
    page = owner_client.get(reverse("inference:model-detail", args=["outlier"]))
    points = json.loads(re.search(rb'id="tradeoff-points"[^>]*>(.*?)</script>', page.content, re.S)[1])
    tried = [p for p in points if p.get("trial")]
    assert [p["trial"] for p in tried] == [t["trial"] for t in trials]
    assert [p["chosen"] for p in tried] == [t["trial"] == tuning["chosen"] for t in trials]


def test_an_unreachable_target_ends_with_the_honest_answer_and_the_best_candidate(
    owner_client, outlier_version, photo_set
):
    fixed = FIXED | {"keep_float_edges": False, "float_nodes": 0}
    job_id = start(owner_client, outlier_version, **fixed, target=TOP1, max_trials=2, dataset_id=photo_set)
    assert job_execute(job_id) == "succeeded", Job.objects.get(pk=job_id).error
    job = Job.objects.get(pk=job_id)
    tuning = job.result["tuning"]
    assert tuning["target_met"] is False and len(tuning["trials"]) == 2
    assert not any(t["met"] for t in tuning["trials"])
    assert tuning["summary"].startswith(
        "no configuration met the target (top1_agreement >= 0.99) in 2 trials"
    )
    assert job.output is not None and job.output.report["tuning"]["target_met"] is False
    assert job.log_lines.filter(message__startswith="no configuration met the target").exists()
    count = job.result["disagreements"]["count"]
    assert count > 0  # the kept candidate misses the target: some photos disagree
    page = owner_client.get(reverse("inference:model-detail", args=["outlier"])).content.decode()
    assert f"/jobs/{job_id}/disagreements.json" in page and f"{count} disagreement" in page


def test_cancelling_a_tuning_job_mid_search_ends_it_cancelled(
    owner, team, owner_client, outlier_version, photo_set
):
    fixed = {"method": "MinMax", "keep_float_edges": False, "float_nodes": 0}  # 5 candidates, none meets
    job_id = start(owner_client, outlier_version, **fixed, target=TOP1, max_trials=6, dataset_id=photo_set)
    ended: list[str] = []

    def work() -> None:
        try:
            ended.append(job_execute(job_id))
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    deadline = time.monotonic() + 120
    # Cancel once the search has begun (a trial is running); five trials leave seconds to spare.
    while not (message := Job.objects.get(pk=job_id).message or "").startswith("trial "):
        assert worker.is_alive() and time.monotonic() < deadline, message
        time.sleep(0.05)
    job_cancel(team=team, actor=owner, job=Job.objects.get(pk=job_id))
    worker.join(timeout=60)
    job = Job.objects.get(pk=job_id)
    assert ended == ["cancelled"] and job.status == "cancelled" and job.output is None
    assert list(outlier_version.model.versions.values_list("number", flat=True)) == [1]
