"""Rollouts in-process: Olivia's deployment ``colours`` of the colour classifier on ``node_hk_cpu`` (rows;
replica states are set as node agents report them), with further versions of the same model."""

from __future__ import annotations

import pytest
from django.test import Client

from inference.models import Deployment, ModelVersion, Replica
from inference.services.deployments import deployment_reconcile
from inference.services.registry import UploadedModel, model_version_upload
from tests.support import hardware
from tests.support.tiny_models import COLOURS, colour_classifier


@pytest.fixture
def node_hk_cpu(db):
    return hardware.node_hk_cpu()


@pytest.fixture
def new_version(team, owner, tmp_path):
    """``new_version()``: the next version of model ``colours`` (the colour classifier at another size)."""
    sizes = iter(range(8, 64))

    def make() -> ModelVersion:
        size = next(sizes)
        path = colour_classifier(tmp_path / f"colours-{size}.onnx", size=size)
        upload = UploadedModel(name="colours", task="image-classification", model_chunks=[path.read_bytes()],
                               labels_text="\n".join(COLOURS))  # fmt: skip
        return model_version_upload(team=team, actor=owner, upload=upload)

    return make


@pytest.fixture
def colours(owner_client: Client, new_version, node_hk_cpu) -> Deployment:
    """Deployment ``colours`` of version 1 with two ready replicas."""
    v1 = new_version()
    created = owner_client.post("/api/v1/deployments", {"name": "colours", "model_version_id": v1.pk,
                                "replicas": 2}, content_type="application/json")  # fmt: skip
    assert created.status_code == 201, created.content
    deployment_reconcile(created.json()["id"])
    for r in Replica.objects.all():  # as the agent reports runners that answer /readyz
        Replica.objects.filter(pk=r.pk).update(state="ready", url=f"http://127.0.0.1:{20000 + r.pk}")
    return Deployment.objects.get(name="colours")
